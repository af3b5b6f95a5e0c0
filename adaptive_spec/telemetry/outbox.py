"""The webhook's outbox: alert notifications kept in the store until a receiver takes them.

A transactional outbox: the alert evaluator writes the notification in the same transaction as
the alert's change of state (``enqueue`` on its connection), so a transition is either recorded
*and* owed to the receiver, or neither. The sender (``webhook.WebhookNotifier``) then works
through the ``notifications`` table, oldest first, one receiver URL at a time::

    pending --2xx--> delivered
       |
       +--error, attempts <= retries--> pending (next_attempt_at = now + backoff * 2**(attempts-1))
       +--error, attempts >  retries--> failed  (given up, logged)

A process that exits (or dies) leaves its pending rows behind; the next one that opens the store
with the same webhook sends them. Delivery is at least once: a receiver may see a payload twice
if the process stops between the 2xx and recording it.

One row per evaluation's batch of transitions (one Alertmanager-style payload, ``webhook.payload``);
``summary`` names its alerts for the log line of a give-up.
"""

from __future__ import annotations

import json
import sqlite3


def summarize(transitions: list) -> str:
    """``acceptance_collapse firing m/k/ngram, ...``: which alerts a payload carries."""
    return ", ".join(f"{t.rule} {t.state} {'/'.join(x for x in (t.model, t.key, t.drafter) if x)}"
                     for t in transitions)


def pending_count(conn: sqlite3.Connection, url: str) -> int:
    return conn.execute("SELECT COUNT(*) FROM notifications WHERE url = ? AND state = 'pending'", (url,)).fetchone()[0]


def enqueue(conn: sqlite3.Connection, url: str, body: dict, summary: str, now: float, limit: int) -> bool:
    """Add one pending notification, in the caller's transaction; False (nothing added) when
    ``limit`` are already pending for ``url``: the receiver has been gone for that long."""
    if pending_count(conn, url) >= limit:
        return False
    conn.execute("INSERT INTO notifications (url, state, created_at, updated_at, next_attempt_at, attempts, summary, "
                 "payload) VALUES (?, 'pending', ?, ?, ?, 0, ?, ?)", (url, now, now, now, summary, json.dumps(body)))
    return True


def head(conn: sqlite3.Connection, url: str) -> dict | None:
    """The oldest pending notification for ``url``. Strict order: a resolved alert must not
    reach the receiver before the firing it ends, so a later one waits for the head."""
    row = conn.execute("SELECT * FROM notifications WHERE url = ? AND state = 'pending' ORDER BY id LIMIT 1",
                       (url,)).fetchone()
    return None if row is None else dict(row)


def claim(conn: sqlite3.Connection, row: dict, now: float, lease_s: float) -> bool:
    """Take ``row`` for one attempt: pushes its next attempt ``lease_s`` ahead, so that another
    process on the same store skips it meanwhile, and a sender that dies mid-attempt leaves it
    due again after the lease. False when it is not due or another process took it first."""
    return conn.execute("UPDATE notifications SET next_attempt_at = ?, updated_at = ? WHERE id = ? AND state = 'pending' "
                        "AND next_attempt_at <= ?", (now + lease_s, now, row["id"], now)).rowcount == 1


def record_delivered(conn: sqlite3.Connection, row_id: int, attempts: int, now: float) -> None:
    conn.execute("UPDATE notifications SET state = 'delivered', attempts = ?, delivered_at = ?, updated_at = ?, "
                 "last_error = NULL WHERE id = ?", (attempts, now, now, row_id))


def record_failure(conn: sqlite3.Connection, row_id: int, attempts: int, error: str, now: float,
                   retry_at: float | None) -> None:
    """One more failed attempt; ``retry_at`` None gives the notification up."""
    if retry_at is None:
        conn.execute("UPDATE notifications SET state = 'failed', attempts = ?, last_error = ?, updated_at = ? "
                     "WHERE id = ?", (attempts, error, now, row_id))
    else:
        conn.execute("UPDATE notifications SET attempts = ?, last_error = ?, updated_at = ?, next_attempt_at = ? "
                     "WHERE id = ?", (attempts, error, now, retry_at, row_id))
