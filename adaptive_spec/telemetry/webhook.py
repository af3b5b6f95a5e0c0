"""Alert webhook: a JSON POST per batch of transitions, durable, with retries, off the generation path.

The body follows Alertmanager's webhook format (version 4), so a receiver written for
Prometheus alerts (a chat bridge, an incident tool) accepts ours unchanged::

    {"version": "4", "status": "firing", "receiver": "adaptive-spec",
     "alerts": [{"status": "firing", "labels": {"alertname": "acceptance_collapse", "model": ...,
                 "key": ..., "drafter": ...}, "annotations": {"summary": "acceptance 0.02 over 60s ..."},
                 "startsAt": "2025-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                 "value": 0.02, "threshold": 0.3}]}

Deliveries are durable (``outbox.py``): each batch of transitions is a row of the store's
``notifications`` table, written in the same transaction as the alerts' change of state, and marked
delivered only after the receiver answered 2xx. A daemon thread sends them oldest first, with
``timeout_s`` per attempt and ``retries`` more attempts spaced ``backoff_s``, doubling; attempts are
counted in the store, across runs. A receiver that is down costs at most
``(retries + 1) * timeout_s + backoff_s * (2**retries - 1)`` seconds of that thread's time per
payload, and never a moment of generation's.

At exit (``close``, called by the writer's ``close`` and by its exit handler) the thread keeps
sending for at most ``exit_flush_s``; what is still pending then stays in the store, is named in
one log line, and is sent by the next process that opens the store with the same webhook. A
payload given up after its last attempt is logged, one line each.
"""

from __future__ import annotations

import http.client
import logging
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from adaptive_spec.telemetry import outbox, store

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
    queue_size: int = 100  # pending per receiver; transitions are rare, 100 pending means the receiver is gone
    # at exit: long enough for the 4 attempts against a receiver that refuses connections
    # (0.5 + 1 + 2 s of backoff), short enough that a CLI run does not seem to hang
    exit_flush_s: float = 5.0

    def __post_init__(self) -> None:
        # the host and port are checked here, once: a port that is not a number used to be accepted,
        # and then every notification failed on every attempt and was given up
        try:
            parsed = urlparse(self.url)
            port_ok = parsed.port is None or 1 <= parsed.port <= 65535  # .port raises on "abc" or 99999
        except ValueError:
            parsed, port_ok = None, False
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok:
            raise ValueError(f"webhook url must be an http(s) URL with a host and a port in [1, 65535] if any, "
                             f"got url={self.url!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got timeout_s={self.timeout_s!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got retries={self.retries!r}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s must be >= 0, got backoff_s={self.backoff_s!r}")
        if isinstance(self.queue_size, bool) or not isinstance(self.queue_size, int) or self.queue_size < 1:
            raise ValueError(f"queue_size must be an integer >= 1, got queue_size={self.queue_size!r}")
        if not self.exit_flush_s >= 0:
            raise ValueError(f"exit_flush_s must be >= 0, got exit_flush_s={self.exit_flush_s!r}")


@dataclass
class WebhookStats:
    sent: int = 0  # payloads delivered (2xx)
    attempts: int = 0
    failures: int = 0  # payloads given up after every retry
    dropped: int = 0  # payloads not recorded: queue_size already pending, or the store unwritable
    pending_at_close: int = 0  # left in the store for the next start


class WebhookNotifier:
    """Sends the alert notifications recorded in the store at ``path`` to ``config.url``.

    ``record`` (in the alert evaluator's transaction) then ``wake``; or ``notify`` on its own.
    """

    IDLE_POLL_S = 30.0  # also picks up what a process that died left pending for this receiver

    def __init__(self, config: WebhookConfig, path: str | Path, clock=time.time) -> None:
        self.config, self.path, self.clock = config, Path(path), clock
        self.stats = WebhookStats()
        self._lock = threading.Lock()  # one connection, used by the sender thread and by notify/wait_idle
        self._conn: sqlite3.Connection | None = None
        self._wake = threading.Event()
        self._closing_until: float | None = None  # monotonic deadline of the exit flush
        self._reported: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="telemetry-webhook", daemon=True)
        self._thread.start()

    # -- producers -------------------------------------------------------------------------------

    def record(self, conn: sqlite3.Connection, transitions: list, now: float) -> None:
        """Record one payload for ``transitions`` on ``conn``, inside the caller's transaction;
        ``wake`` after it commits."""
        if transitions and not outbox.enqueue(conn, self.config.url, payload(transitions),
                                              outbox.summarize(transitions), now, self.config.queue_size):
            self._drop(f"{self.config.queue_size} notifications already pending")

    def wake(self) -> None:
        self._wake.set()

    def notify(self, transitions: list) -> None:
        """Record one payload for ``transitions`` in the store and wake the sender.

        Waits for the store's lock at most its busy timeout, never on the network; a store that
        cannot be written drops the payload, counted and reported once."""
        if not transitions:
            return
        try:
            with self._lock:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self.record(conn, transitions, self.clock())
                    conn.execute("COMMIT")
                except BaseException:
                    store.rollback(conn)
                    raise
        except (OSError, sqlite3.Error) as exc:
            self._drop(f"{type(exc).__name__}: {exc}")
        self._wake.set()

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Block until nothing is pending for this receiver (sent or given up); tests, shutdown."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with self._lock:
                    if outbox.pending_count(self._connection(), self.config.url) == 0:
                        return True
            except (OSError, sqlite3.Error):
                pass
            time.sleep(0.02)
        return False

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is pending for at most ``timeout_s`` (default ``exit_flush_s``), then stop;
        what is left stays in the store for the next start, and one log line says so."""
        if self._closing_until is not None:
            return
        bound = self.config.exit_flush_s if timeout_s is None else timeout_s
        self._closing_until = time.monotonic() + bound
        self._wake.set()
        self._thread.join(bound + self.config.timeout_s + 1.0)  # an attempt in flight ends by its own timeout
        left = self.stats.pending_at_close
        if left or self._thread.is_alive():
            log.warning("alert webhook %s: %s notification(s) still pending after the %g s exit flush; they stay in "
                        "%s and are sent by the next run with this store and webhook", self.config.url,
                        left or "some", bound, self.path)

    # -- sender thread ---------------------------------------------------------------------------

    def _report(self, kind: str, message: str, *args) -> None:
        if kind not in self._reported:
            self._reported.add(kind)
            log.warning(message + " (reported once; further occurrences are only counted)", *args)

    def _drop(self, why: str) -> None:
        self.stats.dropped += 1
        self._report("drop", "alert webhook %s: a notification was dropped (%s)", self.config.url, why)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:  # a longer busy timeout than the writer's: this thread may wait
            self._conn = store.connect(self.path, timeout_s=5.0)
        return self._conn

    def _send(self, body: bytes, timeout_s: float) -> None:
        request = urllib.request.Request(self.config.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if not 200 <= response.status < 300:
                raise urllib.error.HTTPError(self.config.url, response.status, "non-2xx", response.headers, None)

    def _remaining(self) -> float | None:
        return None if self._closing_until is None else self._closing_until - time.monotonic()

    def _step(self) -> float | None:
        """Attempt the head notification if due. Returns 0 to go on at once, the seconds until the
        head is due, or None when nothing is pending."""
        cfg = self.config
        with self._lock:
            if self._conn is None and not self.path.exists():
                return None  # no store yet, so nothing from an earlier run
            conn = self._connection()
            row = outbox.head(conn, cfg.url)
            if row is None:
                return None
            now = self.clock()
            if row["next_attempt_at"] > now:
                return row["next_attempt_at"] - now
            if not outbox.claim(conn, row, now, lease_s=cfg.timeout_s + 5.0):
                return 0.1  # another process is sending it
        attempts = row["attempts"] + 1
        remaining = self._remaining()
        timeout_s = cfg.timeout_s if remaining is None else min(cfg.timeout_s, max(remaining, 0.1))
        self.stats.attempts += 1
        try:
            self._send(row["payload"].encode(), timeout_s)
            error = None
        except (OSError, urllib.error.URLError, http.client.HTTPException, ValueError) as exc:  # HTTPError, timeouts
            error = f"{type(exc).__name__}: {exc}"
        now = self.clock()
        retry_at = None if attempts > cfg.retries else now + cfg.backoff_s * 2 ** (attempts - 1)
        with self._lock:
            if error is None:
                outbox.record_delivered(self._conn, row["id"], attempts, now)
                self.stats.sent += 1
            else:
                outbox.record_failure(self._conn, row["id"], attempts, error, now, retry_at)
        if error is not None and retry_at is None:
            self.stats.failures += 1
            log.warning("alert webhook %s: gave up on a notification (%s) after %d attempts, last error %s; "
                        "the alert itself stays recorded in %s", cfg.url, row["summary"], attempts, error, self.path)
        return 0.0

    def _run(self) -> None:
        while True:
            self._wake.clear()  # before looking: a wake that comes during the step is kept for the wait
            try:
                wait_s = self._step()
            except (OSError, sqlite3.Error) as exc:
                self._report("store", "alert webhook %s: its outbox in %s cannot be used (%s: %s); retrying",
                             self.config.url, self.path, type(exc).__name__, exc)
                with self._lock:
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                wait_s = 1.0
            remaining = self._remaining()
            if remaining is not None and (wait_s is None or wait_s > remaining):
                break  # closing, and nothing more can be sent before the deadline
            if wait_s == 0.0:
                continue
            timeout = self.IDLE_POLL_S if wait_s is None else wait_s
            self._wake.wait(timeout if remaining is None else min(timeout, remaining))
        with self._lock:
            try:
                if self._conn is not None:
                    self.stats.pending_at_close = outbox.pending_count(self._conn, self.config.url)
                    self._conn.close()
                    self._conn = None
            except sqlite3.Error:
                pass
