"""Rollups: they equal the raw rows' sums (written by the real engine, after retention, on a store
migrated from before them), a window's cover counts every row once, and a latency histogram keeps
every value within its stated resolution."""

import json
import math
import random
import sqlite3
import time
from collections import defaultdict

import pytest

from adaptive_spec.telemetry import rollup, store
from adaptive_spec.telemetry.store import read_intervals, read_requests
from adaptive_spec.telemetry.writer import BackgroundWriter
from dashboard_testkit import copy_store, record_store, strip_rollups

FLOATS = ("draft_s", "verify_s", "busy_s")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return record_store(tmp_path_factory.mktemp("recorded")).final


# -- the reference: the raw rows summed in Python, as SCHEMA.md defines the rollups ----------------

def minute(end_time: float) -> int:
    return int(end_time / 60) * 60


def expected(path) -> dict[str, dict[tuple, dict]]:
    """Every rollup table's rows, computed from the raw rows without SQL."""
    tables: dict[str, dict[tuple, dict]] = {t: defaultdict(lambda: defaultdict(float)) for t in rollup.TABLES}
    for row in read_intervals(path):
        for width in rollup.WIDTHS:
            start = minute(row["end_time"]) // width * width
            series = (width, start, row["model"], row["key"], row["drafter"])
            sums = tables["rollup_intervals"][series]
            sums["rows"] += 1
            for column in ("steps", "drafts", "draft_tokens", "accepted_tokens", "emitted_tokens", "k_sum",
                           "draft_s", "verify_s"):
                sums[column] += row[column]
            proposed, accepted = json.loads(row["proposed_per_pos"]), json.loads(row["accepted_per_pos"])
            for position, count in enumerate(proposed):
                sums = tables["rollup_positions"][(*series, position)]
                sums["rows"] += 1
                sums["proposed"] += count
                sums["accepted"] += accepted[position] if position < len(accepted) else 0
    for row in read_requests(path):
        ok = row["error"] is None
        for width in rollup.WIDTHS:
            series = (width, minute(row["end_time"]) // width * width, row["model"], row["key"])
            sums = tables["rollup_requests"][series]
            sums["rows"] += 1
            sums["errors"] += not ok
            sums["new_tokens"] += (row["new_tokens"] or 0) if ok else 0
            sums["busy_s"] += ((row["ttft_s"] or 0) + (row["decode_s"] or 0)) if ok else 0
            values = {"ttft_s": row["ttft_s"], "tpot_s": row["tpot_s"], "e2e_s": row["end_time"] - row["start_time"]}
            for metric, value in values.items():
                if ok and value is not None:
                    tables["rollup_latency"][(*series, metric, rollup.latency_bucket(value))]["count"] += 1
    return tables


def stored(path) -> dict[str, dict[tuple, dict]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    keys = {"rollup_intervals": 5, "rollup_positions": 6, "rollup_requests": 4, "rollup_latency": 6}
    try:
        return {t: {tuple(r)[:n]: {k: r[k] for k in r.keys()[n:]} for r in conn.execute(f"SELECT * FROM {t}")}
                for t, n in keys.items()}
    finally:
        conn.close()


def assert_rollups_equal_raw(path) -> None:
    want, have = expected(path), stored(path)
    for table in rollup.TABLES:
        assert set(have[table]) == set(want[table]), table
        for series, sums in want[table].items():
            for column, value in sums.items():
                got = have[table][series][column]
                if column in FLOATS:
                    assert got == pytest.approx(value, rel=1e-9, abs=1e-12), (table, series, column)
                else:
                    assert got == value, (table, series, column)


# -- equal to the raw rows -------------------------------------------------------------------------

def test_rollups_equal_the_raw_rows_of_a_store_the_engine_recorded(recorded):
    assert read_intervals(recorded) and read_requests(recorded)
    assert_rollups_equal_raw(recorded)
    have = stored(recorded)
    assert any(p[-1] >= 1 for p in have["rollup_positions"])  # drafts reached past the first position
    assert {s[4] for s in have["rollup_latency"]} == set(rollup.LATENCY_METRICS)


def test_retention_keeps_the_rollups_equal_to_the_rows_it_leaves(recorded, tmp_path):
    path = copy_store(recorded, tmp_path / "kept.sqlite")
    conn = store.connect(path)
    try:
        # keep the newest 40% of each table: some blocks lose all their rows, one loses part of them
        for table in ("intervals", "requests"):
            (count,), = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchall()
            assert count > 10
            store.apply_retention(conn, store.Retention(max_age_s=None, max_rows=int(count * 0.4)))
    finally:
        conn.close()
    assert_rollups_equal_raw(path)


def test_a_writer_that_does_not_know_rollups_still_keeps_them(recorded, tmp_path):
    """Triggers live in the store: rows inserted by plain SQL (an older writer) count too."""
    path = copy_store(recorded, tmp_path / "old_writer.sqlite")
    conn = sqlite3.connect(path)
    (end,), = conn.execute("SELECT MAX(end_time) FROM intervals").fetchall()
    conn.execute("INSERT INTO intervals (run_id, model, key, drafter, start_time, end_time, steps, drafts, "
                 "draft_tokens, accepted_tokens, emitted_tokens, k_sum, draft_s, verify_s, proposed_per_pos, "
                 "accepted_per_pos) VALUES ('old', 'tiny', 'copy', 'd', ?, ?, 5, 5, 20, 11, 16, 20, 0.01, 0.2, "
                 "'[5, 5, 5, 5]', '[4, 3, 2, 2]')", (end + 100, end + 101))
    conn.commit()
    conn.close()
    assert_rollups_equal_raw(path)


def test_a_row_the_rollups_cannot_count_drops_its_batch_and_the_writer_goes_on(tmp_path):
    """Malformed per-position JSON fails the trigger: that batch is dropped whole (rows and rollups),
    counted, and the next batch is written; generation never sees it."""
    path = tmp_path / "t.sqlite"
    writer = BackgroundWriter(path)
    now = time.time()  # retention, run when the writer closes, keeps a week
    row = ("r", "m", "k", "ngram", now - 1, now, 4, 4, 16, 9, 13, 16, 0.01, 0.2, "[4, 4, 4, 4]", "[4, 3, 1, 1]")
    writer.put("intervals", row[:-2] + ("not json", "[]"))
    assert writer.flush()
    writer.put("intervals", row)
    assert writer.flush()
    writer.close()
    assert writer.stats.write_errors == 1 and writer.stats.written == 1
    assert_rollups_equal_raw(path)
    assert len(read_intervals(path)) == 1


# -- a store written before rollups ----------------------------------------------------------------

def test_a_writer_opening_a_store_from_before_rollups_builds_them(recorded, tmp_path):
    path = copy_store(recorded, tmp_path / "v2.sqlite")
    strip_rollups(path)
    reader = store.connect(path, create=False)  # a reader opens it as it is
    assert not rollup.present(reader)
    reader.close()
    conn = store.connect(path)  # the writer migrates it
    try:
        assert rollup.present(conn)
        assert conn.execute("SELECT value FROM schema_info WHERE name = 'version'").fetchone()[0] == str(store.SCHEMA_VERSION)
    finally:
        conn.close()
    assert_rollups_equal_raw(path)
    for table in rollup.TABLES:  # the same blocks as the triggers kept while the engine wrote
        assert set(stored(path)[table]) == set(stored(recorded)[table])
    conn = store.connect(path)  # opened again: nothing to build, the triggers carry on
    store.write_batch(conn, [("requests", ("r", 1, "tiny", "chat", "p", 10.0, 12.5, 4, 8, 8, 0.0, "length", None,
                                           0.5, 2.0, 0.25, 8, 0, 0, 0, "", "none"))])
    conn.close()
    assert_rollups_equal_raw(path)


# -- a window's cover ------------------------------------------------------------------------------

def covered_times(cover: rollup.Cover, end_time: float, conn: sqlite3.Connection) -> int:
    """How many parts of ``cover`` hold a row ending at ``end_time``: blocks by the row's minute,
    raw parts by their SQL condition."""
    m, count = minute(end_time), 0
    for width, start_from, start_to in cover.blocks:
        start = m // width * width
        count += start >= start_from and (start_to is None or start < start_to)
    for raw in cover.raw:
        where, args = raw.where()
        count += conn.execute(f"SELECT COUNT(*) FROM (SELECT ? AS end_time) WHERE {where}", [end_time, *args]).fetchone()[0]
    return count


@pytest.mark.parametrize("widths", [rollup.WIDTHS, (60,), (60, 3600), ()])
def test_a_cover_counts_every_row_of_the_window_once_and_no_other(widths):
    rng = random.Random(7)
    conn = sqlite3.connect(":memory:")
    for _ in range(200):
        since = 1_700_000_000 + rng.uniform(0, 3 * 86400)
        until = None if rng.random() < 0.3 else since + rng.choice([30, 700, 5000, 90000, 300000]) * rng.random()
        c = rollup.cover(since, until, widths)
        assert all(w in widths for w, _, _ in c.blocks)
        assert len(c.raw) <= 2
        hi = until if until is not None else since + 400000
        for t in [since, hi, *(rng.uniform(since - 200, hi + 200) for _ in range(40))]:
            inside = since <= t and (until is None or t <= until)
            assert covered_times(c, t, conn) == (1 if inside else 0), (since, until, t)


def test_a_long_window_is_mostly_coarse_blocks_and_a_short_one_raw_rows():
    week = rollup.cover(1_700_000_030.0, 1_700_000_030.0 + 7 * 86400)
    assert sum(1 for w, _, _ in week.blocks if w == 86400) == 1 and len(week.blocks) <= 5
    assert rollup.cover(1_700_000_030.0, 1_700_000_070.0).blocks == ()


# -- latency histograms ----------------------------------------------------------------------------

def test_latency_buckets_in_sql_and_python_agree_and_keep_three_digits():
    rng = random.Random(3)
    values = [10 ** rng.uniform(-6.5, 6.5) for _ in range(5000)] + [0.0, 1e-6, 1e-3, 0.1, 1.0, 60.0, 999.9999, 1e6]
    conn = sqlite3.connect(":memory:")
    sql = rollup.latency_bucket_sql("?")
    for v in values:
        code = rollup.latency_bucket(v)
        assert conn.execute(f"SELECT {sql.replace('?', repr(v))}").fetchone()[0] == code, v
        low, high = rollup.bucket_bounds(code)
        if 1e-6 <= v < 1e6:
            assert low <= v * (1 + 1e-12) and v < high * (1 + 1e-12)
            assert abs(rollup.bucket_middle(code) - v) <= rollup.RESOLUTION * v * (1 + 1e-9)
    codes = [rollup.latency_bucket(v) for v in sorted(values)]
    assert codes == sorted(codes)  # codes sort as their values
    assert conn.execute(f"SELECT {sql.replace('?', 'NULL')}").fetchone()[0] is None


def test_histogram_percentile_is_the_nearest_rank_bucket():
    from adaptive_spec.telemetry.summary import percentile

    rng = random.Random(5)
    values = [rng.lognormvariate(-3, 1) for _ in range(999)]
    counts: dict[int, int] = defaultdict(int)
    for v in values:
        counts[rollup.latency_bucket(v)] += 1
    for q in (1, 50, 90, 95, 99, 100):
        exact = percentile(values, q)
        assert math.isclose(rollup.histogram_percentile(counts, q), exact, rel_tol=rollup.RESOLUTION)
    assert rollup.histogram_percentile({}, 50) is None
