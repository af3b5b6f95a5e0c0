"""Synthetic workloads: an arrival process, a class mix, and step shifts in both.

A workload is generated *before* the simulation starts, as a sorted list of ``Request``s with
their lengths drawn. Generating up front keeps randomness for traffic separate from randomness for
acceptance, so two policies compared on the same seed see exactly the same requests (common
random numbers), and it keeps the SimPy arrival process to one timeout per request.

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

from dataclasses import dataclass, field

import numpy as np

from simulator.arrivals import ArrivalProcess
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
        """Draw every request of the run, sorted by arrival time, ids in arrival order."""
        times_parts, class_parts, prompt_parts, output_parts = [], [], [], []
        for phase in self.phases():
            times = self.arrival.times(rng, phase.start_s, phase.end_s, phase.rate)
            names = sorted(phase.mix)
            weights = np.array([phase.mix[n] for n in names], dtype=float)
            picks = rng.choice(len(names), size=len(times), p=weights / weights.sum())
            prompts = np.zeros(len(times), dtype=np.int64)
            outputs = np.zeros(len(times), dtype=np.int64)
            for j, name in enumerate(names):
                chosen = picks == j
                prompts[chosen] = classes[name].prompt_tokens.sample(rng, int(chosen.sum()))
                outputs[chosen] = classes[name].output_tokens.sample(rng, int(chosen.sum()))
            times_parts.append(times)
            class_parts.append(np.asarray(names, dtype=object)[picks] if len(names) else np.empty(0, dtype=object))
            prompt_parts.append(prompts)
            output_parts.append(outputs)
        if not times_parts:
            return []
        times = np.concatenate(times_parts)
        klass = np.concatenate(class_parts)
        prompts = np.concatenate(prompt_parts)
        outputs = np.concatenate(output_parts)
        if self.max_requests is not None:
            times, klass = times[: self.max_requests], klass[: self.max_requests]
            prompts, outputs = prompts[: self.max_requests], outputs[: self.max_requests]
        return [
            Request(i, str(c), int(p), int(o), float(t))
            for i, (t, c, p, o) in enumerate(zip(times.tolist(), klass.tolist(), prompts.tolist(), outputs.tolist()))
        ]

    def boundaries(self) -> list[float]:
        """Phase start times after 0, for per-phase reports (before / after a shift)."""
        return [p.start_s for p in self.phases()[1:]]
