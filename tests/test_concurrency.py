"""One decoder, many threads: every request gets exactly what it gets alone, or a clear error.

The decoder holds one request's working state (the target's KV cache, the drafters' caches, the
controllers), so it serves one request at a time; these tests run many threads against one
decoder and compare every output with the same request run single-threaded beforehand.
"""

import gc
import threading

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import ModelDrafter, NgramDrafter
from policies import PolicyRegistry, StaticPolicy
from tiny import loaded, one_thread, tiny_llama

THREADS = 8
REQUESTS_PER_THREAD = 20
NEW_TOKENS = 16
JOIN_GUARD_S = 600  # only turns a deadlock into a failure; never reached by a passing run


@pytest.fixture()
def decoder():
    with one_thread():  # torch's thread count is global: the worker threads run with it too
        yield SpeculativeDecoder(
            loaded(tiny_llama(seed=0)), [NgramDrafter(), ModelDrafter(tiny_llama(seed=1), name="draft")],
            policy=PolicyRegistry("adaptive", ["ngram", "draft"]),
        )


def tiny_requests(sampled: bool) -> list[dict]:
    """160 different requests: copy-heavy and random prompts, three traffic keys, every fourth streamed.

    Greedy requests share the decoder's learning controllers (one per key): their choices depend on
    what ran before, which greedy output does not. Sampled output depends on the drafts (they decide
    how the seeded generator is consumed), so sampled requests carry a static policy each.
    """
    policies = [("none", 0), ("ngram", 4), ("draft", 3), ("draft", 1)]
    requests = []
    for i in range(THREADS * REQUESTS_PER_THREAD):
        motif = [(7 * i + j) % 60 + 1 for j in range(5)]
        prompt = motif * 3 if i % 2 else [(11 * i + 5 * j * j) % 63 + 1 for j in range(12)]
        request = {"prompt": prompt, "max_new_tokens": NEW_TOKENS, "key": f"key{i % 3}", "stream": i % 4 == 3}
        if sampled:
            drafter, k = policies[i % len(policies)]
            request.update(do_sample=True, temperature=0.9, top_k=40 if i % 3 else 0, seed=1000 + i,
                           policy=StaticPolicy(drafter, k))
        requests.append(request)
    return requests


def call_args(request: dict) -> dict:
    """The keyword arguments of ``generate`` / ``stream``: the request less its ``stream`` mark."""
    return {name: value for name, value in request.items() if name != "stream"}


def run_alone(decoder, request: dict) -> list[int] | str:
    """The token ids of ``generate``, or the text of ``stream`` for a request marked ``stream``."""
    args = call_args(request)
    return "".join(decoder.stream(**args)) if request.get("stream") else decoder.generate(**args).token_ids


def run_in_threads(decoder, requests: list[dict]) -> tuple[dict[int, object], list[BaseException]]:
    """Run ``requests`` from THREADS threads started together; request i goes to thread i % THREADS."""
    outputs: dict[int, object] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def worker(index: int) -> None:
        start.wait()
        for i in range(index, len(requests), THREADS):
            try:
                outputs[i] = run_alone(decoder, requests[i])
            except BaseException as exc:  # every failure is reported, none ends the other requests
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_GUARD_S)
    assert not any(thread.is_alive() for thread in threads), "a thread never finished: deadlock"
    return outputs, errors


def failures(total: int, errors: list[BaseException], wrong: list[int]) -> str:
    first = f" (first: {errors[0]!r})" if errors else ""
    return (f"of {total} requests, {len(errors)} raised{first} and {len(wrong)} returned another output "
            f"than alone, with no error: {wrong[:10]}")


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_many_threads_on_one_decoder_each_get_their_single_threaded_result(decoder, sampled):
    requests = tiny_requests(sampled)
    expected = [run_alone(decoder, r) for r in requests]
    outputs, errors = run_in_threads(decoder, requests)
    wrong = [i for i in outputs if outputs[i] != expected[i]]
    assert not errors and not wrong, failures(len(requests), errors, wrong)


def test_sampled_requests_alone_are_reproducible(decoder):
    """What the concurrency test relies on: a seeded request with a static policy repeats exactly."""
    requests = tiny_requests(sampled=True)[:8]
    first = [run_alone(decoder, r) for r in requests]
    again = [run_alone(decoder, r) for r in reversed(requests)][::-1]
    assert first == again


def test_a_stream_holds_the_decoder_until_closed(decoder):
    request = call_args(tiny_requests(sampled=False)[1])
    expected = run_alone(decoder, request)
    stream = decoder.stream(**request)
    next(stream)
    waiting: list = []
    other = threading.Thread(target=lambda: waiting.append(run_alone(decoder, request)))
    other.start()
    other.join(0.2)
    assert other.is_alive() and not waiting  # blocked on the open stream, whatever the machine's speed
    stream.close()
    other.join(JOIN_GUARD_S)
    assert waiting == [expected]


def test_an_abandoned_stream_releases_the_decoder_when_collected(decoder):
    request = call_args(tiny_requests(sampled=False)[1])
    stream = decoder.stream(**request)
    next(stream)
    assert decoder._exclusive.locked()
    del stream
    gc.collect()  # CPython already finalized it on the last reference; other interpreters need this
    assert not decoder._exclusive.locked()
    decoder.generate(**request)


def test_a_stream_started_in_one_thread_can_be_finished_in_another(decoder):
    request = call_args(tiny_requests(sampled=False)[3])
    expected = run_alone(decoder, {**request, "stream": True})
    stream = decoder.stream(**request)
    pieces = [next(stream)]
    other = threading.Thread(target=lambda: pieces.extend(stream))
    other.start()
    other.join(JOIN_GUARD_S)
    assert "".join(pieces) == expected
    assert not decoder._exclusive.locked()
    decoder.generate(**request)  # the starting thread may decode again


def test_a_request_from_the_thread_holding_an_open_stream_raises_instead_of_deadlocking(decoder):
    request = call_args(tiny_requests(sampled=False)[1])
    stream = decoder.stream(**request)
    next(stream)
    with pytest.raises(RuntimeError, match="already holds the decoder"):
        decoder.generate(**request)
    with pytest.raises(RuntimeError, match="already holds the decoder"):
        next(decoder.stream(**request))
    stream.close()
    decoder.generate(**request)


def test_a_target_cache_out_of_step_is_an_error_not_wrong_text(decoder):
    """Real checks, not asserts: ``python -O`` must not turn a corrupted cache into wrong text."""
    request = call_args(tiny_requests(sampled=False)[0])
    stream = decoder.stream(**request)
    next(stream)
    decoder.target.tokens[0] += 1  # what another request sharing the cache would have done
    with pytest.raises(RuntimeError, match="target cache out of step"):
        list(stream)
    decoder.target.extend([1, 2])
    decoder.target.cache.crop(-1)  # keys and values no longer match the tokens
    with pytest.raises(RuntimeError, match="KV cache out of step"):
        decoder.target.extend([3])


# -- the real model ------------------------------------------------------------------------------

REAL_REQUESTS_PER_THREAD = 3  # 24 requests over 8 threads: enough to interleave, small for a 2-core CPU


@pytest.mark.real_model
def test_smollm2_many_threads_on_one_decoder_each_get_their_single_threaded_result():
    from adaptive_spec import load_model
    from adaptive_spec.drafters import build_drafter

    # one torch thread: on a loaded 2-core machine a second one mostly contends (see tiny.one_thread)
    with one_thread():
        target = load_model("smollm2")
        decoder = SpeculativeDecoder(target, [build_drafter("ngram", target), build_drafter("int8", target)])
        copy, story = "Repeat exactly: the quick brown fox jumps over the lazy dog.", "Tell me a story about a cat."
        sampled = {"do_sample": True, "temperature": 0.8}
        # static policies: fp32 near-ties could let a learning controller's order-dependent choices show
        distinct = [
            {"prompt": copy, "policy": StaticPolicy("ngram", 4)},
            {"prompt": story, "policy": StaticPolicy("int8", 3), "stream": True},
            {"prompt": copy, "policy": StaticPolicy("none", 0)},
            {"prompt": copy, "policy": StaticPolicy("int8", 3), **sampled, "seed": 1},
            {"prompt": story, "policy": StaticPolicy("ngram", 4), **sampled, "seed": 2, "stream": True},
            {"prompt": story, "policy": StaticPolicy("none", 0), **sampled, "seed": 3},
        ]
        distinct = [{**request, "max_new_tokens": NEW_TOKENS} for request in distinct]
        requests = [distinct[i % len(distinct)] for i in range(THREADS * REAL_REQUESTS_PER_THREAD)]
        expected = [run_alone(decoder, request) for request in distinct]
        outputs, errors = run_in_threads(decoder, requests)
        wrong = [i for i in outputs if outputs[i] != expected[i % len(distinct)]]
        assert not errors and not wrong, failures(len(requests), errors, wrong)
