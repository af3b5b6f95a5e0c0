"""``/metrics``: the engine's telemetry (the OpenTelemetry Prometheus reader's speculation and
GenAI metrics, in prometheus_client's default registry) and the server's own counters.

The server's counters live in a registry of their own, one per app, so that two apps in one
process (tests) do not collide; the exposition is both registries, one after the other.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, generate_latest


class ServerMetrics:
    def __init__(self, queue_depth: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("adaptive_spec_http_requests", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=self.registry)
        depth = Gauge("adaptive_spec_queue_depth", "requests waiting for the engine", registry=self.registry)
        depth.set_function(queue_depth)

    def request(self, method: str, route: str, status: int) -> None:
        self.requests.labels(method, route, str(status)).inc()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(REGISTRY) + generate_latest(self.registry), CONTENT_TYPE_LATEST
