"""Greedy speculative output equals plain decoding, whatever the drafter proposes."""

import pytest
import torch

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.cached_lm import CachedLM
from adaptive_spec.drafters import Int8Drafter, ModelDrafter, NgramDrafter
from adaptive_spec.drafters.ngram import find_ngram_continuation
from policies import StaticPolicy
from tiny import ON_CPU, loaded, one_thread, tiny_gemma3, tiny_llama

import numpy as np

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3], [9, 9, 30, 31, 32, 9, 30], [5], list(range(40, 60))]


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def target():
    return loaded(tiny_llama(seed=0))


def plain_ids(decoder, prompt, n=40):
    return decoder.generate(prompt, max_new_tokens=n, policy=StaticPolicy("none", 0)).token_ids


def test_draft_equal_to_target_accepts_everything(target):
    decoder = SpeculativeDecoder(target, [ModelDrafter(target.model, name="self")])
    for prompt in PROMPTS:
        for k in (1, 3, 5):
            result = decoder.generate(prompt, max_new_tokens=40, policy=StaticPolicy("self", k))
            assert result.token_ids == plain_ids(decoder, prompt)
            assert result.stats.acceptance_rate == 1.0
            assert result.stats.mean_acceptance_length == pytest.approx(1 + k, rel=0.2)  # last step is capped


def test_random_draft_accepts_almost_nothing_and_output_is_unchanged(target):
    decoder = SpeculativeDecoder(target, [ModelDrafter(tiny_llama(seed=7), name="random")])
    rates = []
    for prompt in PROMPTS:
        result = decoder.generate(prompt, max_new_tokens=40, policy=StaticPolicy("random", 4))
        assert result.token_ids == plain_ids(decoder, prompt)
        rates.append(result.stats.acceptance_rate)
    assert max(rates) < 0.25, rates


@pytest.mark.parametrize("k", [1, 2, 8])
def test_ngram_and_int8_outputs_equal_plain(target, k):
    # float32 copy for int8: dynamic quantization has no float64 kernels
    target32 = loaded(tiny_llama(seed=0, dtype=torch.float32))
    drafters32 = [NgramDrafter()] + ([Int8Drafter(target32.model)] if ON_CPU else [])
    for tgt, drafters in ((target, [NgramDrafter()]), (target32, drafters32)):
        decoder = SpeculativeDecoder(tgt, drafters)
        for prompt in PROMPTS:
            expected = plain_ids(decoder, prompt)
            for drafter in drafters:
                result = decoder.generate(prompt, max_new_tokens=40, policy=StaticPolicy(drafter.name, k))
                assert result.token_ids == expected, (drafter.name, k, prompt)
                # speculation happened: every prompt here lets both drafters land some drafts (the int8
                # copy is close to the target; the random target's output repeats itself, which n-gram
                # lookup finds), so accepted drafts must show up in the steps and save steps
                accepted = sum(step.num_accepted for step in result.steps)
                assert accepted == result.stats.accepted_tokens > 0, (drafter.name, k, prompt)
                assert result.stats.steps == 39 - accepted, (drafter.name, k, prompt)  # 40 tokens, 1 from prefill


def test_each_step_yields_a_complete_record(target):
    decoder = SpeculativeDecoder(target, [NgramDrafter()])
    result = decoder.generate(PROMPTS[0], max_new_tokens=30, policy=StaticPolicy("ngram", 4))
    assert sum(s.emitted for s in result.steps) + 1 == len(result.token_ids)  # +1: the prefill token
    for step in result.steps:
        assert step.drafter == "ngram" and 0 <= step.num_accepted <= step.proposed <= step.k <= 4
        assert step.draft_s >= 0 and step.verify_s > 0
        assert step.accepted_per_position == tuple(i < step.num_accepted for i in range(step.proposed))
    assert result.stats.draft_tokens == sum(s.proposed for s in result.steps)


@pytest.mark.parametrize("make", [lambda: tiny_llama(seed=3), lambda: tiny_gemma3(seed=3, sliding_window=4)], ids=["llama", "gemma3-sliding"])
def test_rollback_then_next_logits_equal_a_fresh_forward(make):
    model = make()
    lm = CachedLM(model)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]  # longer than the sliding window
    lm.extend(prompt)
    lm.extend([10, 11, 12, 13, 14], num_logits=5)  # pending token + 4 drafts
    lm.rollback(len(prompt) + 2)  # keep the pending token and one accepted draft
    assert lm.cache.get_seq_length() == len(prompt) + 2
    cached = lm.extend([20, 21, 22], num_logits=3)  # the next step
    sequence = prompt + [10, 11, 20, 21, 22]
    with torch.inference_mode():
        fresh = model(input_ids=torch.tensor([sequence], device=model.device)).logits[0, -3:]
    torch.testing.assert_close(cached, fresh, rtol=1e-9, atol=1e-9)


def test_gemma3_sliding_window_greedy_equals_plain():
    target = loaded(tiny_gemma3(seed=5, sliding_window=4))
    decoder = SpeculativeDecoder(target, [NgramDrafter(), ModelDrafter(target.model, name="self")])
    prompt = PROMPTS[0]
    expected = plain_ids(decoder, prompt, n=30)
    for name in ("ngram", "self"):
        result = decoder.generate(prompt, max_new_tokens=30, policy=StaticPolicy(name, 4))
        assert result.token_ids == expected
        assert result.stats.accepted_tokens > 0, name  # drafts were accepted past the window, not just proposed


def test_ngram_lookup_worked_example():
    assert find_ngram_continuation(np.array([1, 2, 3, 4, 9, 1, 2]), k=2) == [3, 4]


def test_ngram_prefers_longest_then_most_recent_match():
    # the 2-gram [7, 8] occurs twice; the most recent earlier one is followed by 5
    assert find_ngram_continuation(np.array([7, 8, 1, 7, 8, 5, 0, 7, 8]), k=1, max_ngram=2) == [5]
    assert find_ngram_continuation(np.array([1, 2, 3]), k=3) == []
