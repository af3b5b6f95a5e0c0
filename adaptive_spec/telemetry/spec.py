"""``--telemetry`` specs -> observers for ``SpeculativeDecoder(observers=...)``.

Specs, comma-separated to combine (``sqlite:/var/lib/spec.db,prometheus:9464``)::

    sqlite               the embedded store at the default path (the CLI's default)
    sqlite:PATH          the embedded store at PATH; options after '?', e.g.
                         sqlite:/tmp/t.db?steps=1&interval_s=0.5&max_age_days=3&max_rows=100000
                             &alerts_every_s=15&webhook=http://127.0.0.1:9000/hook
    prometheus:PORT      OpenTelemetry metrics on http://127.0.0.1:PORT/metrics: this machine only
    prometheus:HOST:PORT ... on HOST: 0.0.0.0 (every interface: lets other machines scrape), an
                         address of this machine, or [::1]-style IPv6
    otlp                 OpenTelemetry spans and metrics over OTLP, configured by the standard
                         OTEL_EXPORTER_OTLP_* / OTEL_SERVICE_NAME variables; needs
                         opentelemetry-exporter-otlp (imported only for this spec)
    off                  nothing

Default store path: ``$ADAPTIVE_SPEC_TELEMETRY_DB``, else ``telemetry.sqlite`` in the user data
directory (``platformdirs.user_data_dir("adaptive-spec")``, e.g. ``~/.local/share/adaptive-spec/``
on Linux); directories it creates are private (0700), as is a new store file (0600). The sqlite
store also runs the alert evaluator every ``alerts_every_s`` (0: never) in its writer thread, and
posts transitions to ``webhook`` (or ``$ADAPTIVE_SPEC_ALERT_WEBHOOK``), durably: notifications wait
in the store until delivered, and the next run with alerts on sends what an earlier one left.

A bad spec raises ``InvalidParameterError("telemetry", spec, reason)``, before any model loads.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

from adaptive_spec.errors import InvalidParameterError

DEFAULT_SPEC = "sqlite"
FORMS = "sqlite[:PATH[?options]], prometheus:[HOST:]PORT, otlp, off (comma-separated to combine)"
# metrics name the deployment's models and traffic keys: served to this machine unless asked
PROMETHEUS_DEFAULT_HOST = "127.0.0.1"
SQLITE_OPTIONS = ("steps", "interval_s", "max_age_days", "max_rows", "alerts_every_s", "queue_size", "webhook")
_prometheus_servers: dict[tuple[str, int], object] = {}
_prometheus_observer = None  # one per process: its reader is registered in prometheus_client's registry


def default_store_path() -> Path:
    env = os.environ.get("ADAPTIVE_SPEC_TELEMETRY_DB")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("adaptive-spec")) / "telemetry.sqlite"


@dataclass
class SqliteSpec:
    path: Path
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class PrometheusSpec:
    host: str
    port: int


@dataclass
class OtlpSpec:
    pass


def parse_spec(spec: str) -> list:
    """The parts of a ``--telemetry`` spec, validated; ``[]`` for ``off``.

    >>> [type(p).__name__ for p in parse_spec("sqlite:/tmp/x.db,prometheus:9464")]
    ['SqliteSpec', 'PrometheusSpec']
    """
    def bad(reason: str):
        return InvalidParameterError("telemetry", spec, f"{reason}; expected {FORMS}")

    if not isinstance(spec, str) or not spec.strip():
        raise bad("empty spec")
    parts = [p.strip() for p in spec.split(",")]
    if "off" in parts:
        if len(parts) > 1:
            raise bad("'off' cannot be combined with other exporters")
        return []
    out: list = []
    for part in parts:
        kind, _, rest = part.partition(":")
        if kind == "sqlite":
            path_text, _, query = rest.partition("?")
            options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=False)) if query else {}
            unknown = sorted(set(options) - set(SQLITE_OPTIONS))
            if unknown:
                raise bad(f"unknown sqlite option(s) {unknown}; known: {', '.join(SQLITE_OPTIONS)}")
            out.append(SqliteSpec(Path(path_text).expanduser() if path_text else default_store_path(), options))
        elif kind == "prometheus":
            host, _, port_text = rest.rpartition(":")
            try:
                port = int(port_text)
            except ValueError:
                raise bad(f"prometheus needs a port, got {rest!r}") from None
            if not 1 <= port <= 65535:
                raise bad(f"port must be in [1, 65535], got {port}")
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]  # [::1]:9464
            if host and (any(c in host for c in "/[]@ ") or (":" in host and not rest.startswith("["))):
                raise bad(f"prometheus host {host!r} is not an address (IPv6: prometheus:[::1]:PORT)")
            out.append(PrometheusSpec(host or PROMETHEUS_DEFAULT_HOST, port))
        elif kind == "otlp" and not rest:
            out.append(OtlpSpec())
        else:
            raise bad(f"unknown exporter {part!r}")
    if len({repr(p) for p in out}) != len(out) or sum(isinstance(p, OtlpSpec) for p in out) > 1:
        raise bad("an exporter appears twice")
    return out


def _float_option(spec: str, options: dict, name: str, default: float, minimum: float = 0.0) -> float:
    if name not in options:
        return default
    try:
        value = float(options[name])
    except ValueError:
        value = float("nan")
    # finite: "inf" used to pass here and then fail deep inside (OverflowError from int(), a bare
    # ValueError from the aggregator) instead of as this one error
    if not (math.isfinite(value) and value >= minimum):
        raise InvalidParameterError("telemetry", spec,
                                    f"option {name}={options[name]!r} must be a finite number >= {minimum:g}")
    return value


def _int_option(spec: str, options: dict, name: str, default: int, minimum: int = 1) -> int:
    value = _float_option(spec, options, name, default, minimum)
    if value != int(value):  # max_rows=1.5 used to become 1: a store keeping one row per table
        raise InvalidParameterError("telemetry", spec,
                                    f"option {name}={options[name]!r} must be an integer >= {minimum}")
    return int(value)


def build_recorder(part: SqliteSpec, spec: str = ""):
    """The embedded store observer for one ``sqlite`` part, with its alert job and webhook."""
    from adaptive_spec.telemetry.alerts import AlertEvaluator
    from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder
    from adaptive_spec.telemetry.store import Retention
    from adaptive_spec.telemetry.webhook import WebhookConfig, WebhookNotifier
    from adaptive_spec.telemetry.writer import WriterConfig

    o = part.options
    steps = o.get("steps", "0")
    if steps not in ("0", "1", "true", "false"):
        raise InvalidParameterError("telemetry", spec, f"option steps={steps!r} must be 0 or 1")
    interval_s = _float_option(spec, o, "interval_s", 1.0, 1e-3)
    max_age_days = _float_option(spec, o, "max_age_days", 7.0, 1e-6)
    max_rows = _int_option(spec, o, "max_rows", 1_000_000)
    alerts_every_s = _float_option(spec, o, "alerts_every_s", 15.0)
    queue_size = _int_option(spec, o, "queue_size", 10_000)
    webhook_url = o.get("webhook") or os.environ.get("ADAPTIVE_SPEC_ALERT_WEBHOOK")
    try:
        config = WebhookConfig(webhook_url) if webhook_url else None
    except ValueError as exc:
        raise InvalidParameterError("telemetry", spec, str(exc)) from None
    # its outbox is the store itself; without the evaluator there is nothing to send
    notifier = WebhookNotifier(config, part.path) if config and alerts_every_s else None
    writer = WriterConfig(queue_size=queue_size, periodic_every_s=alerts_every_s or 1e9,
                          retention=Retention(max_age_days * 86400.0, max_rows))
    recorder = StoreRecorder(part.path, RecorderConfig(interval_s=interval_s, step_rows=steps in ("1", "true"), writer=writer))
    if alerts_every_s:
        recorder.writer.jobs.append(AlertEvaluator(notifier=notifier))
    return recorder


def build_prometheus_observer(parts: list[PrometheusSpec]):
    """One OTel observer whose metrics every ``/metrics`` endpoint in ``parts`` serves."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    from adaptive_spec.telemetry.otel import OTelObserver

    for p in parts:
        if (p.host, p.port) not in _prometheus_servers:  # one server per address for the process
            try:
                _prometheus_servers[(p.host, p.port)] = start_http_server(p.port, addr=p.host)
            except OSError as exc:
                raise InvalidParameterError("telemetry", f"prometheus:{p.host}:{p.port}",
                                            f"cannot listen on {p.host}:{p.port} ({exc})") from None
    # the reader registers with prometheus_client's default registry, which start_http_server serves;
    # a second reader would register every metric twice, so the process shares one observer
    global _prometheus_observer
    if _prometheus_observer is None:
        _prometheus_observer = OTelObserver(meter_provider=MeterProvider(metric_readers=[PrometheusMetricReader()]))
    return _prometheus_observer


def build_otlp_observer(spec: str = "otlp"):
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise InvalidParameterError("telemetry", spec, "the OTLP exporter is not installed: "
                                        "pip install opentelemetry-exporter-otlp-proto-http") from None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from adaptive_spec.telemetry.otel import OTelObserver

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "adaptive-spec")})
    tracer_provider = TracerProvider(resource=resource)
    # BatchSpanProcessor: a bounded queue (2048 spans) and its own thread; a dead collector costs drops, not latency
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    meter_provider = MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
    return OTelObserver(meter_provider=meter_provider, tracer_provider=tracer_provider)


def build_observers(spec: str | None = DEFAULT_SPEC) -> list:
    """Observers for a ``--telemetry`` spec (None: the default, the embedded store)."""
    spec = DEFAULT_SPEC if spec is None else spec
    parts = parse_spec(spec)
    observers = [build_recorder(p, spec) for p in parts if isinstance(p, SqliteSpec)]
    prometheus = [p for p in parts if isinstance(p, PrometheusSpec)]
    if prometheus:
        observers.append(build_prometheus_observer(prometheus))
    if any(isinstance(p, OtlpSpec) for p in parts):
        observers.append(build_otlp_observer(spec))
    return observers
