"""An observer that raises never breaks generation: the error is counted and logged once per observer."""

import logging

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.observers import ObserverSet
from policies import StaticPolicy
from tiny import loaded, one_thread, tiny_llama

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]
HOOKS = ("on_request_start", "on_step", "on_request_end")


class Recorder:
    """Logs every hook call as (hook, request_id); raises from the hooks named in ``fail``."""

    def __init__(self, fail=()):
        self.fail = set(fail)
        self.log = []

    def _call(self, hook, request):
        self.log.append((hook, request.request_id))
        if hook in self.fail:
            raise RuntimeError(f"{hook} is broken")

    def on_request_start(self, request):
        self._call("on_request_start", request)

    def on_step(self, request, outcome, events):
        self._call("on_step", request)

    def on_request_end(self, request, result, error):
        self._call("on_request_end", request)


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def target():
    return loaded(tiny_llama(seed=0))


def generate(decoder):
    return decoder.generate(PROMPT, max_new_tokens=20, policy=StaticPolicy("ngram", 4))


def failure_logs(caplog):
    return [r for r in caplog.records if r.name == "adaptive_spec" and "observer" in r.getMessage()]


@pytest.mark.parametrize("hooks", [(h,) for h in HOOKS] + [HOOKS], ids=[*HOOKS, "all"])
def test_a_raising_observer_is_counted_logged_once_and_generation_completes(target, caplog, hooks):
    expected = generate(SpeculativeDecoder(target, [NgramDrafter()]))
    broken = Recorder(fail=hooks)
    decoder = SpeculativeDecoder(target, [NgramDrafter()], observers=[broken])
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        first = generate(decoder)
        calls_after_first = len(broken.log)
        second = generate(decoder)  # fails again: counted, not logged again
    assert first.token_ids == second.token_ids == expected.token_ids
    assert first.finish_reason == "length" and len(first.token_ids) == 20
    # the observer was still called for every event after its first failure
    assert [h for h, _ in broken.log].count("on_step") == len(first.steps) + len(second.steps)
    failed = [h for h, _ in broken.log if h in hooks]
    assert decoder.observers.errors == len(failed) == 2 * sum(1 for h, _ in broken.log[:calls_after_first] if h in hooks)
    assert dict(decoder.observers.errors_by_hook) == {h: failed.count(h) for h in hooks}
    logs = failure_logs(caplog)
    assert len(logs) == 1 and logs[0].levelno == logging.WARNING
    assert "Recorder" in logs[0].getMessage() and "is broken" in logs[0].getMessage()


def test_a_healthy_observer_beside_a_raising_one_sees_every_event(target):
    broken, healthy = Recorder(fail=HOOKS), Recorder()
    decoder = SpeculativeDecoder(target, [NgramDrafter()], observers=[broken, healthy])
    result = generate(decoder)
    assert healthy.log == broken.log  # same events, same order
    assert [h for h, _ in healthy.log] == ["on_request_start", *["on_step"] * len(result.steps), "on_request_end"]


def test_each_failing_observer_is_logged_once(target, caplog):
    first, second = Recorder(fail={"on_step"}), Recorder(fail={"on_request_end"})
    decoder = SpeculativeDecoder(target, [NgramDrafter()], observers=[first, second])
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        for _ in range(3):
            generate(decoder)
    messages = [r.getMessage() for r in failure_logs(caplog)]
    assert len(messages) == 2, messages
    assert "on_step" in messages[0] and "on_request_end" in messages[1]
    assert decoder.observers.errors_by_hook["on_request_end"] == 3


def test_stream_survives_a_raising_observer(target):
    decoder = SpeculativeDecoder(target, [NgramDrafter()], observers=[Recorder(fail=HOOKS)])
    text = "".join(decoder.stream(PROMPT, max_new_tokens=20, policy=StaticPolicy("ngram", 4)))
    assert text == generate(SpeculativeDecoder(target, [NgramDrafter()])).text
    assert decoder.observers.errors > 0


def test_observer_set_counts_without_observers_and_skips_missing_hooks():
    class OnlyStart:
        def on_request_start(self, request):
            raise ValueError("nope")

    observers = ObserverSet([OnlyStart()])
    observers.notify("on_step", None, None, [])  # no such hook: nothing to call, nothing counted
    assert observers.errors == 0
    observers.notify("on_request_start", None)
    observers.notify("on_request_start", None)
    assert observers.errors == 2 and observers.errors_by_hook == {"on_request_start": 2}
    assert not ObserverSet() and ObserverSet([OnlyStart()])
