"""Step costs are the engine's: a controller that starts cold takes them, acceptance it learns itself."""

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.cost_memory import PER_DRAFTER, PER_LENGTH, StepCostMemory
from adaptive_spec.drafters import NgramDrafter
from policies.adaptive import AdaptivePolicy
from policies.outcome import StepOutcome
from policies.static import StaticPolicy
from tiny import loaded, tiny_llama

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]


def step(drafter, k, proposed, t, draft_s=0.0001, verify_s=0.04):
    return StepOutcome(drafter, k, proposed, 0, 1, draft_s, verify_s, timestamp=t)


def test_memory_keeps_the_last_steps_per_length_and_per_drafter_oldest_first():
    memory = StepCostMemory()
    for t in range(10):
        memory.record(step("none", 0, 0, t))
    for t in range(10, 20):
        memory.record(step("ngram", 4, 4, t))
    memory.record(step("slow", 4, 4, 20, draft_s=0.1))
    kept = memory.outcomes()
    assert [o.timestamp for o in kept] == sorted(o.timestamp for o in kept)
    assert sum(o.drafter == "none" for o in kept) == PER_LENGTH
    # length 4 keeps its last PER_LENGTH steps (one of them "slow"); "ngram" keeps its own last ones too
    assert {o.timestamp for o in kept if o.drafter == "ngram"} == set(range(20 - PER_DRAFTER, 20))
    assert [o.timestamp for o in kept if o.drafter == "slow"] == [20]
    assert len(kept) == PER_LENGTH + PER_DRAFTER + 1
    assert len(memory) == 2 * PER_LENGTH  # steps kept per verified length: 0 and 4


def test_warm_start_prices_a_costly_drafter_before_trying_it_and_skips_the_plain_measurement():
    costs = [step("none", 0, 0, t, verify_s=0.03) for t in range(4)]
    costs += [step("ngram", 2, 2, 4 + t, verify_s=0.034) for t in range(4)]
    costs += [step("slow", 4, 4, 8 + t, draft_s=0.16, verify_s=0.05) for t in range(4)]  # 40 ms a draft token
    warm = AdaptivePolicy(["slow", "ngram"])
    assert warm.warm_start(costs)
    assert warm.costs.plain_s() == pytest.approx(0.03)
    assert warm.plans()["slow"].tokens_per_s < 1 / 0.03  # priced: it cannot beat plain decoding
    assert warm.decide().drafter == "ngram"
    assert warm.profiles["ngram"].steps == 0 and warm.profiles["slow"].steps == 0  # no acceptance carried over
    assert not warm.warm_start(costs)  # once only

    cold = AdaptivePolicy(["slow", "ngram"])
    assert cold.decide().k == 0  # a cold controller measures plain speed first
    cold.observe(step("none", 0, 0, 0, verify_s=0.03))
    assert cold.decide().drafter == "slow"  # and would then try the drafter it knows nothing about
    assert not cold.warm_start(costs)  # it has observed a step: its own measurements stand


def test_decoder_warm_starts_each_new_controller_from_the_steps_it_served():
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()])
    decoder.generate(PROMPT, max_new_tokens=24, policy=StaticPolicy("ngram", 3))
    assert len(decoder.cost_memory) > 0
    served = {o.proposed for o in decoder.cost_memory}

    class Spy(AdaptivePolicy):
        first = None

        def decide(self):
            if self.first is None:  # what the controller knew before its first step
                self.first = (self.costs.plain_s(), set(self.costs.verify_at), self.guard.wants_plain_probe())
            return super().decide()

    fresh = Spy(["ngram"])
    assert fresh.guard.wants_plain_probe()  # cold, it would measure plain speed first
    decoder.generate(PROMPT, max_new_tokens=24, policy=fresh)
    plain_s, lengths, wants_plain = fresh.first
    assert plain_s > 0 and not wants_plain  # plain speed was already known: no measuring step
    assert lengths == served - {0}  # every verify length the engine had served, before any of its own


def test_an_empty_memory_leaves_the_controller_free_to_warm_start_later():
    policy = AdaptivePolicy(["ngram"])
    assert not policy.warm_start([])
    assert policy.warm_start([step("none", 0, 0, 0, verify_s=0.03)])
    assert policy.costs.plain_s() == pytest.approx(0.03)


def test_a_forced_first_request_still_warm_starts_the_key_s_controller():
    from policies import PolicyRegistry

    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()],
                                 policy=PolicyRegistry("adaptive", ["ngram"]))
    decoder.generate(PROMPT, max_new_tokens=16, policy=StaticPolicy("ngram", 3))  # verifies drafts
    assert any(o.proposed > 0 for o in decoder.cost_memory.outcomes())
    decoder.generate(PROMPT, max_new_tokens=16, key="b", force_plain=True)
    controller = decoder.policy.get("b")
    # its own forced plain steps plus the engine's speculative ones: verify lengths it never ran
    assert any(k > 0 for k in controller.costs.verify_at)


def test_probes_skip_a_drafter_whose_measured_cost_rules_it_out():
    from policies.synthetic import SyntheticCosts, SyntheticDrafter, SyntheticEnv, run_policy

    # "slow" costs 45 ms a draft token against a 35 ms plain step: it cannot win even if every
    # draft were accepted; n-gram drafts are never accepted, so the guard turns speculation off
    # and probes on its schedule
    env = SyntheticEnv([SyntheticDrafter("slow", 0.9, draft_s_per_token=0.045),
                        SyntheticDrafter("ngram", 0.0, draft_s_fixed=0.0001)], SyntheticCosts(), seed=0)
    known = [step("none", 0, 0, t, verify_s=0.035) for t in range(4)]
    known += [step("slow", k, k, 4 + t, draft_s=0.045 * k, verify_s=0.07) for t, k in enumerate((2, 8, 2, 8))]
    known += [step("ngram", 4, 4, 8 + t, verify_s=0.07) for t in range(4)]
    policy = AdaptivePolicy(["slow", "ngram"])
    assert policy.warm_start(known)
    outcomes = run_policy(policy, env, 600)
    assert policy.guard.switches > 0  # speculation was turned off, so probes ran
    assert sum(o.drafter == "ngram" for o in outcomes) > 0
    assert not any(o.drafter == "slow" for o in outcomes)
