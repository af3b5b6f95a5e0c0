"""Synthetic workloads: an arrival process, a class mix, and step shifts in both.

A workload is a stream of ``Request``s in arrival order with their lengths drawn, from a
random generator of its own. Keeping traffic randomness apart from acceptance randomness means two
policies compared on the same seed see exactly the same requests (common random numbers), and the
SimPy arrival process takes one timeout per request. The stream is drawn a block at a time
(``arrivals.BLOCK``) while the simulation consumes it, so a run of millions of requests holds one
block, not the whole run; a phase that fits in one block is drawn exactly as when whole workloads
were drawn up front, so seeds give the results they always gave.

Time is cut into *phases*. The first phase starts at 0 with ``rate`` and ``mix``; each entry of
``shifts`` starts a new phase at ``at_s`` and may change the rate, the mix, or both (a field it
leaves out keeps its previous value). That one mechanism expresses a load step ("rate doubles at
t = 600 s") and a traffic shift ("from t = 600 s all requests are open-ended chat, where prompt
lookup is rarely accepted").

>>> from simulator.arrivals import ArrivalProcess
>>> w = Workload(ArrivalProcess(), rate=2.0, mix={"a": 1.0}, duration_s=100,
...              shifts=(Shift(at_s=50, mix={"b": 1.0}),))
>>> [(p.start_s, p.end_s, p.rate, p.mix) for p in w.phases()]
[(0.0, 50.0, 2.0, {'a': 1.0}), (50.0, 100.0, 2.0, {'b': 1.0})]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from simulator.arrivals import BLOCK, ArrivalProcess
from simulator.entities import Request, RequestClass


@dataclass(frozen=True)
class Shift:
    """A step change at ``at_s``: a new rate and/or a new class mix from then on."""

    at_s: float  # simulated second the change takes effect
    rate: float | None = None  # new mean arrival rate (requests/s); None keeps the current one
    mix: dict[str, float] | None = None  # new class weights; None keeps the current mix


@dataclass(frozen=True)
class Phase:
    """A window with constant rate and mix."""

    start_s: float
    end_s: float
    rate: float
    mix: dict[str, float]


@dataclass(frozen=True)
class Workload:
    """Synthetic traffic: who arrives when, in which class."""

    arrival: ArrivalProcess  # the law of arrival times (poisson, gamma, mmpp, diurnal)
    rate: float  # mean arrival rate at t = 0, requests per second
    mix: dict[str, float]  # class name -> relative weight at t = 0 (normalised, need not sum to 1)
    duration_s: float  # arrivals stop at this simulated second (the run then drains)
    shifts: tuple[Shift, ...] = field(default=())  # step changes, in increasing at_s
    max_requests: int | None = None  # cap on arrivals (handy for benchmarks); None: no cap

    def phases(self) -> list[Phase]:
        """The constant-rate, constant-mix windows that cover ``[0, duration_s)``."""
        bounds = [s.at_s for s in self.shifts if s.at_s < self.duration_s] + [self.duration_s]
        phases, start, rate, mix = [], 0.0, self.rate, self.mix
        for i, end in enumerate(bounds):
            if end > start:
                phases.append(Phase(float(start), float(end), rate, mix))
            if i < len(self.shifts):
                shift = self.shifts[i]
                rate = shift.rate if shift.rate is not None else rate
                mix = shift.mix if shift.mix is not None else mix
            start = end
        return phases

    def generate(self, classes: dict[str, RequestClass], rng: np.random.Generator) -> list[Request]:
        """Every request of the run, sorted by arrival time, ids in arrival order (small runs, tests)."""
        return list(self.stream(classes, rng))

    def stream(self, classes: dict[str, RequestClass], rng: np.random.Generator) -> Iterator[Request]:
        """The requests of ``generate``, one at a time; nothing is drawn beyond the current block."""
        next_id = 0
        for phase in self.phases():
            for block in self._blocks(phase, classes, rng):
                for request in _requests(block, next_id, self._left(next_id)):
                    yield request
                    next_id += 1
                if self._left(next_id) == 0:
                    return

    def _blocks(self, phase: Phase, classes: dict[str, RequestClass], rng: np.random.Generator) -> Iterator[tuple]:
        """One phase in blocks: arrival times gathered until a block is full, then classes and lengths."""
        names = sorted(phase.mix)
        weights = np.array([phase.mix[n] for n in names], dtype=float)
        pending: list[np.ndarray] = []
        count, drawn = 0, False
        for chunk in self.arrival.chunks(rng, phase.start_s, phase.end_s, phase.rate):
            pending.append(chunk)
            count += len(chunk)
            if count >= BLOCK:
                yield _draw_block(np.concatenate(pending), names, weights, classes, rng)
                pending, count, drawn = [], 0, True
        if pending or not drawn:  # an empty phase still draws its (empty) classes, as it always has
            yield _draw_block(np.concatenate(pending) if pending else np.empty(0), names, weights, classes, rng)

    def _left(self, next_id: int) -> int | None:
        return None if self.max_requests is None else max(0, self.max_requests - next_id)

    def boundaries(self) -> list[float]:
        """Phase start times after 0, for per-phase reports (before / after a shift)."""
        return [p.start_s for p in self.phases()[1:]]


def _draw_block(times: np.ndarray, names: list[str], weights: np.ndarray, classes: dict[str, RequestClass],
                rng: np.random.Generator) -> tuple:
    """Class and lengths for each arrival time of one block (times, class index, prompt, output)."""
    picks = rng.choice(len(names), size=len(times), p=weights / weights.sum())
    prompts = np.zeros(len(times), dtype=np.int64)
    outputs = np.zeros(len(times), dtype=np.int64)
    for j, name in enumerate(names):
        chosen = picks == j
        prompts[chosen] = classes[name].prompt_tokens.sample(rng, int(chosen.sum()))
        outputs[chosen] = classes[name].output_tokens.sample(rng, int(chosen.sum()))
    return times, [str(n) for n in names], picks, prompts, outputs


def _requests(block: tuple, first_id: int, limit: int | None, step: int = 4096) -> Iterator[Request]:
    """Requests of a drawn block, converted a slice at a time (Python objects only for a slice)."""
    times, names, picks, prompts, outputs = block
    n = len(times) if limit is None else min(limit, len(times))
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        rows = zip(times[lo:hi].tolist(), picks[lo:hi].tolist(), prompts[lo:hi].tolist(), outputs[lo:hi].tolist())
        for i, (t, c, p, o) in enumerate(rows, start=first_id + lo):
            yield Request(i, names[c], int(p), int(o), float(t))
