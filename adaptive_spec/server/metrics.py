"""``/metrics``: the engine's telemetry (the OpenTelemetry Prometheus reader's speculation, GenAI
and batch metrics, in prometheus_client's default registry) and the server's own counters and
gauges (requests waiting and running).

The server's counters live in a registry of their own, one per app, so that two apps in one
process (tests) do not collide; the exposition is both registries, one after the other.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, generate_latest


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})  # labelled as sent; others: "other"
# the suffix drafter's history of past outputs (HistoryStore.stats): bounded, and shown here so that
# an operator sees what it holds
SUFFIX_GAUGES = {
    "tokens": "tokens of past outputs the suffix drafter holds",
    "outputs": "past outputs the suffix drafter holds",
    "keys": "traffic keys with a suffix history",
    "memory_bytes": "bytes the suffix drafter's history takes (buffer and index)",
}


class ServerMetrics:
    def __init__(self, queue_depth: Callable[[], int], suffix_stats: Callable[[], dict | None] = lambda: None,
                 running: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("adaptive_spec_http_requests", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=self.registry)
        depth = Gauge("adaptive_spec_queue_depth", "requests waiting for the engine", registry=self.registry)
        depth.set_function(queue_depth)
        Gauge("adaptive_spec_requests_running", "requests taken from the queue and not yet answered (with --max-batch "
              "above 1: the batch's rows and those joining it)", registry=self.registry).set_function(running)
        self._suffix_stats = suffix_stats
        self._suffix = {field: Gauge(f"adaptive_spec_suffix_history_{field}", help_text, registry=self.registry)
                        for field, help_text in SUFFIX_GAUGES.items()}

    def request(self, method: str, route: str, status: int) -> None:
        # a client may send any method name: each new one would be a new series, without end
        self.requests.labels(method if method in METHODS else "other", route, str(status)).inc()

    def exposition(self) -> tuple[bytes, str]:
        stats = self._suffix_stats() or {}  # sized once per scrape: it walks the history's index
        for field, gauge in self._suffix.items():
            gauge.set(stats.get(field, 0))
        return generate_latest(REGISTRY) + generate_latest(self.registry), CONTENT_TYPE_LATEST
