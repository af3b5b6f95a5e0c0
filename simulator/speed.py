"""The machine's speed over a run: every cost of the profile scaled by a factor that changes with time.

A profile is timed at one moment; a shared machine then runs faster or slower (on this project's
2-core VMs a plain step took 62-84 ms within hours, and 69-110 ms within two minutes of one run).
A speed timeline says how much dearer than at calibration every forward and draft is from each
moment on: ``[(0, 1.0), (300, 1.4)]`` is the calibrated speed, then 40% slower from 300 s. The
scenario field ``speed`` takes such points (``[{at_s, factor}]``); a served run's measured
timeline replays the run as the machine actually ran it, and a planner can ask what a slowdown
does to latency.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Iterator, Sequence

from policies.batch_layout import SlotAxis
from simulator.cost_model import forward_verify_s


class SpeedTimeline:
    """Step-wise factor over simulated time: the last point at or before ``t`` (1.0 before the first)."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        points = sorted((float(t), float(f)) for t, f in points)
        for t, f in points:
            if t < 0 or not f > 0:
                raise ValueError(f"a speed point needs at_s >= 0 and factor > 0, got at_s={t!r}, factor={f!r}")
        self.times = [t for t, _ in points]
        self.factors = [f for _, f in points]

    def factor(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        return self.factors[i] if i >= 0 else 1.0


class TimedCost:
    """``cost`` (any cost model) with every time scaled by ``timeline`` at ``now()``: a forward or a
    draft costs what the machine's speed makes it when it starts. ``prefill_factor``, where given,
    scales prefill instead: a timeline read from a batched run's decode forwards carries the cost
    fit's error on batched shapes, which a prefill (one sequence) does not share."""

    def __init__(self, cost, timeline: SpeedTimeline, now: Callable[[], float],
                 prefill_factor: float | None = None) -> None:
        self.cost, self.timeline, self.now = cost, timeline, now
        self.prefill_factor = prefill_factor
        self.padded = getattr(cost, "padded", False)

    def prefill_s(self, prompt_tokens: int) -> float:
        factor = self.timeline.factor(self.now()) if self.prefill_factor is None else self.prefill_factor
        return factor * self.cost.prefill_s(prompt_tokens)

    def verify_s(self, tokens: float, context_len: float, batch: int = 1, batch_tokens: int | None = None,
                 batch_context: int | None = None, pairs: int | None = None) -> float:
        return self.timeline.factor(self.now()) * self.cost.verify_s(tokens, context_len, batch, batch_tokens,
                                                                     batch_context, pairs)

    def draft_s(self, drafter: str, k: int, batch: int = 1, batch_draft_tokens: int | None = None) -> float:
        return self.timeline.factor(self.now()) * self.cost.draft_s(drafter, k, batch, batch_draft_tokens)

    def ride_s(self, done: int, tokens: int) -> float | None:
        """Inside a batched forward: the speed the decode forwards ran at."""
        ride = getattr(self.cost, "ride_s", None)
        seconds = None if ride is None else ride(done, tokens)
        return None if seconds is None else self.timeline.factor(self.now()) * seconds


# rows of one batched step are recorded together, within milliseconds; a forward takes tens of them
SAME_STEP_S = 0.05


def forwards(steps: Sequence[dict]) -> list[list[dict]]:
    """The step records grouped by target forward. The batched engine records one row per request
    of a step, each with the step's own ``draft_s`` and ``verify_s`` (the whole batch's): rows of
    different requests with the same times, recorded together, are one forward. A row without a
    ``request_id`` is a forward of its own.

    >>> rows = [{"time": 0.0, "request_id": 1, "draft_s": 0.0, "verify_s": 0.09},
    ...         {"time": 0.0, "request_id": 2, "draft_s": 0.0, "verify_s": 0.09},
    ...         {"time": 0.1, "request_id": 1, "draft_s": 0.0, "verify_s": 0.08}]
    >>> [len(f) for f in forwards(rows)]
    [2, 1]
    """
    groups: list[list[dict]] = []
    for step in sorted(steps, key=lambda s: s["time"]):
        last = groups[-1] if groups else None
        if (last is not None and step.get("request_id") is not None
                and step["time"] - last[0]["time"] <= SAME_STEP_S
                and (step["verify_s"], step.get("draft_s")) == (last[0]["verify_s"], last[0].get("draft_s"))
                and all(row.get("request_id") not in (None, step["request_id"]) for row in last)):
            last.append(step)
        else:
            groups.append([step])
    return groups


def with_slots(groups: Sequence[list[dict]]) -> Iterator[tuple[list[dict], int]]:
    """Each forward with the batched engine's slot axis when it ran (``policies.batch_layout.SlotAxis``),
    followed from the records: the rows that stayed settle it, newcomers join it at the tokens they
    held (a row's ``context_len`` counts the token the step feeds), and each forward widens it.

    >>> rows = lambda *rs: [{"request_id": r, "context_len": c, "proposed": p} for r, c, p in rs]
    >>> [slots for _, slots in with_slots([rows((1, 101, 8), (2, 51, 0)), rows((1, 103, 0), (2, 52, 0))])]
    [100, 109]
    """
    axis, before = SlotAxis(), {}
    for rows in groups:
        now = {row.get("request_id"): row["context_len"] - 1 for row in rows}
        axis.settle([held for request, held in now.items() if request in before])
        for request, held in now.items():
            if request not in before:
                axis.join(held)
        yield rows, axis.slots
        axis.forward([row["proposed"] + 1 for row in rows])
        before = now


def forward_prices(steps: Sequence[dict], cost) -> Iterator[tuple[list[dict], float]]:
    """Each recorded forward (``forwards``: a batched step's rows together) with what ``cost``
    prices it at as the engine laid it out (``forward_verify_s``: every row at its own width, over
    the slot axis the engine kept, ``with_slots``)."""
    for rows, slots in with_slots(forwards(steps)):
        yield rows, forward_verify_s(cost, [row["proposed"] + 1 for row in rows], [row["context_len"] for row in rows],
                                     slots)


def priced_seconds(steps: Sequence[dict], cost) -> float:
    """What a run's decode forwards cost at ``cost``'s prices, summed (``forward_prices``): the
    seconds they would have taken had the machine run at its calibration's speed throughout, the
    controllers' choices without the machine's swings. Prefill and the time between forwards are
    not in it (a forward that carried a newcomer's prompt is priced at its rows' own tokens), nor is
    drafting, which the n-gram lookup does nearly for free.

    >>> class Cost:  # a second per token scored
    ...     def verify_s(self, tokens, context_len, batch=1, batch_tokens=None, batch_context=None):
    ...         return float(batch_tokens if batch_tokens is not None else tokens)
    >>> row = lambda t, r, proposed: {"time": t, "request_id": r, "proposed": proposed, "context_len": 10,
    ...                                "draft_s": 0.0, "verify_s": 0.1}
    >>> priced_seconds([row(0.0, 1, 4), row(0.0, 2, 0), row(0.2, 1, 0)], Cost())  # 5 + 1 tokens, then 1
    7.0
    """
    return sum(price for _, price in forward_prices(steps, cost))


def timeline_from_steps(steps: Sequence[dict], cost, origin: float, window_s: float = 30.0,
                        min_steps: int = 10) -> list[tuple[float, float]]:
    """The speed a served run actually ran at, from its engine's step records (the telemetry store's
    ``steps`` rows: ``time``, ``request_id``, ``proposed``, ``context_len``, ``draft_s``,
    ``verify_s``): per window of ``window_s`` seconds from ``origin`` (the run's start, Unix time),
    the seconds its forwards took over what ``cost`` prices the same forwards at (a batched step's
    rows together: ``forwards``). A window with fewer than ``min_steps`` forwards keeps the speed
    before it. Points ``(at_s, factor)`` for a scenario's ``speed``."""
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    measured: dict[int, float] = {}
    priced: dict[int, float] = {}
    counts: dict[int, int] = {}
    for rows, price in forward_prices(steps, cost):
        offset = rows[0]["time"] - origin
        if offset < 0:
            continue
        window = int(offset // window_s)
        measured[window] = measured.get(window, 0.0) + rows[0]["verify_s"]
        priced[window] = priced.get(window, 0.0) + price
        counts[window] = counts.get(window, 0) + 1
    points = []
    for window in sorted(counts):
        if counts[window] >= min_steps and priced[window] > 0:
            points.append((window * window_s, measured[window] / priced[window]))
    return points


def batched_overhead(steps: Sequence[dict]) -> dict | None:
    """What a batched server spent between its forwards, from its step records (the telemetry store's
    ``steps`` rows of one run): a scenario's ``overhead`` for the batching replica.

    - ``step_s``: the median gap between one forward of a batch and the next, less the next one's
      draft and verify (the rows' sampling, acceptance, controllers, streaming);
    - ``request_s``: what a forward from which requests left took on top of that, per request
      that left (its wrap-up: the answer decoded, the drafters taught). The replica charges it
      when a request joins; under a client that keeps its requests in flight one replaces another.

    Two kinds of gap are left out, since the replica prices both itself: after the batch emptied
    (the next prompt prefilled alone), and before a forward that may have carried a prompt, one
    after which new requests decode (the engine records such a step at what its rows' own forward
    costs, so the prompt's seconds fall in the gap). None: no gap of a batch that stayed.

    >>> row = lambda t, r, v=0.1: {"time": t, "request_id": r, "draft_s": 0.0, "verify_s": v}
    >>> steps = [row(0.10, 1), row(0.10, 2), row(0.21, 1), row(0.21, 2), row(0.32, 1), row(0.32, 2),
    ...          row(0.45, 1)]  # request 2 left: its wrap-up took 0.02 s more
    >>> {k: round(v, 3) for k, v in batched_overhead(steps).items()}
    {'step_s': 0.01, 'request_s': 0.02, 'gaps': 2, 'left': 1}
    """
    groups = forwards(steps)
    held = [{row["request_id"] for row in rows if row.get("request_id") is not None} for rows in groups]
    plain, leaving = [], []  # gaps, and (gap, requests that left) pairs
    for i in range(1, len(groups)):
        carried_prompt = i + 1 < len(groups) and bool(held[i + 1] - held[i])
        if not held[i - 1] & held[i] or carried_prompt:
            continue
        gap = groups[i][0]["time"] - groups[i - 1][0]["time"] - groups[i][0].get("draft_s", 0.0) - groups[i][0]["verify_s"]
        left = len(held[i - 1] - held[i])
        if left:
            leaving.append((gap, left))
        else:
            plain.append(gap)
    if not plain:
        return None
    step_s = max(0.0, float(statistics.median(plain)))
    left = sum(n for _, n in leaving)
    extra = sum(gap - step_s for gap, _ in leaving) / left if left else 0.0
    return {"step_s": step_s, "request_s": max(0.0, extra), "gaps": len(plain), "left": left}


def serving_overhead(requests: Sequence[dict], steps: Sequence[dict], client_e2e_s: Sequence[float], cost) -> dict:
    """What served requests spent outside the forwards ``cost`` prices: a scenario's ``overhead``.

    From some requests served one at a time (the telemetry store's ``requests`` rows: ``run_id``,
    ``request_id``, ``start_time``, ``end_time``, ``prompt_tokens``, ``ttft_s``: the prefill's own
    seconds), their ``steps`` rows, and each one's end-to-end seconds as its client measured them
    (in the order of ``requests``), the median over the requests of

    - ``step_s``: a decode step's seconds since the step before it, less its draft and verify
      (the first step's gap is left out: it also holds the request's setup);
    - ``request_s``: the rest of the engine's time on the request (``end_time - start_time``) once
      its prefill, priced at the request's own speed (its verifies as measured over as priced),
      its steps' draft and verify and ``step_s`` a step are taken out: the setup before the
      prefill, the prefill's departure from its price, the wrap-up after the last step;
    - ``client_s``: the client's seconds over the engine's: HTTP, the chat template, tokenizing,
      the response.

    A median below 0 (a cost priced dearer than it ran) is 0: no time is saved by serving.
    """
    if len(requests) != len(client_e2e_s) or not requests:
        raise ValueError(f"client_e2e_s: one per request, got {len(client_e2e_s)} for {len(requests)} requests")
    by_request: dict[tuple, list[dict]] = {}
    for step in steps:
        by_request.setdefault((step["run_id"], step["request_id"]), []).append(step)
    measured = []  # (request row, its steps, its speed, its client seconds)
    gaps = []
    for row, e2e_s in zip(requests, client_e2e_s):
        own = sorted(by_request.get((row["run_id"], row["request_id"]), []), key=lambda s: s["time"])
        priced = sum(cost.verify_s(s["proposed"] + 1, s["context_len"]) for s in own)
        if not own or not priced > 0:
            continue  # no decode step to measure its speed on
        measured.append((row, own, sum(s["verify_s"] for s in own) / priced, e2e_s))
        gaps += [b["time"] - a["time"] - b["draft_s"] - b["verify_s"] for a, b in zip(own, own[1:])]
    if not measured:
        raise ValueError("requests: none has decode steps recorded (a store written with steps=1?)")
    step_s = max(0.0, float(statistics.median(gaps))) if gaps else 0.0
    rest, client = [], []
    for row, own, speed, e2e_s in measured:
        engine_s = row["end_time"] - row["start_time"]
        forwards_s = speed * cost.prefill_s(row["prompt_tokens"]) + sum(s["draft_s"] + s["verify_s"] for s in own)
        rest.append(engine_s - forwards_s - step_s * len(own))
        client.append(e2e_s - engine_s)
    return {"request_s": max(0.0, float(statistics.median(rest))), "step_s": step_s,
            "client_s": max(0.0, float(statistics.median(client))), "requests": len(measured), "steps": len(gaps)}
