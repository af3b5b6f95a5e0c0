"""Hooks through which telemetry watches generation, and the guard that keeps it harmless.

An observer sees every request start, every step (with any controller events, such as an
acceptance-collapse alarm) and every request end; optionally (a method of that name, where it has
one) the engine's sampled gauges (``on_gauges``) and the batched engine's decode forwards
(``on_batch_step``, ``policies.batch_step.BatchStep``). Observers must never break or stall
generation: ``notify`` catches whatever they raise, counts it, and reports each failing
observer once on the log, and generation carries on.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from policies.outcome import StepOutcome

log = logging.getLogger("adaptive_spec")
_request_ids = itertools.count(1)


@dataclass
class RequestInfo:
    model: str
    key: str  # traffic key: the controller state and the telemetry series it belongs to
    config: Any  # GenerationConfig
    prompt_tokens: int
    policy: str
    request_id: int = field(default_factory=lambda: next(_request_ids))
    start_time: float = field(default_factory=time.time)


class GenerationObserver(Protocol):
    def on_request_start(self, request: RequestInfo) -> None: ...

    def on_step(self, request: RequestInfo, outcome: StepOutcome, events: list) -> None: ...

    def on_request_end(self, request: RequestInfo, result: Any | None, error: BaseException | None) -> None: ...


class ObserverSet:
    def __init__(self, observers: list | None = None) -> None:
        self.observers: list = list(observers or [])
        self.errors = 0  # observer failures swallowed so far
        self.errors_by_hook: Counter[str] = Counter()  # the same failures by hook ("on_step", ...)
        self._reported: set[int] = set()  # id() of each observer already reported on the log

    def __bool__(self) -> bool:
        return bool(self.observers)

    def add(self, observer) -> None:
        self.observers.append(observer)

    def notify(self, method: str, *args) -> None:
        for observer in self.observers:
            hook = getattr(observer, method, None)
            if hook is None:
                continue
            try:
                hook(*args)
            except Exception as exc:  # noqa: BLE001 - telemetry must never break generation
                self.errors += 1
                self.errors_by_hook[method] += 1
                if id(observer) not in self._reported:
                    self._reported.add(id(observer))
                    log.warning("observer %s failed in %s (%s: %s); generation continues, further failures are only counted",
                                type(observer).__name__, method, type(exc).__name__, exc)
