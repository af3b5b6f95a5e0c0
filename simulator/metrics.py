"""Metrics gathered through hooks, summarised on read.

Replicas and the arrival process do not compute statistics; they call hooks at the moments that
matter (after vidur's ``on_request_arrival`` style)::

    on_request_arrival(request, now)     a request entered the system
    on_request_start(request, now)       a replica began its prefill (it left the queue)
    on_first_token(request, now)         prefill done, first token out
    on_step(outcome, batch_size)         a decode step ended (the StepOutcome policies observe)
    on_request_completion(request, now)  the last token is out

``MetricsCollector`` implements them cheaply: it keeps the request records (their time stamps are
the raw data) and adds each step into a time bin of counters. Any other object with these five
methods can be passed as an extra hook (tests log event order that way). Rates are derived on read,
never stored (glossary as in ``policies/outcome.py``)::

    acceptance_rate   = accepted / proposed                     (over steps that proposed)
    tokens_per_step   = emitted / steps                          (mean accepted length + 1)
    spec_fraction     = speculative steps / steps                (speculation "on" share)
    queue_len         = #arrived - #started  at time t           (waiting, all replicas)
    in_system         = #arrived - #finished at time t           (Little's L when time-averaged)
"""

from __future__ import annotations

import math
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


class MetricsCollector:
    """Default hooks: request records plus per-bin step counters."""

    def __init__(self, bin_s: float = 60.0) -> None:
        self.bin_s = bin_s  # width of a time-series bin in simulated seconds
        self.requests: list[Request] = []
        self.bins: dict[int, list[float]] = {}

    def on_request_arrival(self, request: Request, now: float) -> None:
        self.requests.append(request)

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
        pass


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


def meets_slo(requests: list[Request], slo) -> np.ndarray:
    """Per completed request: True when every SLO target that is set is met."""
    ok = np.ones(len(requests), dtype=bool)
    for name, target in (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s), ("e2e_s", slo.e2e_s)):
        if target is not None:
            ok &= np.array([getattr(r, name) <= target for r in requests], dtype=bool)
    return ok


def slo_check(requests: list[Request], slo) -> dict:
    """Each set target against the SLO percentile of its latency; unfinished requests count as infinitely late.

    ``ok`` is True when every target is met (and there was at least one request).
    """
    out: dict = {"percentile": slo.percentile, "ok": bool(requests)}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        target = getattr(slo, name)
        if target is None:
            continue
        chosen = [r for r in requests if name != "tpot_s" or r.output_tokens > 1]
        values = np.array([getattr(r, name) if r.done else math.inf for r in chosen])
        # no interpolation: a percentile that falls on an unfinished request is infinite, not NaN
        value = float(np.percentile(values, slo.percentile, method="inverted_cdf")) if len(values) else 0.0
        out[name] = {"value": finite_or_none(value), "target": target, "ok": value <= target}
        out["ok"] = out["ok"] and value <= target
    return out


def summarize(collector: MetricsCollector, slo, warmup_s: float = 0.0,
              window: tuple[float, float] | None = None) -> dict:
    """Latency percentiles, throughput, goodput, queueing and acceptance of a finished run.

    Latencies cover requests that arrived after ``warmup_s`` (and inside ``window`` when given);
    rates are per second of the run (0 to the last completion). Unfinished requests count as SLO
    misses.
    """
    everyone = collector.requests
    chosen = [r for r in everyone
              if r.arrival_s >= warmup_s and (window is None or window[0] <= r.arrival_s < window[1])]
    done = [r for r in chosen if r.done]
    arrivals = np.array([r.arrival_s for r in everyone])
    starts = np.array([r.start_s for r in everyone])
    finishes = np.array([r.finish_s for r in everyone])
    end_s = float(np.nanmax(finishes)) if np.isfinite(finishes).any() else 0.0
    span = (window[1] - window[0]) if window else end_s - warmup_s
    queue_mean, queue_max = time_average(arrivals, starts, end_s)
    system_mean, _ = time_average(arrivals, finishes, end_s)
    e2e = np.array([r.e2e_s for r in done])
    good = int(meets_slo(done, slo).sum()) if done else 0
    proposed = sum(r.proposed for r in chosen)
    accepted = sum(r.accepted for r in chosen)
    steps = sum(r.steps for r in chosen)
    tokens = sum(r.output_tokens for r in done)
    return {
        "requests": {"arrived": len(chosen), "completed": len(done), "unfinished": len(chosen) - len(done)},
        "slo_check": slo_check(chosen, slo),
        "ttft_s": percentiles(np.array([r.ttft_s for r in done])),
        "tpot_s": percentiles(np.array([r.tpot_s for r in done if r.output_tokens > 1])),
        "e2e_s": percentiles(e2e),
        "throughput_rps": _ratio(len(done), span),
        "throughput_tokens_s": _ratio(tokens, span),
        "goodput_rps": _ratio(good, span),
        "slo_attainment": _ratio(good, len(chosen)),
        "queue": {"mean": queue_mean, "max": queue_max},
        "littles_law": {  # L = lambda W over [0, end]; equal up to requests cut off by the end
            "L_in_system": system_mean,
            "lambda_rps": _ratio(len(everyone), end_s),
            "W_s": float(np.mean([r.e2e_s for r in everyone if r.done])) if end_s else None,
        },
        "acceptance": {
            "steps": steps, "proposed": proposed, "accepted": accepted,
            "acceptance_rate": _ratio(accepted, proposed),
            "tokens_per_step": _ratio(sum(r.generated - 1 for r in chosen if r.generated), steps),
        },
        "last_finish_s": end_s,
    }


def timeseries(collector: MetricsCollector) -> dict[str, list]:
    """Per-bin series: load, queue, acceptance and speculation on/off over time."""
    if not collector.requests:
        return {}
    bin_s = collector.bin_s
    everyone = collector.requests
    arrivals = np.array([r.arrival_s for r in everyone])
    starts = np.array([r.start_s for r in everyone])
    finishes = np.array([r.finish_s for r in everyone])
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
