"""The embedded telemetry store: one SQLite file that a dashboard and the simulator can read.

Tables (the full schema, with every column's meaning, is in ``SCHEMA.md`` next to this file):

- ``requests``  one row per generation: model, traffic key, policy, token counts, latency
  (``ttft_s``, ``tpot_s``), speculation counters and the drafters used.
- ``intervals`` per (model, key, drafter) and aggregation interval: additive step counters
  (``steps``, ``drafts``, ``draft_tokens``, ``accepted_tokens``, per-position counts, seconds).
  Several rows may share a series and an interval (one per request that ended in it): readers
  *sum* them, they never pick one.
- ``steps``     optional, one row per decode step (``StepOutcome`` fields) for fitting cost models.
- ``decisions`` controller decisions seen from the outside: speculation on/off, drafter switches,
  acceptance-collapse events raised by the policy's change detector.
- ``alerts``    alert lifecycles written by ``alerts.AlertEvaluator``: firing -> resolved.
- ``notifications`` the webhook's outbox (``outbox.py``): a payload per batch of alert
  transitions, pending until the receiver answers 2xx, kept across restarts.
- ``rollup_*``  the ``intervals`` and ``requests`` sums per minute, hour and day, kept by triggers
  in the same transaction as the rows (``rollup.py``): what lets the dashboard read a week fast.

Rates are never stored, only counters; readers derive them (vLLM's definitions)::

    acceptance_rate        = accepted_tokens / draft_tokens
    mean_acceptance_length = 1 + accepted_tokens / drafts
    tokens_per_s (decode)  = emitted_tokens / (draft_s + verify_s)

Writing is the background writer's job (``writer.py``): only it holds a connection for writing,
and it writes in batches (one transaction per flush, WAL journal, ``synchronous=NORMAL``: no
fsync per row). Reading is safe from any process while a writer runs (WAL). Opening, and the
errors of opening (read-only storage, locks, files that are not a store), is ``access.py``'s job.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from adaptive_spec.telemetry import access, rollup

# 2: the notifications table; 3: the rollups; 4: the gauges table; 5: the batch_intervals table (an
# older store gains them when a writer opens it)
SCHEMA_VERSION = 5

# column order is the order of the tuples the recorder queues; keep both in step
COLUMNS: dict[str, tuple[str, ...]] = {
    "requests": (
        "run_id", "request_id", "model", "key", "policy", "start_time", "end_time", "prompt_tokens",
        "new_tokens", "max_new_tokens", "temperature", "finish_reason", "error", "ttft_s", "decode_s",
        "tpot_s", "steps", "drafts", "draft_tokens", "accepted_tokens", "drafters", "main_drafter",
    ),
    "intervals": (
        "run_id", "model", "key", "drafter", "start_time", "end_time", "steps", "drafts", "draft_tokens",
        "accepted_tokens", "emitted_tokens", "k_sum", "draft_s", "verify_s", "proposed_per_pos",
        "accepted_per_pos",
    ),
    "steps": (
        "run_id", "request_id", "time", "model", "key", "drafter", "k", "proposed", "accepted", "emitted",
        "draft_s", "verify_s", "context_len",
    ),
    "decisions": ("run_id", "time", "model", "key", "kind", "drafter", "value", "previous", "detail"),
    # what the engine holds besides the model (the suffix drafter's history: tokens, bytes), sampled
    "gauges": ("run_id", "time", "model", "name", "value"),
    # the batched engine's decode forwards, summed per (model, rows in the forward) and interval
    "batch_intervals": (
        "run_id", "model", "rows", "start_time", "end_time", "forwards", "drafting", "seconds", "cut_tokens",
        "prompt_tokens", "cap_none", "cap_kept", "cap_shortened", "cap_plain",
    ),
}

# the raw tables, then the rollups and their triggers (``rollup.py``); ``connect`` runs them in one
# transaction: a store is created whole or not at all (statement by statement, a full disk left
# stores with only some of their tables)
_DDL = [
    """CREATE TABLE IF NOT EXISTS schema_info (name TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, request_id INTEGER NOT NULL, model TEXT NOT NULL,
    key TEXT NOT NULL, policy TEXT, start_time REAL NOT NULL, end_time REAL NOT NULL,
    prompt_tokens INTEGER, new_tokens INTEGER, max_new_tokens INTEGER, temperature REAL,
    finish_reason TEXT, error TEXT, ttft_s REAL, decode_s REAL, tpot_s REAL, steps INTEGER,
    drafts INTEGER, draft_tokens INTEGER, accepted_tokens INTEGER, drafters TEXT, main_drafter TEXT)""",
    """CREATE INDEX IF NOT EXISTS requests_time ON requests (end_time)""",
    """CREATE TABLE IF NOT EXISTS intervals (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, model TEXT NOT NULL, key TEXT NOT NULL,
    drafter TEXT NOT NULL, start_time REAL NOT NULL, end_time REAL NOT NULL, steps INTEGER NOT NULL,
    drafts INTEGER NOT NULL, draft_tokens INTEGER NOT NULL, accepted_tokens INTEGER NOT NULL,
    emitted_tokens INTEGER NOT NULL, k_sum INTEGER NOT NULL, draft_s REAL NOT NULL, verify_s REAL NOT NULL,
    proposed_per_pos TEXT NOT NULL, accepted_per_pos TEXT NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS intervals_time ON intervals (end_time)""",
    """CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, request_id INTEGER NOT NULL, time REAL NOT NULL,
    model TEXT NOT NULL, key TEXT NOT NULL, drafter TEXT NOT NULL, k INTEGER NOT NULL,
    proposed INTEGER NOT NULL, accepted INTEGER NOT NULL, emitted INTEGER NOT NULL, draft_s REAL NOT NULL,
    verify_s REAL NOT NULL, context_len INTEGER NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS steps_time ON steps (time)""",
    """CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, time REAL NOT NULL, model TEXT NOT NULL, key TEXT NOT NULL,
    kind TEXT NOT NULL, drafter TEXT, value TEXT, previous TEXT, detail TEXT)""",
    """CREATE INDEX IF NOT EXISTS decisions_time ON decisions (time)""",
    """CREATE TABLE IF NOT EXISTS gauges (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, time REAL NOT NULL, model TEXT NOT NULL, name TEXT NOT NULL,
    value REAL NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS gauges_time ON gauges (time)""",
    """CREATE TABLE IF NOT EXISTS batch_intervals (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, model TEXT NOT NULL, rows INTEGER NOT NULL,
    start_time REAL NOT NULL, end_time REAL NOT NULL, forwards INTEGER NOT NULL, drafting INTEGER NOT NULL,
    seconds REAL NOT NULL, cut_tokens INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, cap_none INTEGER NOT NULL,
    cap_kept INTEGER NOT NULL, cap_shortened INTEGER NOT NULL, cap_plain INTEGER NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS batch_intervals_time ON batch_intervals (end_time)""",
    """CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY, rule TEXT NOT NULL, model TEXT NOT NULL, key TEXT NOT NULL, drafter TEXT NOT NULL,
    state TEXT NOT NULL, fired_at REAL NOT NULL, resolved_at REAL, value REAL, threshold REAL,
    message TEXT, updated_at REAL NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS alerts_state ON alerts (state, rule)""",
    """CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY, url TEXT NOT NULL, state TEXT NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, next_attempt_at REAL NOT NULL, attempts INTEGER NOT NULL,
    delivered_at REAL, last_error TEXT, summary TEXT NOT NULL, payload TEXT NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS notifications_due ON notifications (url, state, id)""",
]


# the time column retention ages each table by
TIME_COLUMN = {"requests": "end_time", "intervals": "end_time", "steps": "time", "decisions": "time", "gauges": "time",
               "batch_intervals": "end_time", "alerts": "updated_at", "notifications": "updated_at"}
# rows retention never deletes: an alert while it fires, a notification until it is delivered or
# given up (their number is bounded by the webhook's queue_size per receiver)
KEEP = {"alerts": "state = 'firing'", "notifications": "state = 'pending'"}


@dataclass(frozen=True)
class Retention:
    """How much the store keeps. Both limits apply; ``None`` switches one off."""

    # a week covers the dashboard's longest default view and a weekly capacity review
    max_age_s: float | None = 7 * 24 * 3600.0
    # per table; ~1M interval rows is ~11 days of 1 s rows for one busy series, ~150 MB of SQLite
    max_rows: int | None = 1_000_000

    def __post_init__(self) -> None:
        if self.max_age_s is not None and not self.max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0 or None, got max_age_s={self.max_age_s!r}")
        if self.max_rows is not None and (isinstance(self.max_rows, bool) or not isinstance(self.max_rows, int)
                                          or self.max_rows < 1):
            raise ValueError(f"max_rows must be an integer >= 1 or None, got max_rows={self.max_rows!r}")


def connect(path: str | Path, timeout_s: float = 0.5, create: bool = True) -> sqlite3.Connection:
    """Open (and with ``create``, initialise) the store; a short busy timeout so a lock never stalls.

    ``create``: read-write, creating the file and directories privately (``access.open_writer``);
    otherwise read-only (``access.open_reader``), raising ``access.StoreError`` on a missing,
    foreign or incomplete store. ``check_same_thread=False``: the writer opens it once and keeps
    it in its own thread; the alert evaluator and the retention job run in that same thread.
    """
    if not create:
        return access.open_reader(path)
    conn = access.open_writer(path, timeout_s)
    try:
        conn.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor the writer them
        conn.execute("PRAGMA synchronous=NORMAL")  # fsync at checkpoints only, not per transaction
        _initialise(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _initialise(conn: sqlite3.Connection) -> None:
    """Create what is missing and bring an older store up to ``SCHEMA_VERSION``, in one transaction.

    A store without rollups (written before version 3) has them built from its raw rows here
    (``rollup.rebuild``), in the transaction that creates their triggers: from then on every write
    keeps them, and no reader ever sees rollups that disagree with the rows. Building takes seconds
    per million raw rows, once; meanwhile other writers' batches wait out their busy timeout and are
    dropped and counted, as for any lock.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        had_rollups = rollup.present(conn)
        for statement in _DDL + rollup.DDL:
            conn.execute(statement)
        if not had_rollups:
            rollup.rebuild(conn)
        conn.execute("INSERT OR IGNORE INTO schema_info VALUES ('version', ?)", (str(SCHEMA_VERSION),))
        # never lowered: an older writer on a newer store leaves the newer version in place
        conn.execute("UPDATE schema_info SET value = ? WHERE name = 'version' AND CAST(value AS INTEGER) < ?",
                     (str(SCHEMA_VERSION), SCHEMA_VERSION))
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction without hiding why it failed.

    On some errors (a full disk, an I/O error) SQLite has already rolled the transaction back
    itself; a ROLLBACK then raises "cannot rollback - no transaction is active", which used to
    replace the real cause in the log. So: only when one is open, and never raising.
    """
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the caller re-raises the error that made the transaction fail


def write_batch(conn: sqlite3.Connection, batch: list[tuple[str, tuple]]) -> int:
    """Insert ``(table, row)`` pairs in one transaction; returns the rows written."""
    by_table: dict[str, list[tuple]] = {}
    for table, row in batch:
        by_table.setdefault(table, []).append(row)
    conn.execute("BEGIN")
    try:
        for table, rows in by_table.items():
            cols = COLUMNS[table]
            conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    return len(batch)


def apply_retention(conn: sqlite3.Connection, retention: Retention, now: float | None = None) -> int:
    """Delete rows older than ``max_age_s`` and beyond ``max_rows`` per table (oldest first).

    Firing alerts and pending notifications are kept whatever their age (``KEEP``): an alert must
    not vanish while it still holds, nor a notification before it was delivered or given up.
    Returns the number of rows deleted.
    """
    now = time.time() if now is None else now
    deleted = 0
    for table, column in TIME_COLUMN.items():
        keep = f" AND NOT ({KEEP[table]})" if table in KEEP else ""
        if retention.max_age_s is not None:
            deleted += conn.execute(f"DELETE FROM {table} WHERE {column} < ?{keep}",
                                    (now - retention.max_age_s,)).rowcount
        if retention.max_rows is not None:
            # ids grow with insertion order, so the newest max_rows rows have the highest ids
            deleted += conn.execute(
                f"DELETE FROM {table} WHERE id <= (SELECT id FROM {table} ORDER BY id DESC LIMIT 1 OFFSET ?)"
                f"{keep}", (retention.max_rows,)).rowcount
    return deleted


# -- reading (dashboard, simulator, CLI) ---------------------------------------------------------

def _read(path: str | Path, table: str, since: float | None, until: float | None, where: str = "",
          params: tuple = ()) -> list[dict]:
    """Rows of ``table``, read-only: ``access.StoreError`` (one line) when the store is unusable."""
    column = TIME_COLUMN[table]
    clauses, args = [], []
    if since is not None:
        clauses.append(f"{column} >= ?")
        args.append(since)
    if until is not None:
        clauses.append(f"{column} <= ?")
        args.append(until)
    if where:
        clauses.append(where)
        args.extend(params)
    sql = f"SELECT * FROM {table}" + (" WHERE " + " AND ".join(clauses) if clauses else "") + f" ORDER BY {column}, id"
    return access.read_query(path, sql, args, (table,))


def read_requests(path: str | Path, since: float | None = None, until: float | None = None) -> list[dict]:
    """Request rows with ``end_time`` in [since, until], oldest first, as dicts keyed by column."""
    return _read(path, "requests", since, until)


def read_intervals(path: str | Path, since: float | None = None, until: float | None = None) -> list[dict]:
    """Interval rows (additive counters; sum rows of one series and interval). Per-position columns
    are JSON lists: ``proposed_per_pos[i]`` drafts that reached position i, ``accepted_per_pos[i]``
    those accepted there (vLLM's per-position counter)."""
    return _read(path, "intervals", since, until)


def read_steps(path: str | Path, since: float | None = None, until: float | None = None) -> list[dict]:
    """Per-step rows (present only when the store was written with ``steps=1``)."""
    return _read(path, "steps", since, until)


def read_batch_intervals(path: str | Path, since: float | None = None, until: float | None = None) -> list[dict]:
    """The batched engine's forwards, summed per (model, rows in the forward) and interval (none from
    a store written before version 5, which has no such table)."""
    tables = access.read_query(path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'batch_intervals'")
    return _read(path, "batch_intervals", since, until) if tables else []


def read_decisions(path: str | Path, since: float | None = None, until: float | None = None) -> list[dict]:
    """Controller decisions: ``kind`` is ``speculation`` (value on/off), ``drafter`` (value: the new
    drafter, previous: the old one) or ``collapse`` (detail: the policy's event as JSON)."""
    return _read(path, "decisions", since, until)


def read_alerts(path: str | Path, since: float | None = None, state: str | None = None) -> list[dict]:
    """Alert rows updated since ``since``; ``state`` filters to ``firing`` or ``resolved``."""
    if state is not None and state not in ("firing", "resolved"):
        raise ValueError(f"state must be 'firing', 'resolved' or None, got state={state!r}")
    return _read(path, "alerts", since, None, "state = ?" if state else "", (state,) if state else ())
