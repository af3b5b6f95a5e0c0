"""The bounded background writer: generation hands rows over and never waits on the disk.

Generation threads call ``put(table, row)``, a non-blocking append to a bounded queue
(``queue_size`` rows, so telemetry's memory is bounded). One daemon thread takes rows off the
queue and writes them in batches: one transaction per ``flush_every_s`` or per ``max_batch`` rows.
The store's triggers add each batch into the per-minute/hour/day rollups in that same transaction
(``rollup.py``), so the dashboard never sees rows its rollups do not count.
Every ``retention_every_s`` it applies the store's retention, and every ``periodic_every_s`` it runs
the registered periodic jobs (the alert evaluator) on its own connection.

Nothing here may break generation. Each failure is reported once on the log and then only counted
(``WriterStats``):

- queue full (the disk is slower than the traffic): the row is dropped, ``dropped_full``;
- the store cannot be opened (unwritable path): ``open_errors``; rows are dropped, and opening is
  retried every ``reopen_every_s`` in case the path becomes writable;
- a write fails (database locked past its 0.5 s busy timeout, disk full, a value SQLite cannot
  bind): the batch is dropped, ``write_errors`` and ``dropped_errors``; the log names SQLite's own
  error (``SQLITE_FULL``);
- a periodic job raises: ``job_errors``.
"""

from __future__ import annotations

import atexit
import logging
import math
import queue
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from adaptive_spec.telemetry import store

log = logging.getLogger("adaptive_spec.telemetry")
_STOP = object()


@dataclass
class WriterConfig:
    # 10k rows is ~2-5 MB of tuples: minutes of 1 s interval rows for hundreds of series, or
    # ~100 s of per-step rows at 100 steps/s
    queue_size: int = 10_000
    # a second between commits: rows are visible to the dashboard within ~1 s, and the disk sees
    # one transaction per second instead of one per step
    flush_every_s: float = 1.0
    max_batch: int = 2_000  # rows per transaction: bounds the time one commit holds the lock
    retention_every_s: float = 60.0  # deleting is cheap but needs index scans: once a minute
    periodic_every_s: float = 15.0  # alert evaluation period (a quarter of the default 60 s window)
    reopen_every_s: float = 30.0  # retry opening an unwritable store this often
    retention: store.Retention = store.Retention()

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "retention":
                continue
            # finite: flush_every_s=inf used to pass, then end the writer thread at its first queue wait
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ValueError(f"{f.name} must be a finite number > 0, got {f.name}={value!r}")


@dataclass
class WriterStats:
    """Counters of the writer's life; ``queued - written - dropped_*`` rows are in flight."""

    queued: int = 0
    written: int = 0
    dropped_full: int = 0
    dropped_errors: int = 0
    open_errors: int = 0
    write_errors: int = 0
    job_errors: int = 0
    batches: int = 0


class BackgroundWriter:
    """One thread writing batches of ``(table, row)`` into the SQLite store at ``path``."""

    def __init__(self, path: str | Path, config: WriterConfig | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.config = config or WriterConfig()
        self.stats = WriterStats()
        self.clock = clock
        self.jobs: list[Callable[[sqlite3.Connection, float], None]] = []
        self._queue: queue.Queue = queue.Queue(self.config.queue_size)
        self._reported: set[str] = set()
        self._conn: sqlite3.Connection | None = None
        self._next_open = 0.0
        self._flushed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"telemetry-writer:{self.path.name}", daemon=True)
        self._thread.start()
        _live.add(self)

    # -- generation side (any thread) -----------------------------------------------------------

    def put(self, table: str, row: tuple) -> None:
        """Queue one row; never blocks. Dropped and counted when the queue is full."""
        try:
            self._queue.put_nowait((table, row))
            self.stats.queued += 1
        except queue.Full:
            self.stats.dropped_full += 1
            self._report("full", "telemetry queue full (%d rows): rows are dropped and counted; "
                         "the store at %s is slower than the traffic", self.config.queue_size, self.path)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything queued so far is written (or dropped); False on timeout."""
        if not self._thread.is_alive():
            return False
        self._flushed.clear()
        self._queue.put(("__flush__", None))
        return self._flushed.wait(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, run the periodic jobs once more, stop the thread, then close the
        jobs that have a ``close`` (the alert evaluator: its webhook's bounded exit flush)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout_s)
        if self not in _live:
            return  # closed already
        _live.discard(self)
        for job in self.jobs:
            close = getattr(job, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - closing telemetry must not break the caller
                self.stats.job_errors += 1
                self._report(f"close:{getattr(job, '__name__', job)}", "telemetry job %s failed to close (%s)",
                             getattr(job, "__name__", job), _describe(exc))

    # -- writer thread --------------------------------------------------------------------------

    def _report(self, kind: str, message: str, *args) -> None:
        if kind not in self._reported:
            self._reported.add(kind)
            log.warning(message + " (reported once; further occurrences are only counted)", *args)

    def _connection(self) -> sqlite3.Connection | None:
        if self._conn is None and time.monotonic() >= self._next_open:
            try:
                self._conn = store.connect(self.path)
            except (OSError, sqlite3.Error) as exc:
                self.stats.open_errors += 1
                self._next_open = time.monotonic() + self.config.reopen_every_s
                self._report("open", "telemetry store %s cannot be opened (%s); telemetry rows are dropped, "
                             "generation continues", self.path, _describe(exc))
        return self._conn

    def _write(self, batch: list) -> None:
        if not batch:
            return
        conn = self._connection()
        if conn is None:
            self.stats.dropped_errors += len(batch)
        else:
            try:
                self.stats.written += store.write_batch(conn, batch)
                self.stats.batches += 1
            except Exception as exc:  # noqa: BLE001 - SQLite's errors, and a row SQLite cannot bind
                # (a traffic key with a lone surrogate from a request's JSON: UnicodeEncodeError; an int
                # past 64 bits: OverflowError) used to end this thread, and all telemetry, for good
                self.stats.write_errors += 1
                self.stats.dropped_errors += len(batch)
                self._report("write", "telemetry store %s write failed (%s); the batch is dropped, "
                             "generation continues", self.path, _describe(exc))
        batch.clear()

    def _run_jobs(self, retention: bool) -> None:
        conn = self._connection()
        if conn is None:
            return
        now = self.clock()
        todo = [lambda c, t: store.apply_retention(c, self.config.retention, t)] if retention else []
        for job in todo + self.jobs:
            try:
                job(conn, now)
            except Exception as exc:  # noqa: BLE001 - a failing job must not stop the writer
                self.stats.job_errors += 1
                self._report(f"job:{getattr(job, '__name__', job)}", "telemetry job %s failed (%s)",
                             getattr(job, "__name__", job), _describe(exc))

    def _run(self) -> None:
        cfg = self.config
        batch: list = []
        last_flush = last_retention = last_jobs = time.monotonic()
        while True:
            try:
                item = self._queue.get(timeout=cfg.flush_every_s)
            except queue.Empty:
                item = None
            now = time.monotonic()
            stop = item is _STOP
            flush_marker = isinstance(item, tuple) and item[0] == "__flush__"
            if item is not None and not stop and not flush_marker:
                batch.append(item)
            if stop or flush_marker or len(batch) >= cfg.max_batch or now - last_flush >= cfg.flush_every_s:
                self._write(batch)
                last_flush = now
                if stop or now - last_retention >= cfg.retention_every_s:
                    self._run_jobs(retention=True)
                    last_retention = last_jobs = now
                elif now - last_jobs >= cfg.periodic_every_s:
                    self._run_jobs(retention=False)
                    last_jobs = now
            if flush_marker:
                self._flushed.set()
            if stop:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                return


def _describe(exc: BaseException) -> str:
    """``OperationalError (SQLITE_FULL): database or disk is full``: the cause, with SQLite's code."""
    code = getattr(exc, "sqlite_errorname", None)
    return f"{type(exc).__name__}{f' ({code})' if code else ''}: {exc}"


_live: weakref.WeakSet[BackgroundWriter] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # a CLI run ends right after its request: write what it queued
    for writer in list(_live):
        writer.close(timeout_s=2.0)
