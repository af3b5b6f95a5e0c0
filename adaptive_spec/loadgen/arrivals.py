"""When requests arrive, and which kind of prompt each one carries.

Arrivals follow ``vllm bench serve``: the gaps between requests are Gamma distributed with shape
``burstiness`` and mean ``1 / rate``, so ``rate`` is requests per second whatever the burstiness.
``burstiness = 1`` makes the gaps exponential (a Poisson process); below 1 the traffic is burstier
(many short gaps, a few long ones), above 1 it is smoother. The coefficient of variation of the
gaps is ``1 / sqrt(burstiness)``. ``rate = inf`` sends every request at once (the concurrency limit
then paces them).

A *schedule* shifts the traffic mix over time, to watch the controller react under load: a list of
phases, each a duration and the kinds (the ``kind`` field of the prompt file) its requests draw
from. On the command line::

    copy:300,open:300          kind copy for 300 s, then kind open for 300 s
    copy+open:60,collapse:60   copy and open equally for 60 s, then collapse

or a JSON or YAML file holding a list of phases, with weights when the mix is uneven::

    [{"seconds": 300, "kind": "copy"},
     {"seconds": 300, "mix": {"copy": 1, "open": 3}}]

A request's phase is the one its arrival falls in; the run ends with the last phase.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.prompts import Prompt


def gaps(rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Seconds between consecutive arrivals, forever: Gamma(shape=burstiness, mean=1/rate);
    all zeros when ``rate`` is infinite."""
    if math.isinf(rate):
        return itertools.repeat(0.0)
    scale = 1.0 / (rate * burstiness)  # Gamma mean = shape * scale = 1 / rate
    return (rng.gammavariate(burstiness, scale) for _ in itertools.count())


def arrival_offsets(rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Arrival times in seconds from the start of the run, forever. The first request arrives at 0,
    as in ``vllm bench serve``, so a run never opens with an idle wait."""
    offset = 0.0
    for gap in gaps(rate, burstiness, rng):
        yield offset
        offset += gap


@dataclass(frozen=True)
class Phase:
    seconds: float
    mix: dict[str, float]  # kind -> weight (relative; need not sum to 1)

    def describe(self) -> str:
        weights = set(self.mix.values())
        kinds = "+".join(self.mix) if len(weights) == 1 else "+".join(f"{k}={w:g}" for k, w in self.mix.items())
        return f"{kinds}:{self.seconds:g}"


class Schedule:
    """Phases back to back from t = 0; ``phase_at(t)`` is the phase an arrival at ``t`` falls in."""

    def __init__(self, phases: Sequence[Phase]) -> None:
        self.phases = list(phases)
        self.ends = list(itertools.accumulate(p.seconds for p in self.phases))

    @property
    def total_s(self) -> float:
        return self.ends[-1]

    def phase_at(self, t: float) -> int | None:
        """Index of the phase holding ``t``, None past the end."""
        i = bisect.bisect_right(self.ends, t)
        return i if i < len(self.phases) else None

    def describe(self) -> str:
        return ",".join(p.describe() for p in self.phases)


def parse_schedule(text: str, param: str = "schedule") -> Schedule:
    """A schedule from ``KIND[+KIND...]:SECONDS,...`` or from the path of a JSON or YAML file.

    >>> parse_schedule("copy:300,open+collapse:60").phases[1]
    Phase(seconds=60.0, mix={'open': 1.0, 'collapse': 1.0})
    """
    path = Path(text).expanduser()
    if path.suffix.lower() in (".json", ".yaml", ".yml"):
        return Schedule(_phases_from_file(path, param))
    phases = []
    for part in text.split(","):
        kinds, sep, seconds = part.strip().rpartition(":")
        if not sep or not kinds.strip():
            raise InvalidParameterError(param, text, f"phase {part.strip()!r} is not KIND:SECONDS "
                                        "(e.g. copy:300,open:300), and no .json/.yaml file was named")
        mix = {k.strip(): 1.0 for k in kinds.split("+")}
        phases.append(_phase(seconds.strip(), mix, text, param))
    return Schedule(phases)


def _phases_from_file(path: Path, param: str) -> list[Phase]:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidParameterError(param, str(path), f"cannot read it ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise InvalidParameterError(param, str(path), f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start} "
                                    "is not valid UTF-8") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise InvalidParameterError(param, str(path), f"not valid JSON ({exc})") from exc
    else:
        import yaml

        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise InvalidParameterError(param, str(path), f"not valid YAML ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, list) or not data:
        raise InvalidParameterError(param, str(path), "must hold a non-empty list of phases "
                                    '({"seconds": S, "kind": K} or {"seconds": S, "mix": {K: WEIGHT, ...}})')
    phases = []
    for i, row in enumerate(data):
        where = f"{path} phase {i}"
        if not isinstance(row, dict) or "seconds" not in row or ("kind" in row) == ("mix" in row):
            raise InvalidParameterError(param, where, 'each phase needs "seconds" and one of "kind" or "mix"')
        mix = {row["kind"]: 1.0} if "kind" in row else row["mix"]
        if not isinstance(mix, dict) or not mix:
            raise InvalidParameterError(param, where, '"mix" must map kinds to weights')
        phases.append(_phase(row["seconds"], mix, where, param))
    return phases


def _phase(seconds: object, mix: dict, where: str, param: str) -> Phase:
    try:
        value = float(seconds)
    except OverflowError:  # an integer too large for a float: as endless as inf
        value = math.inf
    except (TypeError, ValueError):
        raise InvalidParameterError(param, where, f"phase length {seconds!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise InvalidParameterError(param, where, f"phase length {seconds!r} must be > 0 seconds")
    weights = {}
    for kind, weight in mix.items():
        if not isinstance(kind, str) or not kind.strip():
            raise InvalidParameterError(param, where, f"kind {kind!r} must be non-empty text")
        # a comparison, not math.isfinite, which raises on an integer too large for a float; refuses nan too
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= sys.float_info.max:
            raise InvalidParameterError(param, where, f"weight {weight!r} of kind {kind!r} must be a finite number > 0")
        weights[kind.strip()] = float(weight)
    return Phase(value, weights)


def check_kinds(schedule: Schedule, prompts: Sequence[Prompt], param: str = "schedule") -> None:
    """Every kind the schedule names has prompts in the file; else one error listing the kinds there."""
    available = {p.kind for p in prompts}
    for phase in schedule.phases:
        for kind in phase.mix:
            if kind not in available:
                raise InvalidParameterError(param, schedule.describe(), f"unknown kind {kind!r}; the prompt file "
                                            f"has {', '.join(sorted(available))}")


class PromptPicker:
    """Draws the prompt of each request: uniformly from all prompts without a schedule; with one,
    a kind by the phase's weights, then a prompt of that kind uniformly. Seeded: one ``seed``
    gives the same sequence of prompts."""

    def __init__(self, prompts: Sequence[Prompt], schedule: Schedule | None, rng: random.Random) -> None:
        self.prompts, self.schedule, self.rng = list(prompts), schedule, rng
        self.by_kind: dict[str, list[Prompt]] = {}
        for p in self.prompts:
            self.by_kind.setdefault(p.kind, []).append(p)

    def pick(self, t: float) -> Prompt | None:
        """The prompt for an arrival at ``t`` seconds; None once the schedule is over."""
        if self.schedule is None:
            return self.rng.choice(self.prompts)
        i = self.schedule.phase_at(t)
        if i is None:
            return None
        mix = self.schedule.phases[i].mix
        kind = self.rng.choices(list(mix), weights=list(mix.values()))[0]
        return self.rng.choice(self.by_kind[kind])
