"""A long-running decoder keeps one controller per traffic key; requests can override it."""

import pytest

from adaptive_spec import InvalidParameterError, SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from policies import PolicyRegistry
from tiny import loaded, tiny_llama

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]


@pytest.fixture()
def decoder():
    return SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()], policy=PolicyRegistry("adaptive", ["ngram"]))


def test_each_traffic_key_gets_its_own_learning_controller(decoder):
    decoder.generate(PROMPT, max_new_tokens=20, key="copy")
    decoder.generate(PROMPT, max_new_tokens=20, key="chat")
    registry = decoder.policy
    assert sorted(registry.keys()) == ["chat", "copy"]
    assert registry.get("copy") is not registry.get("chat")
    assert registry.get("copy").steps > 0  # it observed the steps of its own requests


def test_force_plain_overrides_one_request_and_still_teaches_the_key(decoder):
    plain = decoder.generate(PROMPT, max_new_tokens=20, key="copy", force_plain=True)
    assert all(s.k == 0 for s in plain.steps)
    assert decoder.policy.get("copy").steps == len(plain.steps)
    forced = decoder.generate(PROMPT, max_new_tokens=20, key="copy", force_drafter="ngram", force_k=3)
    assert forced.steps and all(s.drafter == "ngram" and s.k <= 3 for s in forced.steps)  # the last steps are capped by the budget
    assert forced.token_ids == plain.token_ids


def test_bad_overrides_name_the_parameter(decoder):
    with pytest.raises(InvalidParameterError, match="force_drafter='medusa'"):
        decoder.generate(PROMPT, max_new_tokens=5, force_drafter="medusa")
    with pytest.raises(InvalidParameterError, match="k=99"):
        decoder.generate(PROMPT, max_new_tokens=5, force_drafter="ngram", force_k=99)
