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
    assert len(memory) == len(kept) == PER_LENGTH + PER_DRAFTER + 1


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
    fresh = AdaptivePolicy(["ngram"])
    result = decoder.generate(PROMPT, max_new_tokens=24, policy=fresh)
    assert fresh._warm_started
    assert result.steps[0].k > 0  # plain speed was already known: no plain measuring step first
