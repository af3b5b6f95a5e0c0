"""Telemetry: the embedded SQLite store, OpenTelemetry spans and metrics, alerts.

Start with ``build_observers("sqlite:/path/telemetry.sqlite")`` and pass the result to
``SpeculativeDecoder(..., observers=...)``; read the store back with ``read_requests``,
``read_intervals``, ``read_steps``, ``read_decisions``, ``read_alerts`` (schema: ``SCHEMA.md``).

Modules, one concept each:

- ``spec``      ``--telemetry`` specs -> observers
- ``recorder``  the store observer: steps -> interval counters -> queued rows
- ``aggregate`` interval counters (additive; rates derived on read)
- ``tracker``   speculation on/off, active drafter and k, read off the step stream
- ``writer``    bounded queue + background thread: batches, retention, periodic jobs
- ``store``     schema, batch inserts, retention, readers
- ``rollup``    per-minute/hour/day sums kept by triggers; latency histograms; window covers
- ``access``    opening it: private directories, read-only readers, one error per way it fails
- ``otel``      OpenTelemetry spans (GenAI conventions) and metrics (GenAI + vLLM-style counters)
- ``alerts``    rule evaluator over the store; ``webhook`` its Alertmanager-style POSTs, sent
  durably from ``outbox`` (the store's ``notifications`` table)
- ``summary``   acceptance and latency per model and drafter; ``cli`` the commands

OpenTelemetry is imported only by ``otel`` and ``spec`` (for prometheus/otlp specs).
"""

from adaptive_spec.telemetry.spec import build_observers, default_store_path, parse_spec
from adaptive_spec.telemetry.store import read_alerts, read_decisions, read_intervals, read_requests, read_steps

__all__ = ["build_observers", "default_store_path", "parse_spec", "read_alerts", "read_decisions", "read_intervals",
           "read_requests", "read_steps"]
