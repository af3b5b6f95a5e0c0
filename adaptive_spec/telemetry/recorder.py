"""The embedded default observer: generation -> counters -> rows -> the SQLite store.

Per step it does a few additions under a lock (``IntervalAggregator``), feeds the controller-state
tracker, and queues a row only when an interval closes, a decision is seen or (with
``step_rows``) for every step. Everything that touches the disk happens in the background
writer's thread (``writer.py``). Measured cost per step: see ``benchmarks`` in the report and
``tests/test_telemetry_recorder.py``.

>>> recorder = StoreRecorder("/tmp/adaptive-spec-telemetry.sqlite")   # doctest: +SKIP
>>> decoder = SpeculativeDecoder(target, drafters, policy, observers=[recorder])   # doctest: +SKIP
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from adaptive_spec.telemetry.aggregate import IntervalAggregator
from adaptive_spec.telemetry.batch_intervals import BatchIntervals
from adaptive_spec.telemetry.tracker import Decision, SpeculationTracker
from adaptive_spec.telemetry.writer import BackgroundWriter, WriterConfig
from policies.outcome import PLAIN


@dataclass
class RecorderConfig:
    # 1 s rows: the dashboard's finest useful resolution, and at 10-100 steps/s a 10-100x
    # reduction in rows over per-step writes
    interval_s: float = 1.0
    # per-step rows are for fitting cost models (simulator); off by default because they are the
    # only part whose volume grows with the step rate
    step_rows: bool = False
    writer: WriterConfig = field(default_factory=WriterConfig)


class _Request:
    __slots__ = ("drafter_tokens", "steps")

    def __init__(self) -> None:
        self.drafter_tokens: dict[str, int] = {}  # draft tokens per drafter: "main drafter" = the most
        self.steps = 0


class StoreRecorder:
    """Observer writing requests, interval counters, decisions (and optionally steps) to a store."""

    def __init__(self, path: str | Path, config: RecorderConfig | None = None, writer: BackgroundWriter | None = None) -> None:
        self.config = config or RecorderConfig()
        self.path = Path(path)
        self.writer = writer or BackgroundWriter(self.path, self.config.writer)
        self.run_id = uuid.uuid4().hex[:12]  # request ids restart per process; this tells runs apart
        self.aggregator = IntervalAggregator(self.config.interval_s)
        self.batches = BatchIntervals(self.run_id, self.config.interval_s)
        self.tracker = SpeculationTracker()
        self._requests: dict[int, _Request] = {}
        self._lock = threading.Lock()

    # -- observer hooks --------------------------------------------------------------------------

    def on_request_start(self, request) -> None:
        with self._lock:
            self._requests[request.request_id] = _Request()

    def on_gauges(self, model: str, values: dict[str, float]) -> None:
        """The engine's sampled gauges (``SpeculativeDecoder.report_gauges``): one row each."""
        now = time.time()
        for name, value in values.items():
            self.writer.put("gauges", (self.run_id, now, model, name, float(value)))

    def on_batch_step(self, model: str, step) -> None:
        """One decode forward of the batched engine (``policies.batch_step.BatchStep``)."""
        with self._lock:
            closed = self.batches.add(model, step, time.time())
        for row in closed:
            self.writer.put("batch_intervals", row)

    def on_step(self, request, outcome, events: list) -> None:
        put, run_id = self.writer.put, self.run_id
        model, key = request.model, request.key
        with self._lock:
            closed = self.aggregator.add(model, key, outcome)
            decisions = self.tracker.update(model, key, outcome)
            state = self._requests.get(request.request_id)
            if state is not None:
                state.steps += 1
                if outcome.proposed:
                    state.drafter_tokens[outcome.drafter] = state.drafter_tokens.get(outcome.drafter, 0) + outcome.proposed
        for counters in closed:
            put("intervals", counters.row(run_id))
        for decision in decisions:
            put("decisions", decision.row(run_id))
        for event in events:
            put("decisions", event_decision(model, key, event).row(run_id))
        if self.config.step_rows:
            put("steps", (run_id, request.request_id, outcome.timestamp, model, key, outcome.drafter, outcome.k,
                          outcome.proposed, outcome.num_accepted, outcome.emitted, outcome.draft_s, outcome.verify_s,
                          outcome.context_len))

    def on_request_end(self, request, result, error) -> None:
        with self._lock:
            closed = self.aggregator.close(request.model, request.key)
            state = self._requests.pop(request.request_id, None) or _Request()
            # a request's end also ends a batch interval that has run its length (the next forward may be long in coming)
            batches = self.batches.due(time.time())
        for counters in closed:
            self.writer.put("intervals", counters.row(self.run_id))
        for row in batches:
            self.writer.put("batch_intervals", row)
        self.writer.put("requests", request_row(self.run_id, request, result, error, state.drafter_tokens))

    # -- lifecycle -------------------------------------------------------------------------------

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write every row queued so far (open intervals are written when their request ends)."""
        return self.writer.flush(timeout_s)

    def close(self) -> None:
        with self._lock:
            closed = self.aggregator.close()
            batches = self.batches.close()
        for counters in closed:
            self.writer.put("intervals", counters.row(self.run_id))
        for row in batches:
            self.writer.put("batch_intervals", row)
        self.writer.close()


def event_decision(model: str, key: str, event) -> Decision:
    """A policy event (e.g. ``policies.change.AcceptanceCollapse``) as a ``decisions`` row."""
    fields = {name: getattr(event, name) for name in getattr(event, "__slots__", ()) if hasattr(event, name)}
    if not fields and hasattr(event, "__dict__"):
        fields = dict(vars(event))
    kind = "collapse" if type(event).__name__ == "AcceptanceCollapse" else type(event).__name__.lower()
    after = fields.get("acceptance_after")
    return Decision(fields.get("timestamp") or time.time(), model, key, kind, fields.get("drafter"),
                    "" if after is None else f"{after:.4f}", None, json.dumps(fields, default=str))


def request_row(run_id: str, request, result, error, drafter_tokens: dict[str, int]) -> tuple:
    """The tuple for ``store.COLUMNS["requests"]``; latency columns are NULL for failed requests."""
    cfg = request.config
    end = time.time()
    temperature = 0.0 if getattr(cfg, "greedy", True) else getattr(cfg, "temperature", None)
    main = max(drafter_tokens, key=drafter_tokens.get) if drafter_tokens else PLAIN
    drafters = ",".join(sorted(drafter_tokens))
    if result is None:
        return (run_id, request.request_id, request.model, request.key, request.policy, request.start_time, end,
                request.prompt_tokens, 0, getattr(cfg, "max_new_tokens", None), temperature, None,
                f"{type(error).__name__}: {error}" if error is not None else None, None, None, None, 0, 0, 0, 0,
                drafters, main)
    s = result.stats
    # TPOT after the first token, the GenAI convention: decode time over the tokens it produced
    tpot = s.decode_s / (s.new_tokens - 1) if s.new_tokens > 1 else None
    return (run_id, request.request_id, request.model, request.key, request.policy, request.start_time, end,
            s.prompt_tokens, s.new_tokens, getattr(cfg, "max_new_tokens", None), temperature, result.finish_reason,
            None, s.prefill_s, s.decode_s, tpot, s.steps, s.drafts, s.draft_tokens, s.accepted_tokens, drafters, main)
