"""Every query the dashboard makes, over the telemetry store (``adaptive_spec/telemetry/SCHEMA.md``).

Pages only render; they get DataFrames from here. The store is opened once per path, read-only
(``access.open_reader``: ``mode=ro``, or ``immutable=1`` on read-only storage), and kept with
``st.cache_resource``; each query is cached with ``st.cache_data`` for ``TTL_S``, so a page that
refreshes itself every few seconds, in every open browser tab, costs one query per TTL.

The store holds counters, not rates. Queries sum counters in SQL per time bucket, and ``rates``
derives the rates from the sums with the formulas of ``SCHEMA.md``::

    acceptance_rate         = accepted_tokens / draft_tokens
    mean_acceptance_length  = 1 + accepted_tokens / drafts
    mean_k                  = k_sum / steps
    decode_tokens_per_s     = emitted_tokens / (draft_s + verify_s)
    spec_off_share          = steps of drafter "none" / steps

A window is read from the store's rollups (``adaptive_spec/telemetry/rollup.py``: the same
counters summed per minute, hour and day, kept by triggers in the writer's transactions) for its
whole minutes, hours and days, and from the raw rows only for the partial minutes at its ends
(``rollup.cover``): a week costs a few thousand rollup rows instead of a million raw ones. Latency
percentiles come from the request rows while a window holds at most
``EXACT_PERCENTILES_MAX_REQUESTS`` of them (exact), beyond that from the rollups' histograms
(within 0.5%, ``rollup.RESOLUTION``). A store written before rollups (schema version 2, until a
writer of this version opens it) is read from its raw rows only.

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

from adaptive_spec.telemetry import access, rollup

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


def has_rollups(path: str | Path) -> bool:
    """Whether the store keeps rollups (``rollup.py``); one written before them is read raw until a
    writer of this version opens it (and builds them)."""
    names = query(path, f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                        f"({', '.join('?' * len(rollup.TABLES))})", rollup.TABLES)
    return len(names) == len(rollup.TABLES)


def _cover(path: str, since: float, until: float | None = None, bucket_s: float | None = None) -> rollup.Cover:
    """The window as rollup blocks and raw rows; blocks only of widths that divide ``bucket_s``
    (a block must fall in one time bucket), and none on a store without rollups."""
    widths = tuple(w for w in rollup.WIDTHS if bucket_s is None or bucket_s % w == 0) if has_rollups(path) else ()
    return rollup.cover(since, until, widths)


def _union(cover: rollup.Cover, rollup_select: str, raw_selects: list[str], args: tuple = (),
           time_column: str = "end_time") -> tuple[str, list]:
    """``UNION ALL`` of ``rollup_select`` over each block and the ``raw_selects`` over each raw part.

    Each SELECT has a ``{where}`` slot for the part's condition, followed by the filter whose
    arguments are ``args``.
    """
    parts, params = [], []
    for block in cover.blocks:
        where, block_args = rollup.block_where(block)
        parts.append(rollup_select.format(where=where))
        params += [*block_args, *args]
    for raw in cover.raw:
        where, raw_args = raw.where(time_column)
        for select in raw_selects:
            parts.append(select.format(where=where))
            params += [*raw_args, *args]
    return " UNION ALL ".join(parts), params


# -- queries (cached) ------------------------------------------------------------------------------

COUNTERS = ("steps", "drafts", "draft_tokens", "accepted_tokens", "emitted_tokens", "k_sum", "draft_s", "verify_s")
# up to this many requests in a window, latency percentiles come from the rows themselves (exact;
# reading 10,000 rows takes ~20 ms); beyond, from the rollups' histograms (within rollup.RESOLUTION)
EXACT_PERCENTILES_MAX_REQUESTS = 10_000


@st.cache_data(ttl=TTL_S, show_spinner=False)
def series(path: str, since: float) -> pd.DataFrame:
    """(model, key, drafter) with steps in the window: the filters' choices."""
    cover = _cover(path, since)
    union, args = _union(cover, "SELECT model, key, drafter, steps FROM rollup_intervals WHERE {where}",
                         ["SELECT model, key, drafter, steps FROM intervals WHERE {where}"])
    return query(path, f"SELECT model, key, drafter, SUM(steps) AS steps FROM ({union}) "
                       "GROUP BY model, key, drafter ORDER BY model, key, drafter", tuple(args))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def interval_buckets(path: str, since: float, bucket_s: float, model: str | None = None,
                     keys: tuple[str, ...] = (), until: float | None = None) -> pd.DataFrame:
    """Step counters summed per (bucket start ``t``, key, drafter); intervals rows are additive.

    Whole minutes, hours and days come from the rollups when the bucket is a multiple of them;
    a raw row's bucket is then taken from its minute, as the rollups take it.
    """
    bucket_s = float(bucket_s)
    where, args = _where(model, keys)
    cover = _cover(path, since, until, bucket_s)
    raw_time = rollup.MINUTE_SQL if cover.blocks else "end_time"
    columns = ", ".join(("key", "drafter") + COUNTERS)
    union, params = _union(
        cover, f"SELECT CAST(start / {bucket_s!r} AS INTEGER) * {bucket_s!r} AS t, {columns} "
               f"FROM rollup_intervals WHERE {{where}}{where}",
        [f"SELECT CAST({raw_time} / {bucket_s!r} AS INTEGER) * {bucket_s!r} AS t, {columns} "
         f"FROM intervals WHERE {{where}}{where}"], args)
    sums = ", ".join(f"SUM({c}) AS {c}" for c in COUNTERS)
    return query(path, f"SELECT t, key, drafter, {sums} FROM ({union}) GROUP BY t, key, drafter "
                       "ORDER BY t, key, drafter", tuple(params))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def position_acceptance(path: str, since: float, model: str | None = None, keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per (key, drafter, position): drafts that reached the position and those accepted there."""
    where, args = _where(model, keys)
    raw_where, _ = _where(model, keys, "i.")
    union, params = _union(
        _cover(path, since),
        f"SELECT key, drafter, position, proposed, accepted FROM rollup_positions "
        f"WHERE {{where}} AND drafter != 'none'{where}",
        [f"SELECT i.key AS key, i.drafter AS drafter, CAST(p.key AS INTEGER) AS position, p.value AS proposed, "
         f"COALESCE(json_extract(i.accepted_per_pos, '$[' || p.key || ']'), 0) AS accepted "
         f"FROM intervals AS i, json_each(i.proposed_per_pos) AS p WHERE {{where}} AND i.drafter != 'none'{raw_where}"],
        args, time_column="i.end_time")
    return query(path, f"SELECT key, drafter, position, SUM(proposed) AS proposed, SUM(accepted) AS accepted "
                       f"FROM ({union}) GROUP BY key, drafter, position ORDER BY key, drafter, position",
                 tuple(params))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def request_stats(path: str, since: float, model: str | None = None, keys: tuple[str, ...] = (),
                  exact_max: int = EXACT_PERCENTILES_MAX_REQUESTS) -> dict:
    """Requests that finished in the window: ``requests``, ``errors``, and of those without error
    ``new_tokens``, ``busy_s`` (TTFT + decode seconds) and ``percentiles[metric][q]`` for
    ``ttft_s``, ``tpot_s``, ``e2e_s`` (``end_time - start_time``) and q in 50, 95 (None: no value).

    Percentiles are nearest-rank: from the rows when the window holds at most ``exact_max``
    requests (``exact`` True), else from the latency histograms, within ``rollup.RESOLUTION``.
    """
    where, args = _where(model, keys)
    cover = _cover(path, since)
    ok = "error IS NULL"
    union, params = _union(
        cover, f"SELECT rows AS requests, errors, new_tokens, busy_s FROM rollup_requests WHERE {{where}}{where}",
        [f"SELECT 1 AS requests, error IS NOT NULL AS errors, CASE WHEN {ok} THEN COALESCE(new_tokens, 0) ELSE 0 "
         f"END AS new_tokens, CASE WHEN {ok} THEN COALESCE(ttft_s, 0) + COALESCE(decode_s, 0) ELSE 0.0 END AS busy_s "
         f"FROM requests WHERE {{where}}{where}"], args)
    (requests, errors, new_tokens, busy_s), = query(
        path, f"SELECT SUM(requests), SUM(errors), SUM(new_tokens), SUM(busy_s) FROM ({union})",
        tuple(params)).itertuples(index=False)
    stats = dict(requests=int(requests or 0), errors=int(errors or 0), new_tokens=int(new_tokens or 0),
                 busy_s=float(busy_s or 0.0), exact=not cover.blocks or (requests or 0) <= exact_max)
    latencies = {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "e2e_s": "end_time - start_time"}
    if stats["exact"]:
        rows = query(path, f"SELECT ttft_s, tpot_s, end_time - start_time AS e2e_s FROM requests "
                           f"WHERE end_time >= ?{where} AND {ok}", (since, *args))
        stats["percentiles"] = {m: {q: percentile(rows[m], q) for q in (50, 95)} for m in latencies}
        return stats
    union, params = _union(
        cover, f"SELECT metric, bucket, count FROM rollup_latency WHERE {{where}}{where}",
        [f"SELECT '{m}' AS metric, {rollup.latency_bucket_sql(v)} AS bucket, 1 AS count FROM requests "
         f"WHERE {{where}}{where} AND {ok} AND {v} IS NOT NULL" for m, v in latencies.items()], args)
    counts: dict[str, dict[int, int]] = {m: {} for m in latencies}
    for metric, bucket, count in query(path, f"SELECT metric, bucket, SUM(count) FROM ({union}) GROUP BY metric, bucket",
                                       tuple(params)).itertuples(index=False):
        counts[metric][int(bucket)] = int(count)
    stats["percentiles"] = {m: {q: rollup.histogram_percentile(counts[m], q) for q in (50, 95)} for m in latencies}
    return stats


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
def gauges(path: str, since: float, model: str) -> pd.DataFrame:
    """The engine's sampled gauges in the window (``time``, ``name``, ``value``), oldest first; empty
    for a store written before the gauges table existed (schema 3)."""
    exists = query(path, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'gauges'")
    if exists.empty:
        return pd.DataFrame(columns=["time", "name", "value"])
    return query(path, "SELECT time, name, value FROM gauges WHERE time >= ? AND model = ? ORDER BY time, id",
                 (since, model))


CAP_COLUMNS = ("cap_none", "cap_kept", "cap_shortened", "cap_plain")  # the batch cap's calls (SCHEMA.md)


def _has_batches(path: str) -> bool:
    return not query(path, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'batch_intervals'").empty


@st.cache_data(ttl=TTL_S, show_spinner=False)
def batch_by_rows(path: str, since: float, model: str) -> pd.DataFrame:
    """The batched engine's decode forwards in the window, by rows in the forward: ``forwards``,
    ``row_steps``, ``drafting`` (row-steps that verified a draft), ``seconds``, ``cut_tokens``,
    ``prompt_tokens`` and the cap's calls; empty for a model never served batched, or a store
    written before the table existed (schema 4)."""
    columns = ["rows", "forwards", "row_steps", "drafting", "seconds", "cut_tokens", "prompt_tokens", *CAP_COLUMNS]
    if not _has_batches(path):
        return pd.DataFrame(columns=columns)
    caps = ", ".join(f"SUM({c}) AS {c}" for c in CAP_COLUMNS)
    return query(path, "SELECT rows, SUM(forwards) AS forwards, SUM(rows * forwards) AS row_steps, SUM(drafting) AS drafting, "
                       "SUM(seconds) AS seconds, SUM(cut_tokens) AS cut_tokens, SUM(prompt_tokens) AS prompt_tokens, "
                       f"{caps} FROM batch_intervals WHERE end_time >= ? AND model = ? GROUP BY rows ORDER BY rows",
                 (since, model))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def batch_buckets(path: str, since: float, bucket_s: float, model: str) -> pd.DataFrame:
    """The same forwards per time bucket ``t`` (its start): ``forwards``, ``row_steps``, ``drafting``."""
    if not _has_batches(path):
        return pd.DataFrame(columns=["t", "forwards", "row_steps", "drafting"])
    return query(path, "SELECT CAST(end_time / ? AS INTEGER) * ? AS t, SUM(forwards) AS forwards, "
                       "SUM(rows * forwards) AS row_steps, SUM(drafting) AS drafting FROM batch_intervals "
                       "WHERE end_time >= ? AND model = ? GROUP BY t ORDER BY t", (bucket_s, bucket_s, since, model))


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
