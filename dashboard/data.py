"""Every query the dashboard makes, over the telemetry store (``adaptive_spec/telemetry/SCHEMA.md``).

Pages only render; they get DataFrames from here. The store is opened once per path, read-only
(``access.open_reader``: ``mode=ro``, or ``immutable=1`` on read-only storage), and kept with
``st.cache_resource``; each query is cached with ``st.cache_data`` for ``TTL_S``, so a page that
refreshes itself every few seconds, in every open browser tab, costs one query per TTL.

The store holds counters, not rates. Queries sum counters in SQL per time bucket (the
``end_time`` / ``time`` indexes keep a window's scan short on a store of millions of rows), and
``rates`` derives the rates from the sums with the formulas of ``SCHEMA.md``::

    acceptance_rate         = accepted_tokens / draft_tokens
    mean_acceptance_length  = 1 + accepted_tokens / drafts
    mean_k                  = k_sum / steps
    decode_tokens_per_s     = emitted_tokens / (draft_s + verify_s)
    spec_off_share          = steps of drafter "none" / steps

A rate over nothing is None (shown as "-"), never NaN: "no drafts" is not "nothing accepted".
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from adaptive_spec.telemetry import access

TTL_S = 2.0  # as long as the Live page's refresh period: a refresh always sees new rows
PLAIN = "none"  # the drafter name of plain decoding steps (policies.outcome.PLAIN)
TABLES = ("requests", "intervals", "decisions", "alerts")


def store_path() -> Path:
    """``--telemetry-db PATH`` after ``streamlit run app.py --``, else the store telemetry writes by default."""
    args = sys.argv[1:]
    for i, arg in enumerate(args):
        if arg == "--telemetry-db" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--telemetry-db="):
            return Path(arg.split("=", 1)[1])
    from adaptive_spec.telemetry.spec import default_store_path

    return default_store_path()


@dataclass
class _Reader:
    conn: sqlite3.Connection
    lock: threading.Lock  # every browser session runs in its own thread; one cursor at a time


@st.cache_resource(show_spinner=False)
def _reader(path: str) -> _Reader:
    # a StoreError here is not cached: the next rerun tries again (the store may appear later)
    return _Reader(access.open_reader(path, TABLES), threading.Lock())


def check_store(path: str | Path) -> None:
    """Raise ``access.StoreError`` (``kind`` and a one-line ``reason``) unless the store is readable."""
    _reader(str(path))


def query(path: str | Path, sql: str, args: tuple = ()) -> pd.DataFrame:
    """One read-only query as a DataFrame; waits out a writer's lock up to ``access.LOCK_TIMEOUT_S``."""
    reader = _reader(str(path))
    deadline = time.monotonic() + access.LOCK_TIMEOUT_S
    while True:
        try:
            with reader.lock:
                cursor = reader.conn.execute(sql, args)
                columns = [d[0] for d in cursor.description]
                return pd.DataFrame([tuple(r) for r in cursor.fetchall()], columns=columns)
        except sqlite3.Error as exc:
            error = access.classify(path, exc)
            if error.kind == "locked" and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise error from None


def window_start(window_s: float, now: float | None = None) -> float:
    """The window's start, rounded to ``TTL_S`` so that reruns within one TTL hit the same cache entry."""
    now = time.time() if now is None else now
    return (now // TTL_S) * TTL_S - window_s


def bucket_for(window_s: float) -> float:
    """A bucket width giving ~60 points over the window, on a round number of seconds."""
    for width in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600):
        if window_s / width <= 90:
            return float(width)
    return 86400.0


def _where(model: str | None, keys: tuple[str, ...], prefix: str = "") -> tuple[str, tuple]:
    clauses, args = [], []
    if model is not None:
        clauses.append(f"{prefix}model = ?")
        args.append(model)
    if keys:
        clauses.append(f"{prefix}key IN ({', '.join('?' * len(keys))})")
        args.extend(keys)
    return "".join(f" AND {c}" for c in clauses), tuple(args)


# -- queries (cached) ------------------------------------------------------------------------------

@st.cache_data(ttl=TTL_S, show_spinner=False)
def series(path: str, since: float) -> pd.DataFrame:
    """(model, key, drafter) with steps in the window: the filters' choices."""
    return query(path, "SELECT model, key, drafter, SUM(steps) AS steps FROM intervals WHERE end_time >= ? "
                       "GROUP BY model, key, drafter ORDER BY model, key, drafter", (since,))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def interval_buckets(path: str, since: float, bucket_s: float, model: str | None = None,
                     keys: tuple[str, ...] = (), until: float | None = None) -> pd.DataFrame:
    """Step counters summed per (bucket start ``t``, key, drafter); intervals rows are additive."""
    where, args = _where(model, keys)
    if until is not None:
        where, args = where + " AND end_time <= ?", (*args, until)
    return query(path, f"""
        SELECT CAST(end_time / ? AS INTEGER) * ? AS t, key, drafter, SUM(steps) AS steps, SUM(drafts) AS drafts,
               SUM(draft_tokens) AS draft_tokens, SUM(accepted_tokens) AS accepted_tokens,
               SUM(emitted_tokens) AS emitted_tokens, SUM(k_sum) AS k_sum, SUM(draft_s) AS draft_s,
               SUM(verify_s) AS verify_s
        FROM intervals WHERE end_time >= ?{where} GROUP BY 1, key, drafter ORDER BY 1""",
                 (bucket_s, bucket_s, since, *args))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def position_acceptance(path: str, since: float, model: str | None = None, keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per (key, drafter, position): drafts that reached the position and those accepted there."""
    where, args = _where(model, keys, "i.")
    return query(path, f"""
        SELECT i.key AS key, i.drafter AS drafter, CAST(p.key AS INTEGER) AS position, SUM(p.value) AS proposed,
               SUM(COALESCE(json_extract(i.accepted_per_pos, '$[' || p.key || ']'), 0)) AS accepted
        FROM intervals AS i, json_each(i.proposed_per_pos) AS p
        WHERE i.end_time >= ? AND i.drafter != 'none'{where}
        GROUP BY i.key, i.drafter, p.key ORDER BY i.key, i.drafter, position""", (since, *args))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def requests(path: str, since: float, model: str | None = None, keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """Finished requests in the window with their latencies (``e2e_s = end_time - start_time``)."""
    where, args = _where(model, keys)
    return query(path, f"""
        SELECT end_time, key, main_drafter, ttft_s, tpot_s, end_time - start_time AS e2e_s, new_tokens,
               decode_s, error
        FROM requests WHERE end_time >= ?{where} ORDER BY end_time""", (since, *args))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def trace(path: str, since: float, model: str) -> pd.DataFrame:
    """Requests that finished in the window without error, as the simulator's replay needs them."""
    return query(path, "SELECT start_time, key, prompt_tokens, new_tokens FROM requests WHERE end_time >= ? "
                       "AND model = ? AND error IS NULL AND prompt_tokens >= 1 AND new_tokens >= 1 "
                       "ORDER BY start_time", (since, model))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def decisions(path: str, since: float, model: str | None = None, keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """Controller decisions in the window, plus each series' last decision of each kind before it
    (so that a state set before the window still shows at its start)."""
    where, args = _where(model, keys)
    inside = query(path, f"SELECT time, model, key, kind, drafter, value, previous, detail FROM decisions "
                         f"WHERE time >= ?{where} ORDER BY time, id", (since, *args))
    before = query(path, f"""
        SELECT d.time, d.model, d.key, d.kind, d.drafter, d.value, d.previous, d.detail FROM decisions AS d
        JOIN (SELECT model, key, kind, MAX(id) AS id FROM decisions WHERE time < ?{where} AND kind != 'collapse'
              GROUP BY model, key, kind) AS last ON d.id = last.id ORDER BY d.time""", (since, *args))
    return pd.concat([before, inside], ignore_index=True) if len(before) else inside


@st.cache_data(ttl=TTL_S, show_spinner=False)
def alerts(path: str, since: float) -> pd.DataFrame:
    """Alerts firing now, and those resolved since ``since``; firing first, newest first."""
    return query(path, "SELECT rule, model, key, drafter, state, fired_at, resolved_at, value, threshold, message, "
                       "updated_at FROM alerts WHERE state = 'firing' OR resolved_at >= ? "
                       "ORDER BY state != 'firing', fired_at DESC", (since,))


# -- rates, derived on read ------------------------------------------------------------------------

def ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den else None


def rates(counters: pd.DataFrame | pd.Series) -> dict:
    """The rates of a set of interval counters (summed over its rows when a DataFrame)."""
    c = counters.sum(numeric_only=True) if isinstance(counters, pd.DataFrame) else counters
    if not len(c):
        return dict(steps=0, acceptance_rate=None, mean_acceptance_length=None, mean_k=None,
                    decode_tokens_per_s=None)
    return dict(
        steps=int(c["steps"]),
        acceptance_rate=ratio(c["accepted_tokens"], c["draft_tokens"]),
        mean_acceptance_length=1 + c["accepted_tokens"] / c["drafts"] if c["drafts"] else None,
        mean_k=ratio(c["k_sum"], c["steps"]),
        decode_tokens_per_s=ratio(c["emitted_tokens"], c["draft_s"] + c["verify_s"]),
    )


def rate_series(buckets: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Rates per bucket ``t`` and the ``by`` columns (rates over nothing left out, not NaN)."""
    if buckets.empty:
        return pd.DataFrame(columns=["t", "time", *by, "acceptance_rate", "mean_acceptance_length", "mean_k"])
    g = buckets.groupby(["t", *by], as_index=False).sum(numeric_only=True)
    g["acceptance_rate"] = g["accepted_tokens"].where(g["draft_tokens"] > 0) / g["draft_tokens"].where(g["draft_tokens"] > 0)
    g["mean_acceptance_length"] = 1 + g["accepted_tokens"].where(g["drafts"] > 0) / g["drafts"].where(g["drafts"] > 0)
    g["mean_k"] = g["k_sum"] / g["steps"].where(g["steps"] > 0)
    g["time"] = pd.to_datetime(g["t"], unit="s")
    return g


def percentile(values, q: float) -> float | None:
    """Nearest-rank percentile, as ``telemetry summary`` computes it (a measured value, or None)."""
    from adaptive_spec.telemetry.summary import percentile as nearest_rank

    return nearest_rank([float(v) for v in values if v is not None and v == v], q)
