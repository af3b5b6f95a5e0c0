"""OpenTelemetry instrumentation: a span per generation and the GenAI + speculation metrics.

Names follow the OpenTelemetry GenAI semantic conventions where one exists, and the project
namespace ``adaptive_spec.*`` otherwise.

Span ``text_completion {model}`` per generation (kind INTERNAL: the model runs in-process):

- ``gen_ai.operation.name`` = ``text_completion``, ``gen_ai.provider.name`` = ``adaptive_spec``
- ``gen_ai.request.model``, ``gen_ai.request.max_tokens``, ``gen_ai.request.temperature`` (0 when
  greedy), ``gen_ai.request.top_p``, ``gen_ai.request.top_k``, ``gen_ai.request.seed``
- ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons``
- ``adaptive_spec.policy``, ``adaptive_spec.traffic_key``, ``adaptive_spec.speculation.drafters``
  (drafters that proposed), ``.steps``, ``.drafts``, ``.draft_tokens``, ``.accepted_tokens``
- events: ``adaptive_spec.speculation.on`` / ``.off``, ``adaptive_spec.drafter.switch``,
  ``adaptive_spec.acceptance.collapse`` (the policy's change-detector event)
- on error: status ERROR and ``error.type``

Metrics (Prometheus names after the exporter's translation in brackets):

- ``gen_ai.server.time_to_first_token`` s [``gen_ai_server_time_to_first_token_seconds``]
- ``gen_ai.server.time_per_output_token`` s: decode seconds / (output tokens - 1)
- ``gen_ai.server.request.duration`` s: request start to end
- ``gen_ai.client.token.usage`` {token}, by ``gen_ai.token.type`` = input | output
- counters by ``gen_ai.request.model`` and ``adaptive_spec.drafter`` (vLLM's spec-decode counters):
  ``adaptive_spec.spec_decode.drafts`` [``..._drafts_total``], ``.draft_tokens``,
  ``.accepted_tokens``, ``.accepted_tokens_per_pos`` (+ ``adaptive_spec.position``, 0-based) and
  ``.proposed_tokens_per_pos``; ``adaptive_spec.decode.duration`` s (draft + verify seconds) and
  ``adaptive_spec.decode.output_tokens``, with drafter ``none`` for plain steps
- gauges by model and ``adaptive_spec.traffic_key``: ``adaptive_spec.speculation.k`` (current k),
  ``adaptive_spec.speculation.enabled`` (1/0, see ``tracker.py``), and
  ``adaptive_spec.speculation.active_drafter`` (1 for the active drafter, 0 for the others seen)
- the batched engine's decode forwards, by model and rows in the forward (``batch_otel.py``):
  ``adaptive_spec.batch.forwards``, ``.row_steps``, ``.drafting_row_steps``, ``.duration``,
  ``.cap_calls``, ``.cut_draft_tokens``, ``.prompt_tokens``
- what drafters hold across requests, by model (``SpeculativeDecoder.report_gauges``, every few
  seconds): ``adaptive_spec.drafter.suffix_history_tokens``, ``_outputs``, ``_keys``, ``_memory_bytes``
  [``adaptive_spec_drafter_suffix_history_tokens`` ...; the server's own /metrics gauges keep their names]

Derived rates (PromQL in ``deploy/prometheus/alerts.yml``)::

    acceptance_rate        = rate(accepted_tokens) / rate(draft_tokens)
    mean_acceptance_length = 1 + rate(accepted_tokens) / rate(drafts)
    position_i_acceptance  = rate(accepted_tokens_per_pos{position=i}) / rate(proposed_tokens_per_pos{position=i})
    time_per_output_token  = rate(decode_duration) / rate(decode_output_tokens)

Cost: steps are summed into plain dicts under a lock and added to the OTel counters when a
request ends or every ``flush_every_s``, so a step costs a few dict updates, not ~2 us per
instrument call per position.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from adaptive_spec.telemetry.batch_otel import BatchCounters
from adaptive_spec.telemetry.recorder import event_decision
from adaptive_spec.telemetry.tracker import SpeculationTracker

OPERATION = "text_completion"
PROVIDER = "adaptive_spec"

# bucket boundaries advised by the GenAI semantic conventions
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]


class _Counts:
    """Per-drafter counters summed between two flushes into the OTel instruments."""

    __slots__ = ("drafts", "draft_tokens", "accepted_tokens", "decode_s", "output_tokens", "proposed_pos", "accepted_pos")

    def __init__(self) -> None:
        self.drafts = self.draft_tokens = self.accepted_tokens = self.output_tokens = 0
        self.decode_s = 0.0
        self.proposed_pos: list[int] = []
        self.accepted_pos: list[int] = []


class _Active:
    __slots__ = ("span", "drafters")

    def __init__(self, span) -> None:
        self.span = span
        self.drafters: set[str] = set()


class OTelObserver:
    """Generation observer emitting OpenTelemetry spans and metrics.

    ``meter_provider`` / ``tracer_provider``: SDK providers with their readers and exporters
    (``spec.py`` builds them); None takes the global ones (no-ops unless the application set them).
    """

    def __init__(self, meter_provider=None, tracer_provider=None, flush_every_s: float = 5.0) -> None:
        from opentelemetry import metrics

        meter = (meter_provider or metrics.get_meter_provider()).get_meter("adaptive_spec")
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("adaptive_spec")
        self.meter_provider, self.tracer_provider = meter_provider, tracer_provider
        self.flush_every_s = flush_every_s
        h, c, g = meter.create_histogram, meter.create_counter, meter.create_gauge
        self.ttft = h("gen_ai.server.time_to_first_token", unit="s", description="Time to generate the first token",
                      explicit_bucket_boundaries_advisory=TTFT_BUCKETS)
        self.tpot = h("gen_ai.server.time_per_output_token", unit="s",
                      description="Time per output token after the first", explicit_bucket_boundaries_advisory=TPOT_BUCKETS)
        self.duration = h("gen_ai.server.request.duration", unit="s", description="Generation duration",
                          explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self.token_usage = h("gen_ai.client.token.usage", unit="{token}", description="Input and output tokens",
                             explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.drafts = c("adaptive_spec.spec_decode.drafts", unit="{draft}", description="Steps that verified >= 1 draft token")
        self.draft_tokens = c("adaptive_spec.spec_decode.draft_tokens", unit="{token}", description="Draft tokens proposed")
        self.accepted_tokens = c("adaptive_spec.spec_decode.accepted_tokens", unit="{token}", description="Draft tokens accepted")
        self.accepted_per_pos = c("adaptive_spec.spec_decode.accepted_tokens_per_pos", unit="{token}",
                                  description="Draft tokens accepted at each position (0-based)")
        self.proposed_per_pos = c("adaptive_spec.spec_decode.proposed_tokens_per_pos", unit="{token}",
                                  description="Draft tokens proposed at each position (0-based)")
        self.decode_duration = c("adaptive_spec.decode.duration", unit="s", description="Draft + verify seconds of decode steps")
        self.decode_tokens = c("adaptive_spec.decode.output_tokens", unit="{token}", description="Tokens emitted by decode steps")
        self.k_gauge = g("adaptive_spec.speculation.k", description="Draft length of the last speculative step")
        self.enabled_gauge = g("adaptive_spec.speculation.enabled", description="1 while speculation is on")
        self.drafter_gauge = g("adaptive_spec.speculation.active_drafter", description="1 for the active drafter")
        self.batch = BatchCounters(meter)
        self._meter = meter
        self._engine_gauges: dict[str, Any] = {}  # created as the engine first reports each name
        self.tracker = SpeculationTracker()
        self._counts: dict[tuple[str, str], _Counts] = {}
        self._active: dict[int, _Active] = {}
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()

    # -- hooks -----------------------------------------------------------------------------------

    def on_request_start(self, request) -> None:
        cfg = request.config
        greedy = getattr(cfg, "greedy", True)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": getattr(cfg, "max_new_tokens", 0),
            "gen_ai.request.temperature": 0.0 if greedy else float(cfg.temperature),
            "gen_ai.usage.input_tokens": request.prompt_tokens,
            "adaptive_spec.policy": request.policy,
            "adaptive_spec.traffic_key": request.key,
        }
        if not greedy:
            attributes["gen_ai.request.top_p"] = float(cfg.top_p)
            if cfg.top_k:
                attributes["gen_ai.request.top_k"] = int(cfg.top_k)
        if getattr(cfg, "seed", None) is not None:
            attributes["gen_ai.request.seed"] = int(cfg.seed)
        span = self.tracer.start_span(f"{OPERATION} {request.model}", kind=SpanKind.INTERNAL, attributes=attributes,
                                      start_time=int(request.start_time * 1e9))
        with self._lock:
            self._active[request.request_id] = _Active(span)

    def on_step(self, request, outcome, events: list) -> None:
        model, key = request.model, request.key
        with self._lock:
            counts = self._counts.get((model, outcome.drafter))
            if counts is None:
                counts = self._counts[(model, outcome.drafter)] = _Counts()
            counts.decode_s += outcome.draft_s + outcome.verify_s
            counts.output_tokens += outcome.emitted
            proposed = outcome.proposed
            if proposed:
                counts.drafts += 1
                counts.draft_tokens += proposed
                counts.accepted_tokens += outcome.num_accepted
                if proposed > len(counts.proposed_pos):
                    grow = proposed - len(counts.proposed_pos)
                    counts.proposed_pos.extend([0] * grow)
                    counts.accepted_pos.extend([0] * grow)
                for i in range(proposed):
                    counts.proposed_pos[i] += 1
                for i in range(outcome.num_accepted):
                    counts.accepted_pos[i] += 1
            previous_k = self.tracker.state(model, key)[2]
            decisions = self.tracker.update(model, key, outcome)
            active = self._active.get(request.request_id)
            if active is not None and proposed:
                active.drafters.add(outcome.drafter)
            current_k = self.tracker.state(model, key)[2]
        series = {"gen_ai.request.model": model, "adaptive_spec.traffic_key": key}
        if current_k != previous_k:  # the controller's k, before the budget or the gate changed it
            self.k_gauge.set(current_k, series)
        for d in decisions:
            if d.kind == "speculation":
                self.enabled_gauge.set(1 if d.value == "on" else 0, series)
                name = f"adaptive_spec.speculation.{d.value}"
            else:
                if d.previous is not None:
                    self.drafter_gauge.set(0, {**series, "adaptive_spec.drafter": d.previous})
                self.drafter_gauge.set(1, {**series, "adaptive_spec.drafter": d.value})
                name = "adaptive_spec.drafter.switch"
            if active is not None:
                active.span.add_event(name, {"adaptive_spec.drafter": d.drafter or "", "adaptive_spec.previous": d.previous or ""},
                                      timestamp=int(d.time * 1e9))
        for event in events:
            if active is not None:
                e = event_decision(model, key, event)
                active.span.add_event("adaptive_spec.acceptance.collapse" if e.kind == "collapse" else f"adaptive_spec.{e.kind}",
                                      _event_attributes(event), timestamp=int(e.time * 1e9))
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush_counters()

    def on_batch_step(self, model: str, step) -> None:
        """One decode forward of the batched engine (``policies.batch_step.BatchStep``)."""
        with self._lock:
            self.batch.add(model, step)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush_counters()

    def on_gauges(self, model: str, values: dict[str, float]) -> None:
        """The engine's sampled gauges (``SpeculativeDecoder.report_gauges``), by model."""
        for name, value in values.items():
            gauge = self._engine_gauges.get(name)
            if gauge is None:
                gauge = self._engine_gauges[name] = self._meter.create_gauge(
                    f"adaptive_spec.drafter.{name}", description=f"{name.replace('_', ' ')}, as the engine last reported it")
            gauge.set(float(value), {"gen_ai.request.model": model})

    def on_request_end(self, request, result, error) -> None:
        with self._lock:
            active = self._active.pop(request.request_id, None)
        self.flush_counters()
        base = {"gen_ai.operation.name": OPERATION, "gen_ai.provider.name": PROVIDER, "gen_ai.request.model": request.model}
        if error is not None:
            base = {**base, "error.type": type(error).__name__}
        self.duration.record(max(time.time() - request.start_time, 0.0), base)
        self.token_usage.record(request.prompt_tokens, {**base, "gen_ai.token.type": "input"})
        if result is not None:
            s = result.stats
            self.token_usage.record(s.new_tokens, {**base, "gen_ai.token.type": "output"})
            self.ttft.record(s.prefill_s, base)
            if s.new_tokens > 1:
                self.tpot.record(s.decode_s / (s.new_tokens - 1), base)
        if active is None:
            return
        span = active.span
        if result is not None:
            s = result.stats
            span.set_attributes({
                "gen_ai.usage.output_tokens": s.new_tokens,
                "gen_ai.response.finish_reasons": [result.finish_reason],
                "adaptive_spec.speculation.drafters": sorted(active.drafters),
                "adaptive_spec.speculation.steps": s.steps,
                "adaptive_spec.speculation.drafts": s.drafts,
                "adaptive_spec.speculation.draft_tokens": s.draft_tokens,
                "adaptive_spec.speculation.accepted_tokens": s.accepted_tokens,
            })
        if error is not None:
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end()

    # -- flushing --------------------------------------------------------------------------------

    def flush_counters(self) -> None:
        """Add the counts summed since the last flush to the OTel counters."""
        with self._lock:
            pending, self._counts = self._counts, {}
            self._last_flush = time.monotonic()
            batch = self.batch.take()
        self.batch.publish(batch)
        for (model, drafter), c in pending.items():
            attrs = {"gen_ai.request.model": model, "adaptive_spec.drafter": drafter}
            self.decode_duration.add(c.decode_s, attrs)
            self.decode_tokens.add(c.output_tokens, attrs)
            if c.drafts:
                self.drafts.add(c.drafts, attrs)
                self.draft_tokens.add(c.draft_tokens, attrs)
                self.accepted_tokens.add(c.accepted_tokens, attrs)
                for i, (p, a) in enumerate(zip(c.proposed_pos, c.accepted_pos)):
                    pos = {**attrs, "adaptive_spec.position": i}
                    self.proposed_per_pos.add(p, pos)
                    self.accepted_per_pos.add(a, pos)

    def close(self) -> None:
        self.flush_counters()
        for provider in (self.meter_provider, self.tracer_provider):
            shutdown = getattr(provider, "shutdown", None)
            if shutdown is not None:
                shutdown()


def _event_attributes(event) -> dict:
    out = {}
    for name in getattr(event, "__slots__", ()) or vars(event):
        value = getattr(event, name, None)
        if isinstance(value, (bool, int, float, str)):
            out[f"adaptive_spec.{name}"] = value
    return out
