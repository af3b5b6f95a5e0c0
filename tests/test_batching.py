"""Continuous batching (issue 17): row by row, the batched engine's tokens are the single request's.

Rows copy, decode openly or not speculate at all, join while others are mid-way and leave at
different lengths; the shared cache is checked against fresh forwards after unequal acceptance."""

import pytest
import torch

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.batching import BatchedDecoder, SlotCache
from adaptive_spec.drafters import Int8Drafter, NgramDrafter
from adaptive_spec.drafters.base import Drafter, Proposal
from adaptive_spec.errors import InvalidParameterError
from batch_kit import Confident, EchoDrafter, dear_drafts_cap
from policies import StaticPolicy
from policies.registry import make_policy
from tiny import loaded, one_thread, tiny_gemma3, tiny_llama

COPY = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6]  # repeats itself: prompt lookup drafts well
PROMPTS = [COPY, [9, 9, 30, 31, 32, 9, 30], [5], list(range(40, 60)), [7, 3, 7, 3, 7, 3, 11]]


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def decoder():
    return SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()])


def policy(name):
    return make_policy(name, ["ngram"])


def alone(decoder, prompt, name, **kw):
    return decoder.generate(prompt, policy=policy(name), **kw)


def test_rows_joining_and_leaving_mid_way_decode_what_each_request_decodes_alone(decoder):
    mix = [(PROMPTS[0], "static:ngram:8", 40), (PROMPTS[1], "plain", 25), (PROMPTS[2], "adaptive", 33),
           (PROMPTS[3], "static:ngram:3", 12), (PROMPTS[4], "heuristic:ngram", 30), (PROMPTS[0], "plain", 18)]
    engine = BatchedDecoder(decoder, max_batch=4)
    ids = [engine.submit(p, policy=policy(name), max_new_tokens=n) for p, name, n in mix[:3]]
    joined_mid_way = 0
    for _ in range(3):  # the first rows are mid-way when the others arrive
        engine.step()
    for p, name, n in mix[3:]:
        ids.append(engine.submit(p, policy=policy(name), max_new_tokens=n))
    while engine.pending:
        rows_before = len(engine.active)
        engine.step()
        joined_mid_way += rows_before > 0 and len(engine.active) > rows_before
    results = engine.results
    for request_id, (prompt, name, n) in zip(ids, mix):
        assert results[request_id].token_ids == alone(decoder, prompt, name, max_new_tokens=n).token_ids, (name, n)
        assert len(results[request_id].token_ids) == n
    assert joined_mid_way  # max_batch 4: the last request joined when one left
    accepted = {name: results[i].stats.accepted_tokens for i, (_, name, _) in zip(ids, mix)}
    assert accepted["static:ngram:8"] > 0 and accepted["plain"] == 0  # unequal acceptance in one batch
    assert engine.slots.rows == 0 and not engine.active


def test_sampled_rows_draw_what_the_same_seed_draws_alone(decoder):
    # per-row generators: the same seed gives the same tokens as the single request (the batched
    # engine's own distribution checks: tests/test_engine_sampling.py).
    # Controllers whose choices do not depend on timings: a draft of another length draws other
    # random numbers, so an adaptive row's tokens differ run to run even alone
    engine = BatchedDecoder(decoder, max_batch=8)
    mix = [(PROMPTS[0], "static:ngram:8", 3), (PROMPTS[1], "plain", 4), (PROMPTS[4], "static:ngram:4", 5),
           (PROMPTS[3], "heuristic:ngram", 6)]
    sampled = dict(max_new_tokens=30, do_sample=True, temperature=0.9, top_p=0.95)  # do_sample: else greedy
    ids = [engine.submit(p, policy=policy(name), seed=seed, **sampled) for p, name, seed in mix]
    results = engine.run()
    for request_id, (prompt, name, seed) in zip(ids, mix):
        expected = alone(decoder, prompt, name, seed=seed, **sampled)
        assert results[request_id].token_ids == expected.token_ids, name
    greedy = [alone(decoder, prompt, name, max_new_tokens=30).token_ids for prompt, name, _ in mix]
    assert [results[request_id].token_ids for request_id in ids] != greedy  # it did sample


def fresh_logits(model, tokens, last):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens], device=model.device)).logits[0, -last:]


@pytest.mark.parametrize("layout", ["padded", "packed", "auto"])
def test_each_rows_cache_after_unequal_rollbacks_matches_a_fresh_forward(layout):
    model = tiny_llama(seed=3)
    slots = SlotCache(model, layout=layout)
    prompts = [[1, 2, 3, 4, 5], [9, 8], [20, 21, 22, 23, 24, 25, 26, 27]]
    for prompt in prompts:
        slots.add(prompt)
    rng = torch.Generator().manual_seed(0)
    used = set()
    for step in range(12):
        inputs = [torch.randint(0, 64, (int(torch.randint(1, 6, (1,), generator=rng)),), generator=rng).tolist()
                  for _ in range(slots.rows)]
        if step % 4 == 3:  # every row as wide: nothing to leave out, so auto pads
            inputs = [tokens[:1] * 3 for tokens in inputs]
        logits = slots.extend(inputs)
        used.add(slots.last_layout)
        for row, tokens in enumerate(slots.tokens):  # every step, every row: as if it ran alone
            torch.testing.assert_close(logits[row], fresh_logits(model, tokens, len(inputs[row])), rtol=1e-9, atol=1e-9)
        for row in range(slots.rows):  # unequal acceptance: each row keeps its own random prefix
            held = len(slots.tokens[row])
            keep = held - len(inputs[row]) + int(torch.randint(1, len(inputs[row]) + 1, (1,), generator=rng))
            slots.rollback(row, keep)
        if step == 5:
            slots.remove([1])  # a row leaves mid-way
            slots.add([33, 34, 35])  # and another joins
        slots.compact()
    assert slots.slots < sum(len(t) for t in slots.tokens)  # compaction ran: invalid slots were dropped
    probe = [[4], [5, 6], [7]]
    logits = slots.extend(probe)
    for row, tokens in enumerate(slots.tokens):
        torch.testing.assert_close(logits[row], fresh_logits(model, tokens, len(probe[row])), rtol=1e-9, atol=1e-9)
    # auto takes both forms on these widths; the others keep to theirs
    assert used | {slots.last_layout} == ({"padded", "packed"} if layout == "auto" else {layout})


def test_a_packed_step_scores_only_each_rows_own_tokens(monkeypatch):
    model = tiny_llama(seed=3)
    slots = SlotCache(model)
    for prompt in ([1, 2, 3], [4, 5], [6, 7, 8, 9]):
        slots.add(prompt)
    shapes, forward = [], model.forward
    monkeypatch.setattr(model, "forward", lambda input_ids, **kw: shapes.append(tuple(input_ids.shape))
                        or forward(input_ids=input_ids, **kw))
    slots.extend([[1, 2, 3, 4, 5, 6, 7, 8, 9], [1], [2]])  # one row verifying 8 drafts beside one-token rows
    assert (slots.last_layout, slots.last_tokens, shapes[-1]) == ("packed", 11, (1, 11))
    slots.extend([[1, 2], [3, 4], [5, 6]])  # every row as wide: padding costs less
    assert (slots.last_layout, slots.last_tokens, shapes[-1]) == ("padded", 6, (3, 2))
    slots.extend([[1], [2], [3]])
    assert slots.last_layout == "padded" and shapes[-1] == (3, 1)
    with pytest.raises(InvalidParameterError, match="layout"):
        SlotCache(tiny_llama(seed=3), layout="ragged")


def test_a_batch_step_never_copies_key_and_value_heads_per_query_head(monkeypatch):
    # grouped-query attention (4 query heads, 2 key/value heads here) runs in torch's kernel: copying
    # the whole cache once per query head, every layer, was most of what a draft cost the other rows
    import transformers.integrations.sdpa_attention as sdpa_attention

    model = tiny_llama(seed=3)
    assert model.config.num_attention_heads > model.config.num_key_value_heads
    slots = SlotCache(model)
    for prompt in ([1, 2, 3], [4, 5], [6, 7, 8, 9]):
        slots.add(prompt)
    copies = []
    original = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda x, n: copies.append(n) or original(x, n))
    layouts = []
    for inputs in ([[1, 2, 3, 4, 5], [1], [2]], [[1, 2], [3, 4], [5, 6]], [[1], [2], [3]]):
        logits = slots.extend(inputs)
        layouts.append(slots.last_layout)
        for row, tokens in enumerate(slots.tokens):
            torch.testing.assert_close(logits[row], fresh_logits(model, tokens, len(inputs[row])), rtol=1e-9, atol=1e-9)
    assert layouts == ["packed", "padded", "padded"] and copies == []
    monkeypatch.setattr("adaptive_spec.batching.slots._kernel_gqa", lambda module, query: False)
    slots.extend([[1, 2, 3], [4], [5]])  # the check has teeth: transformers' own path copies
    assert copies


def test_a_request_that_does_not_fit_is_refused_alone_and_the_batch_goes_on(decoder):
    engine = BatchedDecoder(decoder, max_batch=4)
    kept = engine.submit(PROMPTS[0], policy=policy("static:ngram:8"), max_new_tokens=20)
    engine.step()
    with pytest.raises(InvalidParameterError) as refused:
        engine.submit(list(range(60)), policy=policy("plain"), max_new_tokens=250)  # the tiny model holds 256
    assert refused.value.name == "max_new_tokens" or refused.value.name == "prompt"
    assert engine.run()[kept].token_ids == alone(decoder, PROMPTS[0], "static:ngram:8", max_new_tokens=20).token_ids


class FailingDrafter(Drafter):
    """A lookup that fails on one request's contexts (those containing token 9): it raises, or
    drafts ids outside the vocabulary (which the target's embedding would raise on, for every row)."""

    name = "flaky"

    def __init__(self, failure: str = "raises") -> None:
        self.ngram = NgramDrafter()
        self.failure = failure

    def propose(self, context, k, config, generator, early_stop=None):
        if 9 in context:
            if self.failure == "raises":
                raise RuntimeError("drafter bug")
            return Proposal(tokens=[10_000, 3, -1][:k])
        return self.ngram.propose(context, k, config, generator)


@pytest.mark.parametrize("failure", ["raises", "outside the vocabulary"])
def test_a_drafter_failure_costs_that_row_its_drafts_only(failure):
    target = loaded(tiny_llama(seed=0))
    decoder = SpeculativeDecoder(target, [FailingDrafter(failure)])
    engine = BatchedDecoder(decoder, max_batch=4)
    good = engine.submit(COPY, policy=StaticPolicy("flaky", 6), max_new_tokens=30)
    bad = engine.submit(PROMPTS[1], policy=StaticPolicy("flaky", 6), max_new_tokens=30)
    results = engine.run()
    plain = SpeculativeDecoder(target)
    assert results[bad].token_ids == plain.generate(PROMPTS[1], max_new_tokens=30).token_ids
    assert results[bad].stats.draft_tokens == 0  # every step of the failing row decoded plainly
    assert results[good].token_ids == plain.generate(COPY, max_new_tokens=30).token_ids
    assert results[good].stats.accepted_tokens > 0


class UnteachableDrafter(NgramDrafter):
    """A lookup whose learning from completed outputs, and whose gauges, fail."""

    name = "unteachable"

    def learn(self, output):
        raise RuntimeError("learn bug")

    def gauges(self):
        raise RuntimeError("gauge bug")


def test_a_drafter_that_fails_to_learn_or_report_gauges_fails_no_request():
    target = loaded(tiny_llama(seed=0))
    class Ends:  # an observer: gauges are reported only where there is one
        def __init__(self):
            self.ends, self.gauges = 0, []

        def on_request_end(self, request, result, error):
            self.ends += error is None

        def on_gauges(self, model, values):
            self.gauges.append(values)

    spy = Ends()
    decoder = SpeculativeDecoder(target, [UnteachableDrafter()], observers=[spy])
    engine = BatchedDecoder(decoder, max_batch=4)
    ids = [engine.submit(p, policy=StaticPolicy("unteachable", 6), max_new_tokens=12) for p in (COPY, PROMPTS[1])]
    results = engine.run()
    plain = SpeculativeDecoder(target)
    assert [results[i].token_ids for i in ids] == [plain.generate(p, max_new_tokens=12).token_ids for p in (COPY, PROMPTS[1])]
    alone = decoder.generate(COPY, max_new_tokens=12, policy=StaticPolicy("unteachable", 6))
    assert alone.token_ids == results[ids[0]].token_ids
    assert spy.ends == 3 and decoder.observers.errors == 0  # every request ended without an error


def test_a_learning_controller_serves_one_row_at_a_time(decoder):
    shared = policy("adaptive")
    engine = BatchedDecoder(decoder, max_batch=4)
    first = engine.submit(PROMPTS[0], policy=shared, max_new_tokens=10)
    second = engine.submit(PROMPTS[1], policy=shared, max_new_tokens=10)
    static = engine.submit(PROMPTS[2], policy=StaticPolicy("ngram", 4), max_new_tokens=10)
    also_static = engine.submit(PROMPTS[3], policy=StaticPolicy("ngram", 4), max_new_tokens=10)
    engine.step()
    assert len(engine.active) == 3 and [r.id for r in engine.waiting] == [second]  # stateless ones share
    results = engine.run()
    assert {first, second, static, also_static} == set(results)
    assert results[second].token_ids == alone(decoder, PROMPTS[1], "plain", max_new_tokens=10).token_ids


def test_what_the_batched_engine_cannot_run_is_refused_by_name():
    target32 = loaded(tiny_llama(seed=0, dtype=torch.float32))
    with pytest.raises(InvalidParameterError) as stateful:
        BatchedDecoder(SpeculativeDecoder(target32, [NgramDrafter(), Int8Drafter(target32.model)]))
    assert stateful.value.name == "drafters" and "int8" in str(stateful.value)
    with pytest.raises(InvalidParameterError) as windowed:
        BatchedDecoder(SpeculativeDecoder(loaded(tiny_gemma3()), [NgramDrafter()]))
    assert windowed.value.name == "model"
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidParameterError) as size:
            BatchedDecoder(SpeculativeDecoder(loaded(tiny_llama(seed=0))), max_batch=bad)
        assert size.value.name == "max_batch"


def test_requests_of_one_key_decode_together_each_with_a_controller_of_its_own():
    from policies.registry import PolicyRegistry

    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()], policy=PolicyRegistry("adaptive", ["ngram"]))
    engine = BatchedDecoder(decoder, max_batch=4)
    ids = [engine.submit(p, key="tenant-a", max_new_tokens=20) for p in PROMPTS[:3]]
    ids.append(engine.submit(PROMPTS[3], key="tenant-a", force_plain=True, max_new_tokens=20))
    engine.step()
    assert len(engine.active) == 4  # one key, four rows at once
    controllers = {id(row.policy.inner if hasattr(row.policy, "inner") else row.policy) for row in engine.active}
    assert len(controllers) == 4 and decoder.policy.get("tenant-a") in [r.policy for r in engine.active]
    results = engine.run()
    for request_id, prompt in zip(ids, PROMPTS):
        assert results[request_id].token_ids == alone(decoder, prompt, "plain", max_new_tokens=20).token_ids
    assert results[ids[3]].stats.draft_tokens == 0  # forced plain


def test_tokens_arrive_step_by_step_and_a_cancelled_row_leaves_the_others_exact(decoder):
    class Ends:
        def __init__(self):
            self.ends = []

        def on_request_start(self, request):
            pass

        def on_step(self, request, outcome, events):
            pass

        def on_request_end(self, request, result, error):
            self.ends.append(type(error).__name__ if error else "ok")

    ends = Ends()
    observed = SpeculativeDecoder(decoder.target_model, [NgramDrafter()], observers=[ends])
    engine = BatchedDecoder(observed, max_batch=4)
    heard: dict[int, list[int]] = {}
    ids = [engine.submit(p, policy=policy("static:ngram:4"), max_new_tokens=30,
                         on_tokens=lambda t, i=i: heard.setdefault(i, []).extend(t)) for i, p in enumerate(PROMPTS[:3])]
    for _ in range(4):
        engine.step()
    assert engine.cancel(ids[1]) and not engine.cancel(ids[1])
    results = engine.run()
    assert ids[1] not in results and sorted(ends.ends) == ["GeneratorExit", "ok", "ok"]
    for i in (0, 2):
        assert heard[i] == results[ids[i]].token_ids
        assert results[ids[i]].token_ids == alone(decoder, PROMPTS[i], "static:ngram:4", max_new_tokens=30).token_ids


def test_the_batch_cap_binds_learning_controllers_rows_only_and_keeps_outputs_exact(decoder):
    from policies.batch_cap import BatchDraftCap

    class Never(BatchDraftCap):  # the batch affords no drafts at all
        def allot(self, lengths, expected, bound, *args, **kwargs):
            return None if len(lengths) <= 1 else [0 if b else n for n, b in zip(lengths, bound)]

    never = Never()
    engine = BatchedDecoder(decoder, max_batch=4, draft_cap=never)
    learning = engine.submit(COPY, policy=policy("adaptive"), max_new_tokens=30)
    fixed = engine.submit(COPY, policy=policy("static:ngram:8"), max_new_tokens=30)
    # a learning controller forced to a drafter by the request: the request's choice stands
    forced = engine.submit(COPY, policy=policy("adaptive"), force_drafter="ngram", force_k=4, max_new_tokens=30)
    results = engine.run()
    expected = alone(decoder, COPY, "plain", max_new_tokens=30).token_ids
    assert all(results[i].token_ids == expected for i in (learning, fixed, forced))
    in_company = results[learning].steps[: len(results[fixed].steps)]
    assert sum(s.proposed for s in in_company) == 0  # capped to 0 while it had company
    # (that its controller learned plain steps, not misses, is checked with a drafter that never misses below)
    assert results[fixed].stats.draft_tokens > 0 and results[forced].stats.draft_tokens > 0  # fixed and forced stand
    assert never.cost(3, 5) is not None  # it measured the batch's steps


@pytest.mark.parametrize("layout", ["auto", "padded"])
def test_a_failed_prefill_leaves_its_request_to_the_recovery_not_lost(decoder, monkeypatch, layout):
    """``auto``: the prompt rides in the decode forward, which fails; ``padded``: its own prefill does."""
    engine = BatchedDecoder(decoder, max_batch=4, layout=layout)
    running = engine.submit(PROMPTS[0], policy=policy("plain"), max_new_tokens=10)
    engine.step()
    broken = engine.submit(PROMPTS[1], policy=policy("plain"), max_new_tokens=10)
    extend = engine.slots.extend

    def extend_with_riders_fails(inputs, riders=()):
        if riders:
            raise RuntimeError("out of memory")
        return extend(inputs, riders)

    monkeypatch.setattr(engine.slots, "extend", extend_with_riders_fails)
    monkeypatch.setattr(engine.slots, "feed", lambda *a: (_ for _ in ()).throw(RuntimeError("out of memory")))
    with pytest.raises(RuntimeError):
        engine.step()
    assert sorted(engine.fail_all(RuntimeError("out of memory"))) == [running, broken]  # both told, none lost
    assert engine.pending == 0 and engine.slots.rows == 0


def test_controller_pools_are_bounded_like_the_registry():
    from policies.registry import PolicyRegistry

    registry = PolicyRegistry("adaptive", ["ngram"], max_keys=3)
    engine = BatchedDecoder(SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()], policy=registry), max_batch=2)
    for i in range(10):
        engine.submit(PROMPTS[2], key=f"user-{i}", max_new_tokens=3)
    engine.run()
    assert len(engine._pools) <= 3 and "user-9" in engine._pools


def test_a_row_left_with_nothing_to_verify_bounds_what_the_others_drafts_cost_it():
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [EchoDrafter()])

    def served(slowdown):
        cap = dear_drafts_cap(slowdown)  # a step with any multi-token row costs ~4x a plain one
        engine = BatchedDecoder(decoder, max_batch=2, draft_cap=cap)
        drafting = engine.submit(COPY, policy=Confident("echo", start_k=8), max_new_tokens=30)
        plain = engine.submit(PROMPTS[1], policy=make_policy("plain", ["echo"]), max_new_tokens=12)
        results = engine.run()
        return results[drafting], results[plain]

    drafting, plain = served(0.05)
    assert drafting.token_ids == SpeculativeDecoder(decoder.target_model).generate(COPY, max_new_tokens=30).token_ids
    assert plain.token_ids == SpeculativeDecoder(decoder.target_model).generate(PROMPTS[1], max_new_tokens=12).token_ids
    in_company = drafting.steps[: len(plain.steps)]
    assert sum(s.proposed for s in in_company) == 0  # its drafts would cost the plain row 4x
    assert all(s.k == 0 for s in in_company)  # and its controller learned plain steps, not rejected drafts
    assert drafting.stats.draft_tokens > 0  # alone again, it drafts
    unbounded, _ = served(None)
    assert sum(s.proposed for s in unbounded.steps[: len(plain.steps)]) > 0  # without the bound its drafts pay


def test_each_rows_credit_is_what_its_steps_earned_and_the_cap_weighs_it():
    """A row's credit (seconds ahead of plain decoding, with the margin) is kept over its request's
    life from what each step's ``credits`` gave it, and every cut is picked with the rows' credits."""
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [EchoDrafter()])
    earned, picked = {}, []

    class Spy(type(dear_drafts_cap())):
        def credits(self, width, emitted, context=0.0):
            gained = super().credits(width, emitted, context)
            for row, g in zip(engine.active, gained or ()):
                earned[id(row)] = earned.get(id(row), 0.0) + g
            return gained

        def allot(self, lengths, expected, bound, scored, credit=None, context=0.0):
            picked.append((credit, [earned.get(id(row), 0.0) for row in engine.active]))
            return super().allot(lengths, expected, bound, scored, credit, context)

    cap = Spy(plain_slowdown=0.05)
    cap.warm([(r, w, 0.01 + 0.01 * r + 0.001 * r * w, 32) for r in (1, 2, 4) for w in (1, 2, 5, 9)])
    engine = BatchedDecoder(decoder, max_batch=3, draft_cap=cap)
    engine.submit(COPY, policy=Confident("echo", start_k=4), max_new_tokens=24)
    engine.submit(PROMPTS[1], policy=make_policy("plain", ["echo"]), max_new_tokens=16)
    engine.submit(COPY, policy=Confident("echo", start_k=2), max_new_tokens=20)
    engine.run()
    assert len(picked) > 5
    assert all(credit == pytest.approx(expected) for credit, expected in picked)
    assert any(abs(c) > 0 for credit, _ in picked for c in credit)  # credits were earned, and weighed


def test_a_packed_forward_in_one_thread_leaves_another_threads_attention_alone():
    """The packed step's attention wrapper acts only for the thread whose packed forward it is: a
    forward of another thread meanwhile runs plain sdpa and gets its own logits."""
    import threading

    from adaptive_spec.batching import slots as slot_module

    model = tiny_llama(seed=4)
    ids = torch.tensor([[5, 9, 2, 7, 1, 3]])
    with one_thread(), torch.inference_mode():
        alone = model(input_ids=ids).logits
        cache = SlotCache(model, layout="packed")  # installs the wrapper
        for prompt in ([3, 4, 5, 6], [7, 8, 9, 10]):
            cache.add(prompt)
        # a packed forward's state set in this thread, as during one: the other thread must not see it
        slot_module._SPREAD.spread = slot_module._Spread(2, 3, torch.tensor([0, 1, 2, 3]), torch.zeros(2, 1, 3, 7))
        seen = {}
        try:
            worker = threading.Thread(target=lambda: seen.update(logits=model(input_ids=ids).logits))
            worker.start()
            worker.join()
        finally:
            slot_module._SPREAD.spread = None
        assert torch.equal(seen["logits"], alone)
        # and with the state cleared, this thread's own packed step still runs packed
        packed = cache.extend([[11, 12, 13], [14]])
        assert cache.last_layout == "packed" and [p.shape[0] for p in packed] == [3, 1]


def test_a_row_sampling_at_a_tiny_temperature_decodes_greedily_beside_the_others(decoder):
    # its logits once overflowed to nan and the sampler raised: the step failed every row
    engine = BatchedDecoder(decoder, max_batch=4)
    other = engine.submit(PROMPTS[0], policy=policy("static:ngram:4"), max_new_tokens=20)
    engine.step()
    tiny = engine.submit(PROMPTS[1], policy=policy("static:ngram:4"), max_new_tokens=20, do_sample=True,
                         temperature=1e-320, seed=1)
    results = engine.run()
    assert results[tiny].token_ids == alone(decoder, PROMPTS[1], "static:ngram:4", max_new_tokens=20).token_ids
    assert results[other].token_ids == alone(decoder, PROMPTS[0], "static:ngram:4", max_new_tokens=20).token_ids
