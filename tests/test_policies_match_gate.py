"""The n-gram match gate: a draft length per kind of match, learned, priced with measured costs."""

import math

import numpy as np
import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.drafters.ngram import find_ngram_match
from policies import StaticPolicy
from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.match_gate import MatchGate
from policies.outcome import StepOutcome
from tiny import loaded, tiny_llama

# verify seconds for k = 0..16 drafts, shaped like SmolLM2 on the 2-core CPU (ms: 32.6 for one
# token, ~38 for 2-3, ~63 for 9, ~70 for 17)
CPU_VERIFY = [0.0326, 0.0388, 0.0388] + [0.0388 + (0.0634 - 0.0388) * (k - 2) / 6 for k in range(3, 9)] + [
    0.0634 + (0.0702 - 0.0634) * (k - 8) / 8 for k in range(9, 17)]


def gate(max_k=16):
    return MatchGate(max_k, lambda n: CPU_VERIFY[: n + 1], half_life_steps=16.0, prior_rate=0.5, prior_weight=2.0,
                     shrink_weight=8.0)


def test_match_lookup_reports_order_and_ambiguity():
    assert find_ngram_match(np.array([1, 2, 3, 4, 9, 1, 2]), k=2) == ([3, 4], 2, False)
    assert find_ngram_match(np.array([5, 1, 5, 2, 5]), k=1) == ([2], 1, True)  # 5 -> 1, then 5 -> 2
    assert find_ngram_match(np.array([1, 2, 3]), k=3) == ([], 0, False)


def test_strong_matches_get_long_drafts_and_weak_ones_none():
    g = gate()
    for _ in range(30):
        g.learn(3, 16, 16)  # a copy run: every token of every 3-token match accepted
        g.learn(1, 2, 0, ambiguous=True)  # ambiguous 1-token matches: never
    assert g.keep(3, 16) == 16
    assert g.keep(1, 16, ambiguous=True) == 0
    assert g.keep(3, 5) == 5  # never more than the lookup found
    assert g.keep(None, 7) == 7  # not an n-gram draft: untouched


def test_a_cut_draft_still_teaches_its_match_kind():
    g = gate()
    for _ in range(30):
        g.learn(1, 2, 0)
    assert g.keep(1, 16) == 0
    for _ in range(40):  # decoding went on to produce the skipped draft's first token every time
        g.learn_skipped(1, True)
    assert g.keep(1, 16) > 0


def test_gated_speed_mixes_match_kinds_and_is_never_below_plain():
    g = gate()
    for _ in range(20):
        g.learn(1, 2, 0, ambiguous=True)
        g.note_miss()
    plain = 1 / CPU_VERIFY[0]
    g.keep(1, 16, ambiguous=True)  # counts one weak match
    assert g.tokens_per_s() == pytest.approx(plain)  # nothing worth drafting: gated = plain
    for _ in range(20):
        g.learn(3, 16, 16)
        g.keep(3, 16)
    assert g.tokens_per_s() > 1.5 * plain


def test_gate_needs_measured_costs_before_cutting():
    g = MatchGate(16, lambda n: [math.nan] * (n + 1), 16.0, 0.5, 2.0, 8.0)
    assert g.keep(1, 9) == 9
    assert math.isnan(g.tokens_per_s())


def test_a_gate_whose_costs_were_timed_at_zero_seconds_prices_nothing_instead_of_dividing_by_zero():
    g = MatchGate(16, lambda n: [0.0] * (n + 1), 16.0, 0.5, 2.0, 8.0)  # every step timed at 0 s
    g.note_miss()
    assert math.isnan(g.tokens_per_s())
    policy = AdaptivePolicy(["ngram"])  # the policy prices the drafter without the gate then
    policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.0))
    policy.observe(StepOutcome("ngram", 4, 0, 0, 1, 0.0, 0.0))  # a lookup miss
    policy.draft_gate("ngram").note_miss()
    assert policy.plans()["ngram"].k >= 1 and policy.decide().k >= 0


def test_adaptive_policy_learns_the_gate_from_outcomes_and_can_turn_it_off():
    policy = AdaptivePolicy(["ngram"])
    g = policy.draft_gate("ngram")
    for _ in range(30):
        policy.observe(StepOutcome("ngram", 16, 16, 16, 17, 1e-4, 0.07, 100, match_order=3))
        policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.0326, 100))
    assert g.keep(3, 16) == 16
    assert policy.plans()["ngram"].k == policy.config.max_k  # the gate chooses each length
    assert AdaptivePolicy(["ngram"], AdaptiveConfig(match_gate=False)).draft_gate("ngram") is None
    with pytest.raises(ValueError, match="match_gate must be true or false, got match_gate='no'"):
        AdaptiveConfig(match_gate="no")


def test_bench_reads_boolean_options():
    from adaptive_spec.bench import parse_config

    config = parse_config("adaptive:match_gate=false")
    assert config.make_policy().config.match_gate is False


PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3], [9, 9, 30, 31, 32, 9, 30], list(range(40, 60)) * 2]


def test_gated_adaptive_decoding_equals_plain_and_reports_matches():
    target = loaded(tiny_llama(seed=0))
    decoder = SpeculativeDecoder(target, [NgramDrafter()])
    policy = AdaptivePolicy(["ngram"])
    for prompt in PROMPTS * 2:  # the second pass runs on what the gate learned in the first
        plain = decoder.generate(prompt, max_new_tokens=40, policy=StaticPolicy("none", 0))
        gated = decoder.generate(prompt, max_new_tokens=40, policy=policy)
        assert gated.token_ids == plain.token_ids
        for step in gated.steps:
            assert (step.match_order is not None) == (step.drafter == "ngram" and step.proposed > 0)
    assert policy.draft_gate("ngram").seen  # the engine fed it every lookup


def test_request_lift_shortens_long_drafts_in_a_request_whose_drafts_fail_and_resets_per_request():
    g = gate()
    for _ in range(30):  # earlier requests copied verbatim: 3-token matches continue for 16 tokens
        g.learn(3, 16, 16)
        g.learn(2, 16, 12)
    g.start_request(16.0)
    assert g.request_lift() == 1.0
    assert g.keep(3, 16) == 16
    for _ in range(6):  # this request paraphrases: its 2-token matches keep failing early
        g.learn(2, 2, 0)
    assert g.request_lift() < 0.5
    assert g.keep(3, 16) < 4  # the 3-token kind has seen none of it, the lift has
    g.start_request(16.0)  # the next request is judged afresh
    assert g.request_lift() == 1.0


def test_request_lift_lengthens_drafts_in_a_request_that_beats_the_estimates():
    g = gate()
    for _ in range(30):
        g.learn(1, 8, 2)  # in earlier requests matches ran for a few tokens...
        g.learn(1, 8, 4)
        g.learn(2, 4, 1)
    g.start_request(16.0)
    before = g.keep(1, 16)
    for _ in range(3):
        g.learn(2, 8, 8)  # ...in this one they run long wherever they come from
    assert g.request_lift() > 1.3
    assert before <= 4 and g.keep(1, 16) > 8


def test_lifted_draft_length_equals_the_goodput_optimum_of_the_lifted_rates():
    import random

    from policies.acceptance import expected_tokens_by_k
    from policies.goodput import best_draft_len
    from policies.match_gate import MAX_RATE, _best_lifted_len

    rng = random.Random(0)
    for _ in range(500):
        available = rng.randint(1, 16)
        rates = [rng.random() for _ in range(16)]
        lift = rng.uniform(0.2, 3.0)
        seconds = sorted(rng.uniform(0.03, 0.08) for _ in range(17))
        lifted = [min(rate * lift, MAX_RATE) for rate in rates[:available]]
        expected = best_draft_len(expected_tokens_by_k(lifted), seconds[: available + 1], min_k=0)[0]
        assert _best_lifted_len(rates, lift, seconds, available) == expected


def test_cached_pricing_equals_a_fresh_one_after_learning_and_request_starts():
    g = gate()
    for i in range(40):
        g.keep(1 + i % 3, 16, ambiguous=i % 4 == 0)
        g.learn(1 + i % 3, 8, i % 5, ambiguous=i % 4 == 0)
        if i % 10 == 9:
            g.start_request(16.0)
        cached = g.tokens_per_s()
        g._best_k.clear()  # what a repricing does
        assert g.tokens_per_s() == pytest.approx(cached)


def test_gate_rejects_a_lift_weight_that_is_not_positive():
    with pytest.raises(ValueError, match="lift_weight=0"):
        MatchGate(16, lambda n: CPU_VERIFY[: n + 1], 16.0, 0.5, 2.0, 8.0, lift_weight=0)


def test_a_busy_spell_cannot_turn_drafting_off_for_good_probes_re_measure_and_stale_costs_expire():
    from policies.costs import STALE_AFTER_STEPS

    policy = AdaptivePolicy(["ngram"])
    g = policy.draft_gate("ngram")
    for _ in range(20):  # a busy spell: every 16-token verify took a second (all drafts accepted)
        policy.observe(StepOutcome("ngram", 16, 16, 16, 17, 0.0003, 1.0, match_order=3))
    for _ in range(4):  # then the machine is quick again: plain steps at 30 ms
        policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.03))
    policy.guard.plain_streak = 0  # (as right after a probe) the guard does not want one now
    assert g.keep(3, 16) == 0  # priced on the spell's costs, every draft is cut
    policy.guard.plain_streak = policy.guard.backoff  # the backoff is over: a probe is due
    assert policy.guard.wants_spec_probe()
    assert g.keep(3, 16) == policy.config.probe_min_k  # the probe is verified, so it measures
    # a probe at k = 4 measured a quick verify; the 16-token length stays at its spell's price until
    # it has not been verified for STALE_AFTER_STEPS steps, then it is priced like the longest
    # fresh length (optimism that gets it tried and re-measured)
    for _ in range(4):
        policy.observe(StepOutcome("ngram", 4, 4, 4, 5, 0.0003, 0.05, match_order=3))
    assert policy.costs.verify_s_by_k(16)[16] == pytest.approx(1.0, rel=0.2)
    for _ in range(STALE_AFTER_STEPS - 8):
        policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.03))
    policy.observe(StepOutcome("ngram", 4, 4, 4, 5, 0.0003, 0.05, match_order=3))
    verify = policy.costs.verify_s_by_k(16)
    assert verify[16] == pytest.approx(verify[4]) and verify[4] == pytest.approx(0.05, rel=0.05)


def test_the_drafter_is_priced_with_the_request_lift_so_price_and_cut_agree():
    # earlier requests accepted 2-token matches in full; this one's fail from the first token. The
    # lift cuts every draft (keep = 0), so drafting with the gate is worth plain speed, not the
    # per-kind rates' copy-request speed (which asked for probe bursts that lost, on SmolLM2)
    g = gate()
    for _ in range(30):
        g.keep(2, 16)
        g.learn(2, 16, 16)
    g.start_request(16.0)
    for _ in range(6):
        g.learn(2, g.keep(2, 16), 0)
    assert g.request_lift() < 0.4
    assert g.keep(2, 16) == 0
    assert g.tokens_per_s() == pytest.approx(1 / CPU_VERIFY[0])


def test_a_new_request_weighs_the_last_requests_mix_of_lookups_as_a_couple_of_lookups():
    from policies.match_gate import REQUEST_PRIOR_LOOKUPS

    g = gate()
    for _ in range(40):  # a copy request: a 3-token match at every step
        g.keep(3, 16)
        g.learn(3, 16, 16)
    g.start_request(16.0)
    assert sum(g.seen.values()) == pytest.approx(REQUEST_PRIOR_LOOKUPS)
    for _ in range(8):  # an open-ended request: lookups find nothing
        g.note_miss()
    assert g.seen[(0, False)] > 0.75 * sum(g.seen.values())  # its own lookups make the mix


def test_a_batch_weighs_a_draft_by_the_expected_tokens_its_gate_cut_it_for():
    """``expected`` is what ``keep`` weighs: the kept length is the best tokens per second of its
    curve, and the curve carries the request's lift (a batch cutting the draft further uses it)."""
    from policies.acceptance import expected_tokens_by_k
    from policies.match_gate import MAX_RATE

    g = gate()
    for _ in range(30):
        g.learn(3, 16, 16)
        g.learn(1, 8, 1)
    g.start_request(16.0)
    for order in (1, 3):
        curve = g.expected(order, 16)
        rates = g.profiles[(order, False)].conditional_rates()
        assert curve == pytest.approx(expected_tokens_by_k([min(r, MAX_RATE) for r in rates]))
        kept = g.keep(order, 16)
        assert kept == max(range(17), key=lambda k: (curve[k] / CPU_VERIFY[k], -k))
    assert g.expected(3, 16)[16] > 10 > 3 > g.expected(1, 16)[16]  # a copy run against a weak match
    assert len(g.expected(3, 5)) == 6 and g.expected(3, 5) == g.expected(3, 16)[:6]
    before = g.expected(1, 8)
    for _ in range(3):
        g.learn(2, 8, 8)  # this request beats the estimates: every curve rises with its lift
    assert all(a > b for a, b in zip(g.expected(1, 8)[1:], before[1:]))


def test_a_session_says_what_a_draft_is_expected_to_bring():
    from policies.outcome import Action
    from policies.session import DecodeSession, StepPlan

    policy = AdaptivePolicy(["ngram"])
    session = DecodeSession(policy, 64, gated={"ngram"})
    plan = StepPlan(Action("ngram", 16), "ngram", 16, gate=policy.draft_gate("ngram"))
    assert plan.gate is not None
    assert session.expected(plan, 0) == [1.0]  # nothing to verify: the step's one token
    assert session.expected(plan, 4, match_order=2) == plan.gate.expected(2, 4)
    # no match to go by: the policy's own estimate for the drafter
    assert session.expected(plan, 4) == policy.expected_tokens("ngram", 4) and len(policy.expected_tokens("ngram", 4)) == 5
    plain = StepPlan(Action("int8", 4), "int8", 4)
    assert DecodeSession(policy, 64).expected(plain, 3) is None  # a drafter it does not know
    assert DecodeSession(StaticPolicy("ngram", 4), 64).expected(StepPlan(Action("ngram", 4), "ngram", 4), 4) is None
