"""The adaptive controller against a synthetic engine with a known truth."""

import dataclasses
from collections import Counter

import pytest

from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.goodput import best_draft_len
from policies.guard import GuardConfig
from policies.acceptance import expected_tokens_by_k
from policies.outcome import Action, StepOutcome
from policies.static import StaticPolicy
from policies.synthetic import SyntheticCosts, SyntheticDrafter, SyntheticEnv, run_policy, tokens_per_second

CHEAP_NGRAM = dict(draft_s_fixed=0.0001)  # ~0.1 ms per lookup, as measured


def env_with(acceptance, seed=0, **costs):
    return SyntheticEnv([SyntheticDrafter("ngram", acceptance, **CHEAP_NGRAM)], SyntheticCosts(**costs), seed=seed)


def mean_k(outcomes):
    return sum(o.k for o in outcomes) / len(outcomes)


def speculative_fraction(outcomes):
    return sum(o.k > 0 for o in outcomes) / len(outcomes)


def test_k_grows_to_near_the_goodput_optimum_under_high_acceptance_and_cheap_drafts():
    policy = AdaptivePolicy(["ngram"], AdaptiveConfig(max_k=12))
    outcomes = run_policy(policy, env_with(0.85), 400)
    modal_k = Counter(o.k for o in outcomes[-150:]).most_common(1)[0][0]
    seconds = [1.0] + [1.8 + 0.05 * k + 0.0001 / 0.035 for k in range(1, 13)]
    optimal_k, _ = best_draft_len(expected_tokens_by_k([0.85] * 12), seconds)
    assert optimal_k >= 8
    assert abs(modal_k - optimal_k) <= 2
    assert speculative_fraction(outcomes[-150:]) > 0.95


def test_k_shrinks_when_acceptance_falls():
    env = env_with(0.9)
    policy = AdaptivePolicy(["ngram"])
    high = run_policy(policy, env, 300)
    env.set_acceptance("ngram", 0.65)
    low = run_policy(policy, env, 300)
    assert mean_k(high[-100:]) > 12
    assert 2 <= mean_k([o for o in low[-100:] if o.k > 0]) <= 8


# the synthetic drafter is not shadow-drafted, so these tests use the shorter probe cap that a drafter
# without shadow drafting relies on to notice a recovery
SHORT_BACKOFF = AdaptiveConfig(guard=GuardConfig(backoff_max=128))


def test_speculation_turns_off_when_verify_cost_makes_it_lose_and_is_never_much_slower_than_plain():
    env = env_with(0.6)
    policy = AdaptivePolicy(["ngram"], SHORT_BACKOFF)
    run_policy(policy, env, 300)
    env.set_costs(verify_intercept=3.0)  # the machine got busy: verification now costs 3x a token
    after = run_policy(policy, env, 700)
    assert speculative_fraction(after[-400:]) < 0.15  # a lucky probe burst can re-enable it briefly
    # the only losses left are the probe bursts: 4 speculative steps per 128 plain ones at most
    plain_speed = 1.0 / SyntheticCosts().plain_s
    assert tokens_per_second(after[-400:]) >= 0.93 * plain_speed
    assert policy.guard.backoff == policy.config.guard.backoff_max


def test_speculation_recovers_after_probes_when_acceptance_comes_back():
    env = env_with(0.05)
    policy = AdaptivePolicy(["ngram"], SHORT_BACKOFF)
    collapsed = run_policy(policy, env, 400)
    assert speculative_fraction(collapsed[-200:]) < 0.1
    probes = [i for i, o in enumerate(collapsed) if o.k > 0 and i >= 200]
    assert probes, "no probe while off"
    env.set_acceptance("ngram", 0.9)
    recovered = run_policy(policy, env, 500)  # the next probe comes within backoff_max = 128 steps
    assert speculative_fraction(recovered[-250:]) > 0.9
    assert mean_k(recovered[-100:]) > 8


def test_probe_backoff_doubles_while_speculation_keeps_losing():
    policy = AdaptivePolicy(["ngram"], SHORT_BACKOFF)
    run_policy(policy, env_with(0.02), 600)
    assert policy.guard.backoff == policy.config.guard.backoff_max
    assert not policy.guard.allowed


def test_adaptive_beats_the_heuristic_and_plain_at_moderate_acceptance():
    from policies.heuristic import HeuristicPolicy

    speeds = {}
    for name, make in (("plain", StaticPolicy), ("heuristic", lambda: HeuristicPolicy("ngram")),
                       ("adaptive", lambda: AdaptivePolicy(["ngram"]))):
        speeds[name] = tokens_per_second(run_policy(make(), env_with(0.7, seed=3), 800))
    assert speeds["adaptive"] > speeds["heuristic"] > speeds["plain"]


def test_same_seed_same_decisions():
    def trace(seed):
        env = SyntheticEnv([SyntheticDrafter("ngram", 0.8, **CHEAP_NGRAM),
                            SyntheticDrafter("int8", 0.6, draft_s_per_token=0.01, confidences=True)], seed=7)
        policy = AdaptivePolicy(["ngram", "int8"], seed=seed)
        return [(o.drafter, o.k) for o in run_policy(policy, env, 300)]

    assert trace(0) == trace(0)


def test_decide_only_reads_state():
    policy = AdaptivePolicy(["ngram"])
    run_policy(policy, env_with(0.8), 50)
    assert len({policy.decide() for _ in range(5)}) == 1


def test_outcomes_of_actions_it_did_not_choose_are_learned_from():
    policy = AdaptivePolicy(["ngram"])
    policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.035))
    policy.observe(StepOutcome("model:/m/x", 4, 4, 4, 5, 0.02, 0.07))  # forced by an override
    policy.observe(StepOutcome("ngram", 4, 2, 2, 3, 0.0001, 0.065))
    assert policy.costs.plain_s() == pytest.approx(0.035)
    assert policy.profiles["ngram"].steps == 1
    assert isinstance(policy.decide(), Action)


def test_no_drafters_means_plain_decoding():
    assert AdaptivePolicy(["none"]).decide() == Action("none", 0)


@pytest.mark.parametrize(
    "field, value",
    [("max_k", 0), ("acceptance_half_life_steps", -1.0), ("prior_acceptance", 1.0), ("bandit_discount", 0.0),
     ("early_stop", "sometimes"), ("early_stop_threshold", 1.5)],
)
def test_invalid_config_names_the_parameter_and_value(field, value):
    with pytest.raises(ValueError) as error:
        AdaptiveConfig(**{field: value})
    assert f"{field}=" in str(error.value) and repr(value) in str(error.value)


def test_invalid_guard_and_detector_parameters_name_the_parameter():
    with pytest.raises(ValueError, match=r"backoff_max must be an integer >= 8, got backoff_max=4"):
        AdaptiveConfig.from_kwargs(backoff_max=4)
    with pytest.raises(ValueError, match=r"threshold_sigmas must be a finite number > 0, got threshold_sigmas=0"):
        AdaptiveConfig.from_kwargs(threshold_sigmas=0)
    with pytest.raises(ValueError, match=r"unknown adaptive policy parameter k_max=4"):
        AdaptiveConfig.from_kwargs(k_max=4)
    assert dataclasses.replace(AdaptiveConfig(), max_k=8).max_k == 8


def test_shadow_acceptance_asks_for_a_probe_while_speculation_is_off():
    policy = AdaptivePolicy(["ngram"], SHORT_BACKOFF)
    run_policy(policy, env_with(0.02), 300)
    assert not policy.guard.allowed and not policy.guard.wants_spec_probe()
    for _ in range(12):  # plain decoding shows the n-gram drafts would now be accepted in full
        policy.observe_shadow("ngram", 16, 16)
    assert policy.guard.wants_spec_probe()
    assert policy.decide().drafter == "ngram"


def test_poor_shadow_acceptance_does_not_trigger_probes():
    policy = AdaptivePolicy(["ngram"], SHORT_BACKOFF)
    run_policy(policy, env_with(0.02), 300)
    streak = policy.guard.plain_streak
    for _ in range(12):
        policy.observe_shadow("ngram", 16, 0)
    assert policy.guard.plain_streak == streak and not policy.guard.wants_spec_probe()


def test_fused_pricing_equals_the_goodput_optimum_over_summed_costs():
    import random

    from policies.adaptive import _best_priced_len

    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(2, 17)
        tokens = expected_tokens_by_k([rng.random() for _ in range(n - 1)])
        verify = sorted(rng.uniform(0.03, 0.08) for _ in range(n))
        draft = [0.0] + [rng.uniform(0.0, 0.02) * k for k in range(1, n)]
        summed = [v + d for v, d in zip(verify, draft)]
        assert _best_priced_len(tokens, verify, draft) == best_draft_len(tokens, summed, min_k=1)


CPU_VERIFY_S = {0: 0.036, 1: 0.040, 2: 0.042, 4: 0.058, 8: 0.071, 16: 0.077}  # SmolLM2, 2-core CPU


def _verify_s(n):
    return CPU_VERIFY_S[max(k for k in CPU_VERIFY_S if k <= n)]


def _gated_request(policy, steps, accepted_of):
    """Drive ``steps`` engine steps of one request in which every lookup finds a 2-token match whose
    draft has ``accepted_of(drafted)`` tokens right, as the engine does (gate cut, shadow drafts
    while plain); return the verified draft lengths."""
    gate = policy.draft_gate("ngram")
    policy.start_request()
    verified = []
    for _ in range(steps):
        action = policy.decide()
        keep = gate.keep(2, 16) if action.drafter == "ngram" and action.k > 0 else 0
        if keep == 0:
            policy.observe_shadow("ngram", 4, accepted_of(4), 2, False)  # what plain decoding shows
            policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, _verify_s(0)))
            continue
        accepted = accepted_of(keep)
        policy.observe(StepOutcome("ngram", keep, keep, accepted, accepted + 1, 0.0003, _verify_s(keep),
                                   match_order=2))
        verified.append(keep)
    return verified


def test_shadow_drafts_teach_the_gate_so_a_stale_copy_picture_does_not_keep_asking_for_probes():
    # a copy request teaches the gate that 2-token matches are accepted in full; the next request
    # matches as often but accepts nothing, and the guard has measured speculation losing there.
    # Shadow drafts must update the gate, or it keeps pricing the drafter as a winner and asking
    # for probe bursts that lose (measured on SmolLM2: a burst every 5 steps through whole requests)
    policy = AdaptivePolicy(["ngram"])
    _gated_request(policy, 60, lambda n: n)
    policy.guard.allowed = False
    verified = _gated_request(policy, 95, lambda n: 0)
    assert len(verified) <= 8, verified  # a few scheduled probes (8, 16, 32 ... plain steps apart)
    assert sum(verified) <= 24, verified  # each burst verifies one probe_min_k draft, then the gate's


def test_a_shadow_request_for_a_probe_waits_at_least_backoff_initial_plain_steps():
    policy = AdaptivePolicy(["ngram"])
    guard = policy.guard
    guard.allowed, guard.backoff, guard.plain_streak = False, 64, 0  # a burst just lost
    for _ in range(guard.config.backoff_initial - 1):
        policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.036))
        guard.request_probe()
        assert not guard.wants_spec_probe()
    policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.036))
    assert guard.wants_spec_probe()  # after backoff_initial plain steps, not the backoff's 64
    policy.observe(StepOutcome("ngram", 4, 4, 0, 1, 0.0003, 0.058, match_order=2))
    assert guard.probing and not guard.probe_requested


def test_a_slow_spell_is_not_mistaken_for_speculation_losing():
    # plain steps measured at 36 ms; then the machine runs 20% slower through a request whose
    # lookups mostly find nothing (a plain forward plus a 0.3 ms lookup) and one step in ten a
    # 2-token draft half accepted: against plain steps of this spell speculation wins by ~6%,
    # against the ones before it every no-match step would look 17% slower than plain
    policy = AdaptivePolicy(["ngram"])
    for _ in range(30):
        policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.036))
    for _ in range(8):  # a request that speculated with success
        policy.observe(StepOutcome("ngram", 2, 2, 2, 3, 0.0003, 0.042, match_order=2))
    assert policy.guard.allowed and not policy.guard.probing
    policy.start_request()
    for i in range(80):
        if i % 10 == 9:
            policy.observe(StepOutcome("ngram", 2, 2, 1, 2, 0.0003, 0.042 * 1.2, match_order=2))
        else:
            policy.observe(StepOutcome("ngram", 16, 0, 0, 1, 0.0003, 0.036 * 1.2))
    assert policy.guard.allowed and policy.guard.relative_speed > 1.0


def test_a_burst_shadow_drafts_asked_for_verifies_what_the_gate_keeps_and_a_scheduled_one_a_probe():
    # a probe burst verifies at least one probe_min_k draft, so that costs inflated by a busy spell
    # get re-measured. A burst that shadow drafting asked for needs none: the gate itself predicted
    # a win at the current costs, and a floor would verify 4 tokens of a weak 1-token match
    def trained_and_off():
        policy = AdaptivePolicy(["ngram"])
        _gated_request(policy, 40, lambda n: n)  # a copy request: 2-token matches accepted in full
        gate = policy.draft_gate("ngram")
        for _ in range(30):
            gate.learn(1, 2, 0)  # 1-token matches never are
        policy.guard.allowed, policy.guard.backoff, policy.guard.plain_streak = False, 64, 0
        policy.start_request()
        return policy, gate

    policy, gate = trained_and_off()
    policy.observe_shadow("ngram", 4, 4, 2, False)  # plain decoding shows a 2-token match's draft right
    assert policy.guard.probe_requested
    for _ in range(policy.guard.config.backoff_initial):
        policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, _verify_s(0)))
    assert policy.guard.wants_spec_probe()
    assert gate.keep(1, 16) == 0 and gate.keep(2, 16) > 0

    policy, gate = trained_and_off()  # no shadow evidence: the burst comes on the backoff's schedule
    for _ in range(policy.guard.backoff):
        policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, _verify_s(0)))
    assert policy.guard.wants_spec_probe()
    assert gate.keep(1, 16) == policy.config.probe_min_k
