"""Chunked prefill in the batched engine (issue 17): a long prompt joins over several steps, each
step prefilling at most ``prefill_chunk`` of its tokens, while the other rows keep decoding; every
row's tokens stay those of the single request."""

import pytest
import torch

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.batching import BatchedDecoder, SlotCache
from adaptive_spec.batching.slots import Prefill
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.errors import InvalidParameterError
from policies.registry import make_policy
from tiny import loaded, one_thread, tiny_llama

COPY = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6]
LONG = [(7 * i + 3) % 61 for i in range(150)]  # 150 prompt tokens: 10 chunks of 16
CHUNK = 16


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def decoder():
    return SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()])


def policy(name):
    return make_policy(name, ["ngram"])


class Prefills:
    """Records the tokens of every prefill forward of ``model`` (a prompt's, alone in its own cache:
    the batch's decode forwards are the ones with an attention mask)."""

    def __init__(self, model):
        self.sizes: list[int] = []
        self._forward = model.forward
        model.forward = self

    def __call__(self, *args, input_ids=None, attention_mask=None, **kwargs):
        if attention_mask is None:
            self.sizes.append(input_ids.numel())
        return self._forward(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def test_a_long_prompt_joins_chunk_by_chunk_while_the_rows_decode_and_every_row_stays_exact(decoder):
    engine = BatchedDecoder(decoder, max_batch=4, prefill_chunk=CHUNK)
    early = [engine.submit(COPY, policy=policy("static:ngram:4"), max_new_tokens=40),
             engine.submit([9, 9, 30, 31, 32, 9, 30], policy=policy("plain"), max_new_tokens=40)]
    engine.step()
    late = engine.submit(LONG, policy=policy("static:ngram:4"), max_new_tokens=30)
    spy = Prefills(decoder.target.model)
    try:
        tokens_while_joining = 0
        steps_joining = 0
        while engine.prefilling is not None or engine.waiting:
            before = sum(len(row.generated) for row in engine.active if row.id in early)
            engine.step()
            steps_joining += 1
            tokens_while_joining += sum(len(row.generated) for row in engine.active if row.id in early) - before
    finally:
        del decoder.target.model.forward
    assert steps_joining == -(-len(LONG) // CHUNK)  # one chunk a step: 10 steps
    assert tokens_while_joining >= steps_joining  # each of those steps decoded the early rows too
    assert sum(spy.sizes) == len(LONG) and max(spy.sizes) == CHUNK  # no forward prefilled more than a chunk
    results = engine.run()
    alone = lambda prompt, name, n: decoder.generate(prompt, policy=policy(name), max_new_tokens=n).token_ids  # noqa: E731
    assert results[late].token_ids == alone(LONG, "static:ngram:4", 30)
    assert results[early[0]].token_ids == alone(COPY, "static:ngram:4", 40)
    assert results[early[1]].token_ids == alone([9, 9, 30, 31, 32, 9, 30], "plain", 40)
    assert results[late].stats.prompt_tokens == len(LONG)


def test_a_prompt_fed_in_chunks_holds_the_cache_of_one_forward():
    model = tiny_llama(seed=4)
    slots = SlotCache(model)
    slots.add(COPY)
    pending = Prefill(LONG)
    fed = [slots.feed(pending, 38) for _ in range(4)]
    assert fed[:3] == [None, None, None] and pending.remaining == 0 and slots.rows == 2
    with torch.inference_mode():
        fresh = model(input_ids=torch.tensor([LONG], device=model.device)).logits[0, -1:]
    torch.testing.assert_close(fed[3], fresh, rtol=1e-9, atol=1e-9)
    logits = slots.extend([[5], [6, 7]])
    with torch.inference_mode():
        fresh = model(input_ids=torch.tensor([LONG + [6, 7]], device=model.device)).logits[0, -2:]
    torch.testing.assert_close(logits[1], fresh, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="at least one token"):
        slots.feed(Prefill([1, 2]), 0)


def test_a_request_cancelled_or_failed_mid_prefill_ends_and_the_batch_goes_on(decoder):
    engine = BatchedDecoder(decoder, max_batch=4, prefill_chunk=CHUNK)
    kept = engine.submit(COPY, policy=policy("adaptive"), max_new_tokens=30)
    engine.step()
    gone = engine.submit(LONG, policy=policy("adaptive"), max_new_tokens=30)
    engine.step()
    engine.step()
    assert engine.prefilling is not None and engine.prefilling.id == gone and engine.pending == 2
    assert engine.cancel(gone) and engine.prefilling is None and not engine.cancel(gone)
    assert len(engine._busy) == 1  # the cancelled request gave its controller back; the decoding row holds its own
    results = engine.run()
    assert gone not in results
    assert results[kept].token_ids == decoder.generate(COPY, policy=policy("adaptive"), max_new_tokens=30).token_ids
    # an error no row survives ends the one mid-prefill as well
    engine.submit(COPY, policy=policy("plain"), max_new_tokens=30)
    engine.step()
    mid = engine.submit(LONG, policy=policy("plain"), max_new_tokens=30)
    engine.step()
    assert engine.prefilling.id == mid
    assert mid in engine.fail_all(RuntimeError("forward failed")) and engine.pending == 0 and engine.slots.rows == 0


def test_nothing_decoding_means_the_whole_prompt_goes_in_at_once(decoder):
    engine = BatchedDecoder(decoder, max_batch=2, prefill_chunk=CHUNK)
    request = engine.submit(LONG, policy=policy("plain"), max_new_tokens=5)
    engine.step()
    assert engine.prefilling is None and len(engine.active) == 1  # no row waited on it: no chunking
    assert engine.run()[request].token_ids == decoder.generate(LONG, policy=policy("plain"), max_new_tokens=5).token_ids


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "16"])
def test_a_bad_prefill_chunk_is_refused_by_name(decoder, bad):
    with pytest.raises(InvalidParameterError, match="prefill_chunk"):
        BatchedDecoder(decoder, prefill_chunk=bad)


def test_a_request_that_fails_after_its_prompt_is_in_is_ended_by_the_recovery_not_lost(decoder):
    engine = BatchedDecoder(decoder, max_batch=4, prefill_chunk=CHUNK)
    running = engine.submit(COPY, policy=policy("adaptive"), max_new_tokens=30)
    engine.step()

    def broken(tokens):
        raise RuntimeError("the client's stream broke")

    failing = engine.submit(LONG[:20], policy=policy("adaptive"), max_new_tokens=30, on_tokens=broken)
    waiting = engine.submit(COPY, policy=policy("plain"), max_new_tokens=30)
    with pytest.raises(RuntimeError):
        for _ in range(5):
            engine.step()
    assert sorted(engine.fail_all(RuntimeError("the client's stream broke"))) == sorted([running, failing, waiting])
    assert engine.pending == 0 and engine.slots.rows == 0 and not engine._busy
