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


class Forwards:
    """Records every forward of ``model``: whether it ran alone (a prompt's prefill in its own cache;
    the batch's decode forwards are the ones with an attention mask) and its tokens."""

    def __init__(self, model):
        self.forwards: list[tuple[bool, int]] = []
        self._forward = model.forward
        model.forward = self

    def __call__(self, *args, input_ids=None, attention_mask=None, **kwargs):
        self.forwards.append((attention_mask is None, input_ids.numel()))
        return self._forward(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)


@pytest.mark.parametrize("layout", ["auto", "padded"])
def test_a_long_prompt_joins_chunk_by_chunk_while_the_rows_decode_and_every_row_stays_exact(decoder, layout):
    """With ``auto`` the chunks ride in the decode forwards; a forced ``padded`` layout cannot carry
    them, so each chunk is a prefill forward of its own before the step's."""
    engine = BatchedDecoder(decoder, max_batch=4, prefill_chunk=CHUNK, layout=layout)
    early = [engine.submit(COPY, policy=policy("static:ngram:4"), max_new_tokens=40),
             engine.submit([9, 9, 30, 31, 32, 9, 30], policy=policy("plain"), max_new_tokens=40)]
    engine.step()
    late = engine.submit(LONG, policy=policy("static:ngram:4"), max_new_tokens=30)
    spy = Forwards(decoder.target.model)
    try:
        tokens_while_joining = 0
        steps_joining = 0
        prefilled = []  # of the long prompt, after each step
        while engine.prefilling is not None or engine.waiting:
            before = sum(len(row.generated) for row in engine.active if row.id in early)
            engine.step()
            steps_joining += 1
            tokens_while_joining += sum(len(row.generated) for row in engine.active if row.id in early) - before
            prefilled.append(engine.prefilling.prefill.done if engine.prefilling is not None else len(LONG))
    finally:
        del decoder.target.model.forward
    assert steps_joining == -(-len(LONG) // CHUNK)  # one chunk a step: 10 steps
    assert prefilled == [min(len(LONG), CHUNK * (i + 1)) for i in range(steps_joining)]
    assert tokens_while_joining >= steps_joining  # each of those steps decoded the early rows too
    alone = [tokens for by_itself, tokens in spy.forwards if by_itself]
    if layout == "auto":
        assert not alone and len(spy.forwards) == steps_joining  # one forward a step, the chunk inside it
        assert all(tokens > CHUNK for _, tokens in spy.forwards[:-1])  # the rows' tokens and a whole chunk
    else:
        assert sum(alone) == len(LONG) and max(alone) == CHUNK  # no forward prefilled more than a chunk
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


def test_prompts_riding_in_a_step_hold_the_cache_of_a_forward_of_their_own_and_leave_the_rows_as_they_were():
    model = tiny_llama(seed=4)
    slots, without = SlotCache(model), SlotCache(model)
    for cache in (slots, without):
        cache.add(COPY)
        cache.add([9, 9, 30])
    short, long = Prefill([4, 5, 6, 7, 8]), Prefill(LONG)
    rows = slots.extend([[5], [6, 7]], [(short, 5), (long, 60)])  # two riders in one forward
    torch.testing.assert_close(rows, without.extend([[5], [6, 7]]), rtol=1e-9, atol=1e-9)
    assert short.remaining == 0 and long.done == 60 and long.logits is None and slots.rows == 2
    slots.join(short)
    with torch.inference_mode():
        fresh = model(input_ids=torch.tensor([[4, 5, 6, 7, 8]], device=model.device)).logits[0, -1:]
    torch.testing.assert_close(short.logits, fresh, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="joins once it is all in"):
        slots.join(long)
    slots.extend([[1], [2], [3]], [(long, 90)])
    slots.join(long)
    with torch.inference_mode():
        fresh = model(input_ids=torch.tensor([LONG], device=model.device)).logits[0, -1:]
    torch.testing.assert_close(long.logits, fresh, rtol=1e-9, atol=1e-9)
    logits = slots.extend([[1], [2], [3], [6, 7]])  # the joined prompt decodes on from its own cache
    with torch.inference_mode():
        fresh = model(input_ids=torch.tensor([LONG + [6, 7]], device=model.device)).logits[0, -2:]
    torch.testing.assert_close(logits[3], fresh, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="1 to its remaining tokens"):
        slots.extend([[1], [2], [3], [4]], [(Prefill([1, 2]), 3)])
    padded = SlotCache(model, layout="padded")
    padded.add(COPY)
    with pytest.raises(ValueError, match="ride only in packed forwards"):
        padded.extend([[5]], [(Prefill([1, 2]), 2)])


def test_requests_arriving_together_ride_in_one_decode_forward_and_stay_exact(decoder):
    engine = BatchedDecoder(decoder, max_batch=4, prefill_chunk=64)
    first = engine.submit(COPY, policy=policy("static:ngram:4"), max_new_tokens=30)
    engine.step()
    prompts = [([9, 9, 30, 31, 32, 9, 30], "plain"), (COPY[3:], "adaptive"), (LONG[:40], "static:ngram:4")]
    late = [engine.submit(prompt, policy=policy(name), max_new_tokens=30) for prompt, name in prompts]
    spy = Forwards(decoder.target.model)
    try:
        engine.step()
    finally:
        del decoder.target.model.forward
    # one forward: the decoding row's tokens and the three prompts (7 + 11 + 40 tokens, within the 64 a step)
    assert len(spy.forwards) == 1 and not spy.forwards[0][0] and spy.forwards[0][1] >= 1 + 7 + 11 + 40
    assert [row.id for row in engine.active] == [first, *late] and engine.prefilling is None
    results = engine.run()
    for request, (prompt, name) in zip(late, prompts):
        assert results[request].token_ids == decoder.generate(prompt, policy=policy(name), max_new_tokens=30).token_ids
    assert results[first].token_ids == decoder.generate(COPY, policy=policy("static:ngram:4"), max_new_tokens=30).token_ids


def test_a_step_that_carried_prompts_does_not_teach_the_batch_cap_its_shapes_cost(decoder):
    from policies.batch_cap import BatchDraftCap

    cap = BatchDraftCap()
    engine = BatchedDecoder(decoder, max_batch=4, draft_cap=cap)
    engine.submit(COPY, policy=policy("adaptive"), max_new_tokens=20)
    engine.step()
    seen = []
    observe = cap.observe
    cap.observe = lambda *args: (seen.append(args), observe(*args))
    engine.step()  # nothing rides
    engine.submit(LONG[:30], policy=policy("adaptive"), max_new_tokens=20)
    engine.step()  # the prompt rides
    assert len(seen) == 1
    engine.step()
    assert len(seen) == 2


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


def test_a_step_failing_after_some_riders_joined_ends_each_request_once_and_keeps_finished_results(decoder):
    engine = BatchedDecoder(decoder, max_batch=4)
    running = engine.submit(COPY, policy=policy("plain"), max_new_tokens=30)
    engine.step()

    def broken(tokens):
        raise RuntimeError("the client's stream broke")

    # all three ride in the next step and join in this order: a row, a request done with its
    # first token, and one whose first token fails the step
    seated = engine.submit([7, 8, 9], policy=policy("plain"), max_new_tokens=5)
    done = engine.submit([7, 8, 9], policy=policy("plain"), max_new_tokens=1)
    failing = engine.submit([1, 2, 3], policy=policy("plain"), max_new_tokens=5, on_tokens=broken)
    with pytest.raises(RuntimeError):
        engine.step()
    failed = engine.fail_all(RuntimeError("the client's stream broke"))
    assert sorted(failed) == sorted([running, seated, failing])  # each once: a caller ends each id once
    assert list(engine.results) == [done]  # finished before the failure: its result stands
    assert engine.pending == 0 and engine.slots.rows == 0 and not engine._busy


def test_rows_are_charged_their_own_forward_not_the_prompts_that_rode_in_it(decoder, monkeypatch):
    """What the controllers learn a step cost: a rider's prefill is not the cost of the rows' drafts."""
    from policies.batch_cap import BatchDraftCap

    cap = BatchDraftCap()
    engine = BatchedDecoder(decoder, max_batch=4, draft_cap=cap)
    cap.cost = lambda rows, width, context=0.0: 0.01  # the fit's price of the rows' own forward
    extend = engine.slots.extend
    clock = [0.0]  # the engine's clock: only the forwards move it, so what they are charged is exact
    monkeypatch.setattr(decoder, "_now", lambda: clock[0])

    def slow(inputs, riders=()):  # every forward takes 50 ms on that clock
        clock[0] += 0.05
        return extend(inputs, riders)

    engine.slots.extend = slow
    first = engine.submit(COPY, policy=policy("plain"), max_new_tokens=6)
    engine.step()  # its prompt alone (nothing decodes), then its first decode step
    engine.step()
    engine.submit(LONG[:20], policy=policy("plain"), max_new_tokens=6)  # rides in the third step
    results = engine.run()
    verify = [step.verify_s for step in results[first].steps]
    assert verify[2] == pytest.approx(0.01) and verify[:2] + verify[3:] == pytest.approx([0.05] * (len(verify) - 1))
