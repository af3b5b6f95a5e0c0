"""Early stopping inside a draft: the engine honours it, learns it, and stays lossless."""

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import ModelDrafter
from policies import StaticPolicy
from policies.with_early_stop import WithEarlyStop
from tiny import loaded, tiny_llama

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]


@pytest.fixture(scope="module")
def decoder():
    target = loaded(tiny_llama(seed=0))
    return SpeculativeDecoder(target, [ModelDrafter(tiny_llama(seed=1), name="draft")])


# q(token) >= 1.0 never holds for a random draft, so it stops after the first token; >= 0 always holds
@pytest.mark.parametrize("threshold, expected_proposed", [(1.0, 1), (0.0, 6)])
def test_threshold_rule_decides_where_drafting_stops(decoder, threshold, expected_proposed):
    policy = WithEarlyStop(StaticPolicy("draft", 6), mode="threshold", threshold=threshold)
    result = decoder.generate(PROMPT, max_new_tokens=30, policy=policy)
    full_steps = [s for s in result.steps if s.k == 6]
    assert full_steps and all(s.proposed == expected_proposed for s in full_steps)


@pytest.mark.parametrize("mode", ["learned", "threshold"])
def test_early_stop_keeps_greedy_output_identical_and_learns(decoder, mode):
    plain = decoder.generate(PROMPT, max_new_tokens=60, policy=StaticPolicy("none", 0)).token_ids
    policy = WithEarlyStop(StaticPolicy("draft", 6), mode=mode)
    for _ in range(3):
        assert decoder.generate(PROMPT, max_new_tokens=60, policy=policy).token_ids == plain
    stopper = policy.early_stop("draft")
    assert stopper.decisions > 0
    if mode == "learned":
        assert stopper.samples > 0  # trained from the steps' draft confidences


def test_bad_early_stop_mode_is_rejected():
    with pytest.raises(ValueError, match="mode='sometimes'"):
        WithEarlyStop(StaticPolicy("draft", 4), mode="sometimes")
