"""Metrics gathered through hooks, summarised on read.

Replicas and the arrival process do not compute statistics; they call hooks at the moments that
matter (after vidur's ``on_request_arrival`` style)::

    on_request_arrival(request, now)     a request entered the system
    on_request_start(request, now)       a replica began its prefill (it left the queue)
    on_first_token(request, now)         prefill done, first token out
    on_step(outcome, batch_size)         a decode step ended (the StepOutcome policies observe)
    on_request_completion(request, now)  the last token is out

``MetricsCollector`` implements them cheaply: it keeps one row of numbers per request (its time
stamps and counts are the raw data; see ``RequestTable``) and adds each step into a time bin of
counters. The row is written when the request completes, so a finished ``Request`` object is not
kept: a run of millions of requests costs a few numpy-sized numbers each, not a Python object each.
Any other object with these five methods can be passed as an extra hook (tests log event order
that way). Rates are derived on read, never stored (glossary as in ``policies/outcome.py``)::

    acceptance_rate   = accepted / proposed                     (over steps that proposed)
    tokens_per_step   = emitted / steps                          (mean accepted length + 1)
    spec_fraction     = speculative steps / steps                (speculation "on" share)
    queue_len         = #arrived - #started  at time t           (waiting, all replicas)
    in_system         = #arrived - #finished at time t           (Little's L when time-averaged)
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from policies import PLAIN, StepOutcome
from simulator.entities import Request

# per-bin counters, by index
STEPS, SPEC_STEPS, PROPOSED, ACCEPTED, EMITTED, DRAFT_LEN, BATCH = range(7)


class Hooks(Protocol):
    def on_request_arrival(self, request: Request, now: float) -> None: ...
    def on_request_start(self, request: Request, now: float) -> None: ...
    def on_first_token(self, request: Request, now: float) -> None: ...
    def on_step(self, outcome: StepOutcome, batch_size: int) -> None: ...
    def on_request_completion(self, request: Request, now: float) -> None: ...


# the per-request columns a collector keeps, with their array typecodes: times in seconds (NaN: not
# reached), counts as 64-bit integers (no count can overflow them), the class as an index
TIMES = ("arrival_s", "start_s", "first_token_s", "finish_s")
COUNTS = ("prompt_tokens", "output_tokens", "generated", "steps", "proposed", "accepted")


@dataclass
class RequestTable:
    """Request records as columns (numpy arrays, arrival order), with the derived latencies."""

    arrival_s: np.ndarray
    start_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    generated: np.ndarray
    steps: np.ndarray
    proposed: np.ndarray
    accepted: np.ndarray
    klass: np.ndarray  # index into class_names
    class_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.arrival_s)

    def where(self, mask: np.ndarray) -> RequestTable:
        """The rows where ``mask`` is True (this table itself when that is every row: no copy)."""
        if mask.all():
            return self
        columns = {name: getattr(self, name)[mask] for name in (*TIMES, *COUNTS, "klass")}
        return RequestTable(**columns, class_names=self.class_names)

    @property
    def done(self) -> np.ndarray:
        return ~np.isnan(self.finish_s)

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Mean seconds per output token after the first; 0 for a single-token output (``Request.tpot_s``)."""
        after_first = self.output_tokens - 1
        out = np.zeros(len(self))
        np.divide(self.finish_s - self.first_token_s, after_first, out=out, where=after_first > 0)
        return out

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in (*TIMES, *COUNTS, "klass"))


class MetricsCollector:
    """Default hooks: one row of columns per request plus per-bin step counters."""

    def __init__(self, bin_s: float = 60.0) -> None:
        self.bin_s = bin_s  # width of a time-series bin in simulated seconds
        self.bins: dict[int, list[float]] = {}
        self._columns = {name: array("d") for name in TIMES} | {name: array("q") for name in COUNTS}
        self._klass = array("H")  # class index; a scenario has far fewer than 65,536 classes
        self._class_index: dict[str, int] = {}
        self._open: dict[int, tuple[int, Request]] = {}  # id(request) -> (row, request) until it completes

    def on_request_arrival(self, request: Request, now: float) -> None:
        row = len(self._klass)
        for name, column in self._columns.items():
            column.append(getattr(request, name))
        self._klass.append(self._class_index.setdefault(request.klass, len(self._class_index)))
        self._open[id(request)] = (row, request)

    def on_request_start(self, request: Request, now: float) -> None:
        pass  # the time stamp on the request is the record

    def on_first_token(self, request: Request, now: float) -> None:
        pass

    def on_step(self, outcome: StepOutcome, batch_size: int) -> None:
        b = int(outcome.timestamp / self.bin_s)
        row = self.bins.get(b)
        if row is None:
            row = self.bins[b] = [0.0] * 7
        row[STEPS] += 1
        if outcome.drafter != PLAIN:
            row[SPEC_STEPS] += 1
            row[DRAFT_LEN] += outcome.k
        row[PROPOSED] += outcome.proposed
        row[ACCEPTED] += outcome.num_accepted
        row[EMITTED] += outcome.emitted
        row[BATCH] += batch_size

    def on_request_completion(self, request: Request, now: float) -> None:
        entry = self._open.pop(id(request), None)
        if entry is not None:
            self._write(*entry)

    def _write(self, row: int, request: Request) -> None:
        for name, column in self._columns.items():
            column[row] = getattr(request, name)

    def table(self) -> RequestTable:
        """Every request that arrived, in arrival order; unfinished ones as they stand now."""
        for row, request in self._open.values():
            self._write(row, request)
        columns = {name: np.array(column, dtype=np.float64 if name in TIMES else np.int64)
                   for name, column in self._columns.items()}
        return RequestTable(**columns, klass=np.array(self._klass, dtype=np.int64),
                            class_names=tuple(self._class_index))

    def __len__(self) -> int:
        return len(self._klass)


class DraftingByBatch:
    """Extra hooks: the share of decode steps that verified a draft, overall (``share``) and by how
    many sequences the iteration decoded (``by_batch``): whether speculation shrinks as the batch
    fills, where a batch cap cuts drafts that a fuller iteration cannot afford. A server counts the
    same by rows in the forward (the Live page's Batching section)."""

    def __init__(self) -> None:
        self.steps = self.drafting = 0
        self.batches: dict[int, list[int]] = {}  # sequences in the iteration -> [steps that drafted, steps]

    def on_step(self, outcome: StepOutcome, batch_size: int) -> None:
        drafted = outcome.proposed > 0
        self.steps += 1
        self.drafting += drafted
        counts = self.batches.setdefault(batch_size, [0, 0])
        counts[0] += drafted
        counts[1] += 1

    def share(self) -> float | None:
        return _ratio(self.drafting, self.steps)

    def by_batch(self) -> dict[str, list[int]]:
        """Per sequences in the iteration (as text, a JSON key), ascending: [steps that drafted, steps]."""
        return {str(n): self.batches[n] for n in sorted(self.batches)}

    def on_request_arrival(self, request: Request, now: float) -> None: ...
    def on_request_start(self, request: Request, now: float) -> None: ...
    def on_first_token(self, request: Request, now: float) -> None: ...
    def on_request_completion(self, request: Request, now: float) -> None: ...


class HookList:
    """Fan each hook call out to several hook objects (the collector first)."""

    NAMES = ("on_request_arrival", "on_request_start", "on_first_token", "on_step", "on_request_completion")

    def __init__(self, hooks: list) -> None:
        self.hooks = hooks
        for name in self.NAMES:
            methods = [getattr(h, name) for h in hooks]

            def call(*args, _methods=methods):
                for method in _methods:
                    method(*args)

            setattr(self, name, call)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def percentiles(values: np.ndarray) -> dict:
    """p50 / p95 / p99 / mean of a latency array (None when empty)."""
    if len(values) == 0:
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "mean": float(values.mean())}


def time_average(up: np.ndarray, down: np.ndarray, end_s: float) -> tuple[float, int]:
    """Time-averaged and maximum level of a count that +1s at ``up`` and -1s at ``down`` over [0, end_s]."""
    if end_s <= 0 or len(up) == 0:
        return 0.0, 0
    down = down[np.isfinite(down)]
    times = np.concatenate([up, down])
    deltas = np.concatenate([np.ones(len(up)), -np.ones(len(down))])
    order = np.lexsort((deltas, times))  # at equal times leave before arriving: no phantom peaks
    times, levels = times[order], np.cumsum(deltas[order])
    widths = np.diff(np.append(times, end_s)).clip(min=0)
    return float(np.dot(levels, widths) / end_s), int(levels.max())


def level_at(up: np.ndarray, down: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many have gone up and not yet down at each time in ``t`` (arrays sorted or not)."""
    up, down = np.sort(up), np.sort(down[np.isfinite(down)])
    return np.searchsorted(up, t, side="right") - np.searchsorted(down, t, side="right")


def meets_slo(requests: RequestTable, slo) -> np.ndarray:
    """Per request: True when every SLO target that is set is met."""
    ok = np.ones(len(requests), dtype=bool)
    for name, target in (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s), ("e2e_s", slo.e2e_s)):
        if target is not None:
            ok &= getattr(requests, name) <= target
    return ok


def slo_check(requests: RequestTable, slo) -> dict:
    """Each set target against the SLO percentile of its latency; unfinished requests count as infinitely late.

    ``ok`` is True when every target is met (and there was at least one request).
    """
    out: dict = {"percentile": slo.percentile, "ok": bool(len(requests))}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        target = getattr(slo, name)
        if target is None:
            continue
        chosen = requests if name != "tpot_s" else requests.where(requests.output_tokens > 1)
        values = np.where(chosen.done, getattr(chosen, name), math.inf)
        # no interpolation: a percentile that falls on an unfinished request is infinite, not NaN
        value = float(np.percentile(values, slo.percentile, method="inverted_cdf")) if len(values) else 0.0
        out[name] = {"value": finite_or_none(value), "target": target, "ok": value <= target}
        out["ok"] = out["ok"] and value <= target
    return out


def summarize(collector: MetricsCollector, slo, warmup_s: float = 0.0,
              window: tuple[float, float] | None = None, table: RequestTable | None = None) -> dict:
    """Latency percentiles, throughput, goodput, queueing and acceptance of a finished run.

    Latencies cover requests that arrived after ``warmup_s`` (and inside ``window`` when given);
    rates are per second of the run (0 to the last completion). Unfinished requests count as SLO
    misses. ``table``: the collector's table when the caller already has it (one per summary).
    """
    everyone = collector.table() if table is None else table
    arrivals, starts, finishes = everyone.arrival_s, everyone.start_s, everyone.finish_s
    keep = arrivals >= warmup_s
    if window is not None:
        keep &= (window[0] <= arrivals) & (arrivals < window[1])
    chosen = everyone.where(keep)
    done = chosen.where(chosen.done)
    end_s = float(np.nanmax(finishes)) if np.isfinite(finishes).any() else 0.0
    span = (window[1] - window[0]) if window else end_s - warmup_s
    queue_mean, queue_max = time_average(arrivals, starts, end_s)
    system_mean, _ = time_average(arrivals, finishes, end_s)
    good = int(meets_slo(done, slo).sum()) if len(done) else 0
    proposed, accepted, steps = (int(getattr(chosen, name).sum()) for name in ("proposed", "accepted", "steps"))
    tokens = int(done.output_tokens.sum())
    generated = chosen.generated[chosen.generated != 0]
    return {
        "requests": {"arrived": len(chosen), "completed": len(done), "unfinished": len(chosen) - len(done)},
        "slo_check": slo_check(chosen, slo),
        "ttft_s": percentiles(done.ttft_s),
        "tpot_s": percentiles(done.tpot_s[done.output_tokens > 1]),
        "e2e_s": percentiles(done.e2e_s),
        "throughput_rps": _ratio(len(done), span),
        "throughput_tokens_s": _ratio(tokens, span),
        "goodput_rps": _ratio(good, span),
        "slo_attainment": _ratio(good, len(chosen)),
        "queue": {"mean": queue_mean, "max": queue_max},
        "littles_law": {  # L = lambda W over [0, end]; equal up to requests cut off by the end
            "L_in_system": system_mean,
            "lambda_rps": _ratio(len(everyone), end_s),
            "W_s": float(np.mean(everyone.e2e_s[everyone.done])) if end_s else None,
        },
        "acceptance": {
            "steps": steps, "proposed": proposed, "accepted": accepted,
            "acceptance_rate": _ratio(accepted, proposed),
            "tokens_per_step": _ratio(int((generated - 1).sum()), steps),
        },
        "last_finish_s": end_s,
    }


def timeseries(collector: MetricsCollector, table: RequestTable | None = None) -> dict[str, list]:
    """Per-bin series: load, queue, acceptance and speculation on/off over time."""
    everyone = collector.table() if table is None else table
    if not len(everyone):
        return {}
    bin_s = collector.bin_s
    arrivals, starts, finishes = everyone.arrival_s, everyone.start_s, everyone.finish_s
    last = max([*collector.bins, int(np.nanmax(np.append(finishes, arrivals)) / bin_s)])
    edges = np.arange(last + 2) * bin_s
    series: dict[str, list] = {"t_s": edges[:-1].tolist()}
    series["arrivals"] = np.histogram(arrivals, edges)[0].tolist()
    series["completions"] = np.histogram(finishes[np.isfinite(finishes)], edges)[0].tolist()
    series["queue_len_end"] = level_at(arrivals, starts, edges[1:]).tolist()
    rows = [collector.bins.get(b, [0.0] * 7) for b in range(last + 1)]
    series["steps"] = [int(r[STEPS]) for r in rows]
    series["spec_fraction"] = [_ratio(r[SPEC_STEPS], r[STEPS]) for r in rows]
    series["mean_draft_len"] = [_ratio(r[DRAFT_LEN], r[SPEC_STEPS]) for r in rows]
    series["acceptance_rate"] = [_ratio(r[ACCEPTED], r[PROPOSED]) for r in rows]
    series["tokens_per_step"] = [_ratio(r[EMITTED], r[STEPS]) for r in rows]
    series["mean_batch"] = [_ratio(r[BATCH], r[STEPS]) for r in rows]
    return series


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN / Infinity: report them as null."""
    return None if value is None or not math.isfinite(value) else value
