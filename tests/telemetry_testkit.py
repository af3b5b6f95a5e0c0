"""Helpers for the telemetry tests: a drafter that can be switched from good to useless, and an
observer wrapper that re-times steps on a fake clock, so alert windows of seconds pass in a few
hundred real steps."""

from __future__ import annotations

import dataclasses
import random
import time

from adaptive_spec.drafters import Drafter, ModelDrafter, Proposal


class SwitchableDrafter(Drafter):
    """``good``: the target itself drafts (greedy: everything accepted). ``bad``: random tokens
    (accepted ~1/vocab of the time), like prompt lookup on prompts with nothing to copy."""

    def __init__(self, target_model, name: str = "d", seed: int = 0) -> None:
        self.name = name
        self.good = ModelDrafter(target_model, name=name)
        self.vocab_size = self.good.vocab_size
        self.mode = "good"
        self.rng = random.Random(seed)

    def reset(self) -> None:
        self.good.reset()

    def propose(self, context, k, config, generator, early_stop=None) -> Proposal:
        if self.mode == "good":
            return self.good.propose(context, k, config, generator)
        return Proposal(tokens=[self.rng.randrange(self.vocab_size) for _ in range(k)])


class FakeClock:
    """Starts at the real time (whole seconds), so that the store's retention by age keeps its rows."""

    def __init__(self, start: float | None = None, step_s: float = 0.1) -> None:
        self.now = float(int(time.time())) if start is None else start
        self.step_s = step_s


class Retimed:
    """Passes hooks to ``inner`` with the request start and each step re-timed on ``clock``
    (``step_s`` of fake time per step)."""

    def __init__(self, inner, clock: FakeClock) -> None:
        self.inner, self.clock = inner, clock

    def on_request_start(self, request) -> None:
        request.start_time = self.clock.now
        self.inner.on_request_start(request)

    def on_step(self, request, outcome, events) -> None:
        self.clock.now += self.clock.step_s
        events = [dataclasses.replace(e, timestamp=self.clock.now) for e in events]
        self.inner.on_step(request, dataclasses.replace(outcome, timestamp=self.clock.now), events)

    def on_request_end(self, request, result, error) -> None:
        self.inner.on_request_end(request, result, error)
