"""Alert webhook: a JSON POST per batch of transitions, with retries, off the generation path.

The body follows Alertmanager's webhook format (version 4), so a receiver written for
Prometheus alerts (a chat bridge, an incident tool) accepts ours unchanged::

    {"version": "4", "status": "firing", "receiver": "adaptive-spec",
     "alerts": [{"status": "firing", "labels": {"alertname": "acceptance_collapse", "model": ...,
                 "key": ..., "drafter": ...}, "annotations": {"summary": "acceptance 0.02 over 60s ..."},
                 "startsAt": "2025-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                 "value": 0.02, "threshold": 0.3}]}

``notify`` only queues (bounded: ``queue_size`` payloads, dropped and counted when full); a daemon
thread sends, with ``timeout_s`` per attempt and ``retries`` more attempts spaced ``backoff_s``,
doubling. A receiver that is down costs at most
``(retries + 1) * timeout_s + backoff_s * (2**retries - 1)`` seconds of that thread's time per
payload, and never a moment of generation's.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlparse

log = logging.getLogger("adaptive_spec.telemetry")
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "not resolved"


def _iso(t: float | None) -> str:
    if t is None:
        return _ZERO_TIME
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def payload(transitions: list) -> dict:
    """The Alertmanager-style body for a list of ``alerts.Transition``."""
    alerts = [{
        "status": t.state,
        "labels": {"alertname": t.rule, "model": t.model, "key": t.key, "drafter": t.drafter},
        "annotations": {"summary": t.message},
        "startsAt": _iso(t.fired_at),
        "endsAt": _iso(t.resolved_at),
        "value": t.value,
        "threshold": t.threshold,
    } for t in transitions]
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    return {"version": "4", "status": status, "receiver": "adaptive-spec", "alerts": alerts}


@dataclass
class WebhookConfig:
    url: str
    timeout_s: float = 2.0  # a receiver slower than this is treated as down
    retries: int = 3  # 4 attempts: rides out a receiver restart of a few seconds
    backoff_s: float = 0.5  # 0.5, 1, 2 s between attempts
    queue_size: int = 100  # transitions are rare; 100 pending payloads means the receiver is gone

    def __post_init__(self) -> None:
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"webhook url must be an http(s) URL, got url={self.url!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got timeout_s={self.timeout_s!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got retries={self.retries!r}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s must be >= 0, got backoff_s={self.backoff_s!r}")


@dataclass
class WebhookStats:
    sent: int = 0  # payloads delivered (2xx)
    attempts: int = 0
    failures: int = 0  # payloads given up after every retry
    dropped: int = 0  # payloads dropped because the queue was full


class WebhookNotifier:
    """Sends transitions to ``config.url`` from a background thread."""

    def __init__(self, config: WebhookConfig) -> None:
        self.config = config
        self.stats = WebhookStats()
        self._queue: queue.Queue = queue.Queue(config.queue_size)
        self._reported = False
        self._thread = threading.Thread(target=self._run, name="telemetry-webhook", daemon=True)
        self._thread.start()

    def notify(self, transitions: list) -> None:
        """Queue one POST for these transitions; never blocks."""
        if not transitions:
            return
        try:
            self._queue.put_nowait(payload(transitions))
        except queue.Full:
            self.stats.dropped += 1

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Block until every queued payload was sent or given up (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def _send(self, body: bytes) -> None:
        request = urllib.request.Request(self.config.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
            if not 200 <= response.status < 300:
                raise urllib.error.HTTPError(self.config.url, response.status, "non-2xx", response.headers, None)

    def _run(self) -> None:
        cfg = self.config
        while True:
            body = json.dumps(self._queue.get()).encode()
            delay = cfg.backoff_s
            for attempt in range(cfg.retries + 1):
                self.stats.attempts += 1
                try:
                    self._send(body)
                    self.stats.sent += 1
                    break
                except (OSError, urllib.error.URLError, ValueError) as exc:  # HTTPError and timeouts are OSErrors
                    error = exc
                if attempt < cfg.retries:
                    time.sleep(delay)
                    delay *= 2
            else:
                self.stats.failures += 1
                if not self._reported:
                    self._reported = True
                    log.warning("alert webhook %s failed after %d attempts (%s); further failures are only counted",
                                cfg.url, cfg.retries + 1, error)
            self._queue.task_done()
