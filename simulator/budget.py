"""How big a run is before it runs: requests, memory and wall time, and refusing what will not fit.

A run's memory and wall time both grow with its requests. Memory: the metrics keep one row of
numbers per request (``metrics.RequestTable``), the summary copies a few columns of that length,
and requests waiting in a queue are Python objects until they are served. Wall time: every request
takes its decode steps. So the size of a run is first its number of requests, which the scenario
gives without drawing anything: rate x duration summed over the phases (capped by
``max_requests``), or the rows of a replayed trace.

``estimate`` prices that count in bytes, and, for a run large enough for time to matter, times a
pilot: the same scenario cut to its first ``PILOT_REQUESTS`` arrivals. ``check`` raises
``TooLarge`` - a ``ValueError``, so the CLI prints it as one line - with the estimate, how many
requests would fit, and the flags that override: ``--max-requests N`` (simulate the first N
arrivals) and ``--force`` (run anyway).

>>> scenario = _example(rate=1e6, duration_s=1e6)
>>> size = estimate(scenario, available_bytes=8 << 30, measure=False)
>>> size.requests, size.memory_bytes > MEMORY_SHARE * size.available_bytes
(1000000000000, True)
>>> check(size)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
simulator.budget.TooLarge: scenario 'demo' would simulate about 1,000,000,000,000 requests: ... --force
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from simulator.scenario import Scenario
from simulator.workload import Workload

# a request's share of memory at the run's peak: its table row plus, either, the arrays the summary
# derives from the table, or - on an overloaded run, where nearly every request waits at once - its
# Python object in a queue and its open entry in the metrics; priced at that worst case, since a
# scenario does not say whether it overloads
BYTES_PER_REQUEST = 600
BYTES_PER_BIN = 1024  # a time-series bin: its step counters and one entry in each reported series
MEMORY_SHARE = 0.8  # leave room for the interpreter, numpy, the policies and the rest of the machine
PILOT_MIN_REQUESTS = 20_000  # below this a run takes seconds: not worth timing first
PILOT_REQUESTS = 2_000  # long enough to amortise start-up (cost fit, warm starts), short enough to be cheap
DEFAULT_TIME_LIMIT_S = 3600.0  # what `simulate` agrees to start without --force: an hour of wall time


class TooLarge(ValueError):
    """A run that will not fit in memory or in the stated time; the message says by how much."""


@dataclass(frozen=True)
class Estimate:
    """The size of one run, known before it starts."""

    name: str
    requests: int  # expected arrivals
    memory_bytes: int  # peak memory the run's requests and bins take
    available_bytes: int | None  # memory available to this process now (None: unknown)
    seconds_per_request: float | None = None  # wall time per request from the pilot (None: not timed)

    @property
    def wall_s(self) -> float | None:
        return None if self.seconds_per_request is None else self.requests * self.seconds_per_request


def expected_requests(scenario: Scenario) -> int:
    """Arrivals the workload will release on average (exact for a replay)."""
    workload = scenario.workload
    if isinstance(workload, Workload):
        expected = sum(p.rate * (p.end_s - p.start_s) for p in workload.phases())
        count = math.ceil(expected) if math.isfinite(expected) else sys.maxsize  # an infinite rate (YAML .inf)
    else:
        count = len(workload.rows)
    cap = workload.max_requests
    return count if cap is None else min(count, cap)


def with_max_requests(scenario: Scenario, limit: int | None) -> Scenario:
    """The scenario releasing at most ``limit`` requests (its own cap when lower)."""
    if limit is None:
        return scenario
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"max_requests must be an integer >= 1, got max_requests={limit!r}")
    cap = scenario.workload.max_requests
    return scenario.with_(workload=replace(scenario.workload, max_requests=limit if cap is None else min(cap, limit)))


def available_memory() -> int | None:
    """Bytes this process can still allocate: MemAvailable, lowered by a cgroup limit when one is set."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:  # cgroup v2: a container's limit is lower than what the host has free
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            left = max(0, int(limit) - used)
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


def time_pilot(scenario: Scenario, policy=None, seed: int | None = None, replicas: int | None = None) -> float:
    """Wall seconds per request of the scenario's first ``PILOT_REQUESTS`` arrivals, run until they finish."""
    from simulator.cost_model import fit_cost_model
    from simulator.run import simulate

    pilot = with_max_requests(scenario, PILOT_REQUESTS).with_(drain_s=None)
    cost = fit_cost_model(scenario.profile)  # fitted once, outside the timing: a run pays it once too
    arrived = []  # counted as released: the summary leaves out those arriving during warm-up
    started = time.perf_counter()
    simulate(pilot, policy, seed, cost=cost, replicas=replicas, with_timeseries=False, on_arrival=arrived.append)
    return (time.perf_counter() - started) / max(1, len(arrived))


def estimate(scenario: Scenario, policy=None, seed: int | None = None, replicas: int | None = None,
             measure: bool = True, available_bytes: int | None = None) -> Estimate:
    """Requests and memory of one run; wall time too when ``measure`` and the run is large enough to time.

    The pilot is skipped when the memory alone already refuses the run.
    """
    requests = expected_requests(scenario)
    horizon = scenario.workload.duration_s + (scenario.drain_s or 0.0)
    bins = horizon / scenario.metrics.bin_s + 2
    memory = int(requests * BYTES_PER_REQUEST + bins * BYTES_PER_BIN)
    available = available_memory() if available_bytes is None else available_bytes
    size = Estimate(scenario.name, requests, memory, available)
    if measure and requests >= PILOT_MIN_REQUESTS and not _memory_problem(size, 1):
        size = replace(size, seconds_per_request=time_pilot(scenario, policy, seed, replicas))
    return size


def check(size: Estimate, runs: int = 1, parallel: int = 1, time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
          force: bool = False) -> None:
    """Raise ``TooLarge`` unless ``runs`` runs of this size (``parallel`` at a time) fit memory and time."""
    if force:
        return
    problems, fits = [], []
    if _memory_problem(size, parallel):
        problems.append(f"about {_bytes(size.memory_bytes * parallel)} of request records, more than "
                        f"{MEMORY_SHARE:.0%} of the {_bytes(size.available_bytes)} of memory available")
        fits.append(int(MEMORY_SHARE * size.available_bytes / parallel / BYTES_PER_REQUEST))
    wall = size.wall_s
    rounds = math.ceil(runs / max(1, parallel))
    if wall is not None and time_limit_s is not None and wall * rounds > time_limit_s:
        each = f" ({runs} runs)" if runs > 1 else ""
        pace = size.seconds_per_request * 1e3
        problems.append(f"about {_duration(wall * rounds)} of wall time{each} at {pace:.2g} ms per request "
                        f"(timed on a {PILOT_REQUESTS:,}-request pilot), over the time limit of "
                        f"{_duration(time_limit_s)} (--time-limit)")
        fits.append(int(time_limit_s / rounds / size.seconds_per_request))
    if problems:
        raise TooLarge(f"scenario {size.name!r} would simulate about {size.requests:,} requests: "
                       f"{'; and '.join(problems)}; at most about {min(fits):,} requests fit: cap them with "
                       f"--max-requests N, or run anyway with --force")


def _memory_problem(size: Estimate, parallel: int) -> bool:
    return size.available_bytes is not None and size.memory_bytes * parallel > MEMORY_SHARE * size.available_bytes


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:,.0f} TB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _example(rate: float, duration_s: float) -> Scenario:
    """A one-class scenario for the examples above."""
    from simulator.scenario import scenario_from_dict

    profile = {"format": "adaptive-spec-profile/1", "prefill": [{"prompt_tokens": 16, "seconds": 0.01}],
               "verify": [{"tokens": 1, "context_len": 64, "seconds": 0.03}], "draft": {}, "acceptance": {}}
    return scenario_from_dict({"name": "demo", "profile": profile,
                               "classes": {"chat": {"prompt_tokens": 16, "output_tokens": 8}},
                               "workload": {"arrival": {"process": "poisson", "rate": rate}, "mix": {"chat": 1},
                                            "duration_s": duration_s}})
