"""Rollups: the store's counters summed per minute, hour and day, so that a week reads in milliseconds.

The dashboard asks every window the same questions: the step counters per (model, key, drafter),
the drafts that reached and were accepted at each draft position, and per (model, key) the
requests, their errors and their TTFT / TPOT / E2E percentiles. Over the raw rows a week is a
million 1 s ``intervals`` rows to sum, a JSON list to unpack in each, and 100,000 requests to sort.
The rollup tables keep those sums per block of time:

    rollup_intervals  (width, start, model, key, drafter)            the intervals counters, summed
    rollup_positions  (width, start, model, key, drafter, position)  drafts reaching / accepted there
    rollup_requests   (width, start, model, key)                     requests, errors, tokens, seconds
    rollup_latency    (width, start, model, key, metric, bucket)     a latency histogram per metric

``width`` is 60, 3600 or 86400 s and ``start`` a multiple of it. A raw row belongs to the block of
its *minute*, ``CAST(end_time / 60 AS INTEGER) * 60`` (the hour and the day are taken from the
minute, in integers), so the three widths and the raw rows split a window the same way.

**They never disagree with the raw rows.** SQLite triggers keep them: every insert into
``intervals`` or ``requests`` adds into the rollups, every delete (retention) subtracts, in the same
statement and so the same transaction; a block whose last raw row goes is deleted. Any writer keeps
them right, this version's, an older one or a test inserting by hand, and a reader sees rollups and
raw rows in one snapshot. Raw rows are never updated (nothing in the telemetry does).

**Latency histograms** keep three significant digits: the bucket of a value is ``[n, n + 1) x 10^e``
with ``100 <= n <= 999``, stored as the code ``(e + 20) * 1000 + n``; codes sort as their values. A
value is within 0.5% of its bucket's middle, so a nearest-rank percentile read from a histogram (the
middle of the bucket holding the nearest-rank value) is within 0.5% of the exact one. Values below
1 µs count as 0, values from 10^6 s up as 10^6 s.

>>> latency_bucket(0.0123456), bucket_middle(latency_bucket(0.0123456))
(16123, 0.01235)
>>> histogram_percentile({latency_bucket(v): 1 for v in (0.020, 0.030, 0.041)}, 50)
0.03005

**Reading a window** (``cover``): whole days from the day blocks, the whole hours left at its ends
from hour blocks, then minutes, and the partial minutes at the very ends from the raw rows. From
00:01:30 to 02:01:40 (90 s to 7300 s):

>>> c = cover(90.0, 7300.0)
>>> c.blocks
((3600, 3600, 7200), (60, 120, 3600), (60, 7200, 7260))
>>> for part in c.raw: print(part)
RawPart(since=90.0, until=7300.0, minute_from=None, minute_to=120)
RawPart(since=90.0, until=7300.0, minute_from=7260, minute_to=None)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

WIDTHS = (60, 3600, 86400)  # each divides the next: a coarser block is whole finer blocks
TABLES = ("rollup_intervals", "rollup_positions", "rollup_requests", "rollup_latency")
LATENCY_METRICS = ("ttft_s", "tpot_s", "e2e_s")  # the requests columns (e2e_s = end_time - start_time)
RESOLUTION = 0.005  # relative: a histogram's value is within 0.5% of the value it stands for

# -- latency buckets: three significant digits -----------------------------------------------------

_DECADES = range(-8, 4)  # e: values in [10^(e+2), 10^(e+3)), i.e. 1 µs .. 10^6 s
ZERO = 0  # the code of values below 1 µs
OVERFLOW = 24_000  # the code of values from 10^6 s up


def _power(exponent: int) -> float:
    # float("1e-5"), as SQLite parses the literal in the trigger: the same double on both sides
    return float(f"1e{exponent}")


def latency_bucket(value: float) -> int:
    """The bucket code of a latency in seconds (the same arithmetic as ``latency_bucket_sql``)."""
    if value < _power(-6):
        return ZERO
    for e in _DECADES:
        if value < _power(e + 3):
            scaled = value * _power(-e) if e < 0 else value / _power(e)
            return (e + 20) * 1000 + min(max(int(scaled), 100), 999)
    return OVERFLOW


def latency_bucket_sql(value: str) -> str:
    """``latency_bucket`` as an SQL expression over ``value`` (for triggers: no functions to register)."""
    value = f"({value})"
    cases = [f"WHEN {value} IS NULL THEN NULL", f"WHEN {value} < 1e-6 THEN {ZERO}"]
    for e in _DECADES:
        scaled = f"{value} * 1e{-e}" if e < 0 else f"{value} / 1e{e}"
        cases.append(f"WHEN {value} < 1e{e + 3} THEN {(e + 20) * 1000} + MIN(MAX(CAST({scaled} AS INTEGER), 100), 999)")
    return f"(CASE {' '.join(cases)} ELSE {OVERFLOW} END)"


def bucket_bounds(code: int) -> tuple[float, float]:
    """[low, high) of a bucket, in seconds."""
    if code == ZERO:
        return 0.0, _power(-6)
    if code == OVERFLOW:
        return _power(6), math.inf
    e, n = code // 1000 - 20, code % 1000
    return n * 10.0 ** e, (n + 1) * 10.0 ** e


def bucket_middle(code: int) -> float:
    """The value a bucket stands for: its middle (0 below 1 µs, 10^6 s for the overflow bucket)."""
    if code in (ZERO, OVERFLOW):
        return bucket_bounds(code)[0]
    e, n = code // 1000 - 20, code % 1000
    return round((n + 0.5) * 10.0 ** e, 1 - e)  # 4 significant digits: 0.012350000000000002 -> 0.01235


def histogram_percentile(counts: Mapping[int, int], q: float) -> float | None:
    """Nearest-rank percentile of a histogram ``{code: count}`` (``summary.percentile`` on buckets)."""
    total = sum(counts.values())
    if not total:
        return None
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for code in sorted(counts):
        seen += counts[code]
        if seen >= rank:
            return bucket_middle(code)
    raise AssertionError("unreachable: the counts add up to total")


# -- which blocks and raw rows make up a window ----------------------------------------------------

MINUTE_SQL = "CAST(end_time / 60 AS INTEGER) * 60"  # the minute a raw row belongs to


@dataclass(frozen=True)
class RawPart:
    """Raw rows with ``since <= end_time <= until`` whose minute is in [minute_from, minute_to)
    (``None``: unbounded): the partial minutes at a window's ends."""

    since: float
    until: float | None
    minute_from: int | None
    minute_to: int | None

    def where(self, time_column: str = "end_time") -> tuple[str, list]:
        """The SQL condition and its arguments (the bounds on the column keep it an index range)."""
        minute = MINUTE_SQL.replace("end_time", time_column)
        clauses, args = [f"{time_column} >= ?"], [self.since]
        if self.until is not None:
            clauses.append(f"{time_column} <= ?")
            args.append(self.until)
        if self.minute_to is not None:  # minute < m implies end_time < m + 60
            clauses += [f"{time_column} < ?", f"{minute} < ?"]
            args += [self.minute_to + 60, self.minute_to]
        if self.minute_from is not None:
            clauses += [f"{time_column} >= ?", f"{minute} >= ?"]
            args += [self.minute_from - 60, self.minute_from]
        return " AND ".join(clauses), args


@dataclass(frozen=True)
class Cover:
    """A window as rollup blocks ``(width, start_from, start_to)`` (``start_to`` None: open) and raw parts."""

    blocks: tuple[tuple[int, int, int | None], ...]
    raw: tuple[RawPart, ...]


def cover(since: float, until: float | None = None, widths: tuple[int, ...] = WIDTHS) -> Cover:
    """The rows with ``since <= end_time <= until`` (``until`` None: up to now) as the fewest rollup
    blocks of ``widths`` (each dividing the next) plus the partial minutes at the ends as raw rows.

    With no widths, or a window too short for a whole block, it is all raw rows.
    """
    blocks: list[tuple[int, int, int | None]] = []
    inner: tuple[int, int | None] | None = None  # [lo, hi) covered by coarser blocks so far
    first = math.ceil(since)
    for width in sorted(widths, reverse=True):
        lo = -(-first // width) * width
        hi = None if until is None else math.floor(until) // width * width
        if hi is not None and lo >= hi:
            continue
        if inner is None:
            blocks.append((width, lo, hi))
        else:
            if lo < inner[0]:
                blocks.append((width, lo, inner[0]))
            if inner[1] is not None and (hi is None or inner[1] < hi):
                blocks.append((width, inner[1], hi))
        inner = (lo, hi)
    if inner is None:
        return Cover((), (RawPart(since, until, None, None),))
    # both parts keep the window's bounds; the minute bounds split the rows exactly as the blocks do
    raw = [RawPart(since, until, None, inner[0])]
    if inner[1] is not None:
        raw.append(RawPart(since, until, inner[1], None))
    return Cover(tuple(blocks), tuple(raw))


def block_where(block: tuple[int, int, int | None]) -> tuple[str, list]:
    """The SQL condition on a rollup table for one block range, and its arguments."""
    width, start_from, start_to = block
    if start_to is None:
        return "width = ? AND start >= ?", [width, start_from]
    return "width = ? AND start >= ? AND start < ?", [width, start_from, start_to]


# -- the tables and the triggers that keep them ----------------------------------------------------

_LEVELS = " UNION ALL ".join(f"SELECT {w} AS width" for w in WIDTHS)
_COUNTERS = ("steps", "drafts", "draft_tokens", "accepted_tokens", "emitted_tokens", "k_sum", "draft_s", "verify_s")


def _start(row: str, width: str | int) -> str:
    """The block start of a raw row (``NEW``/``OLD``) at ``width``, from its minute, in integers."""
    return f"CAST({row}.end_time / 60 AS INTEGER) * 60 / {width} * {width}"


def _series(row: str, width: int, drafter: bool = True) -> str:
    where = f"width = {width} AND start = {_start(row, width)} AND model = {row}.model AND key = {row}.key"
    return where + (f" AND drafter = {row}.drafter" if drafter else "")


# the values a request row adds to its block: errors, and new tokens and busy seconds of the
# requests without error (the Live page's "request tokens/s" = new_tokens / busy_s)
_OK = "{r}.error IS NULL"
_REQUEST_VALUES = {
    "errors": "({r}.error IS NOT NULL)",
    "new_tokens": "(CASE WHEN {r}.error IS NULL THEN COALESCE({r}.new_tokens, 0) ELSE 0 END)",
    "busy_s": "(CASE WHEN {r}.error IS NULL THEN COALESCE({r}.ttft_s, 0) + COALESCE({r}.decode_s, 0) ELSE 0.0 END)",
}
_LATENCY_VALUES = {"ttft_s": "{r}.ttft_s", "tpot_s": "{r}.tpot_s", "e2e_s": "({r}.end_time - {r}.start_time)"}


def _metrics(row: str) -> str:
    return " UNION ALL ".join(f"SELECT '{m}' AS metric, {v.format(r=row)} AS value" for m, v in _LATENCY_VALUES.items())


def _ddl() -> list[str]:
    counters = ", ".join(_COUNTERS)
    tables = [
        "CREATE TABLE IF NOT EXISTS rollup_intervals (width INTEGER NOT NULL, start INTEGER NOT NULL, "
        "model TEXT NOT NULL, key TEXT NOT NULL, drafter TEXT NOT NULL, rows INTEGER NOT NULL, steps INTEGER NOT NULL, "
        "drafts INTEGER NOT NULL, draft_tokens INTEGER NOT NULL, accepted_tokens INTEGER NOT NULL, "
        "emitted_tokens INTEGER NOT NULL, k_sum INTEGER NOT NULL, draft_s REAL NOT NULL, verify_s REAL NOT NULL, "
        "PRIMARY KEY (width, start, model, key, drafter)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS rollup_positions (width INTEGER NOT NULL, start INTEGER NOT NULL, "
        "model TEXT NOT NULL, key TEXT NOT NULL, drafter TEXT NOT NULL, position INTEGER NOT NULL, "
        "rows INTEGER NOT NULL, proposed INTEGER NOT NULL, accepted INTEGER NOT NULL, "
        "PRIMARY KEY (width, start, model, key, drafter, position)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS rollup_requests (width INTEGER NOT NULL, start INTEGER NOT NULL, "
        "model TEXT NOT NULL, key TEXT NOT NULL, rows INTEGER NOT NULL, errors INTEGER NOT NULL, "
        "new_tokens INTEGER NOT NULL, busy_s REAL NOT NULL, PRIMARY KEY (width, start, model, key)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS rollup_latency (width INTEGER NOT NULL, start INTEGER NOT NULL, "
        "model TEXT NOT NULL, key TEXT NOT NULL, metric TEXT NOT NULL, bucket INTEGER NOT NULL, "
        "count INTEGER NOT NULL, PRIMARY KEY (width, start, model, key, metric, bucket)) WITHOUT ROWID",
    ]
    # "WHERE true" before ON CONFLICT: an upsert from a SELECT needs it (SQLite's parsing ambiguity)
    intervals_insert = f"""
    INSERT INTO rollup_intervals (width, start, model, key, drafter, rows, {counters})
    SELECT w.width, {_start('NEW', 'w.width')}, NEW.model, NEW.key, NEW.drafter, 1,
           {', '.join(f'NEW.{c}' for c in _COUNTERS)}
    FROM ({_LEVELS}) AS w WHERE true
    ON CONFLICT (width, start, model, key, drafter) DO UPDATE SET rows = rows + 1,
        {', '.join(f'{c} = {c} + excluded.{c}' for c in _COUNTERS)};
    INSERT INTO rollup_positions (width, start, model, key, drafter, position, rows, proposed, accepted)
    SELECT w.width, {_start('NEW', 'w.width')}, NEW.model, NEW.key, NEW.drafter, CAST(p.key AS INTEGER), 1, p.value,
           COALESCE(json_extract(NEW.accepted_per_pos, '$[' || p.key || ']'), 0)
    FROM ({_LEVELS}) AS w, json_each(NEW.proposed_per_pos) AS p WHERE true
    ON CONFLICT (width, start, model, key, drafter, position) DO UPDATE SET rows = rows + 1,
        proposed = proposed + excluded.proposed, accepted = accepted + excluded.accepted;"""
    # one statement per width: "start = <constant>" keeps each an index lookup
    intervals_delete = "".join(f"""
    UPDATE rollup_intervals SET rows = rows - 1, {', '.join(f'{c} = {c} - OLD.{c}' for c in _COUNTERS)}
    WHERE {_series('OLD', w)};
    DELETE FROM rollup_intervals WHERE {_series('OLD', w)} AND rows = 0;
    UPDATE rollup_positions SET rows = rows - 1,
        proposed = proposed - json_extract(OLD.proposed_per_pos, '$[' || position || ']'),
        accepted = accepted - COALESCE(json_extract(OLD.accepted_per_pos, '$[' || position || ']'), 0)
    WHERE {_series('OLD', w)} AND position < json_array_length(OLD.proposed_per_pos);
    DELETE FROM rollup_positions WHERE {_series('OLD', w)} AND rows = 0;""" for w in WIDTHS)
    values = {name: sql.format(r="NEW") for name, sql in _REQUEST_VALUES.items()}
    requests_insert = f"""
    INSERT INTO rollup_requests (width, start, model, key, rows, errors, new_tokens, busy_s)
    SELECT w.width, {_start('NEW', 'w.width')}, NEW.model, NEW.key, 1, {values['errors']}, {values['new_tokens']},
           {values['busy_s']}
    FROM ({_LEVELS}) AS w WHERE true
    ON CONFLICT (width, start, model, key) DO UPDATE SET rows = rows + 1, errors = errors + excluded.errors,
        new_tokens = new_tokens + excluded.new_tokens, busy_s = busy_s + excluded.busy_s;
    INSERT INTO rollup_latency (width, start, model, key, metric, bucket, count)
    SELECT w.width, {_start('NEW', 'w.width')}, NEW.model, NEW.key, m.metric, {latency_bucket_sql('m.value')}, 1
    FROM ({_LEVELS}) AS w, ({_metrics('NEW')}) AS m WHERE {_OK.format(r='NEW')} AND m.value IS NOT NULL
    ON CONFLICT (width, start, model, key, metric, bucket) DO UPDATE SET count = count + 1;"""
    old = {name: sql.format(r="OLD") for name, sql in _REQUEST_VALUES.items()}
    latency_match = " OR ".join(f"(metric = '{m}' AND {v.format(r='OLD')} IS NOT NULL "
                                f"AND bucket = {latency_bucket_sql(v.format(r='OLD'))})"
                                for m, v in _LATENCY_VALUES.items())
    requests_delete = "".join(f"""
    UPDATE rollup_requests SET rows = rows - 1, errors = errors - {old['errors']},
        new_tokens = new_tokens - {old['new_tokens']}, busy_s = busy_s - {old['busy_s']}
    WHERE {_series('OLD', w, drafter=False)};
    DELETE FROM rollup_requests WHERE {_series('OLD', w, drafter=False)} AND rows = 0;
    UPDATE rollup_latency SET count = count - 1
    WHERE {_series('OLD', w, drafter=False)} AND {_OK.format(r='OLD')} AND ({latency_match});
    DELETE FROM rollup_latency WHERE {_series('OLD', w, drafter=False)} AND count = 0;""" for w in WIDTHS)
    triggers = [
        f"CREATE TRIGGER IF NOT EXISTS rollup_intervals_insert AFTER INSERT ON intervals BEGIN {intervals_insert} END",
        f"CREATE TRIGGER IF NOT EXISTS rollup_intervals_delete AFTER DELETE ON intervals BEGIN {intervals_delete} END",
        f"CREATE TRIGGER IF NOT EXISTS rollup_requests_insert AFTER INSERT ON requests BEGIN {requests_insert} END",
        f"CREATE TRIGGER IF NOT EXISTS rollup_requests_delete AFTER DELETE ON requests BEGIN {requests_delete} END",
    ]
    return tables + triggers


DDL = _ddl()  # statements for store.connect's schema transaction (after the raw tables)


def rebuild(conn) -> None:
    """Recompute every rollup from the raw rows (a store written before rollups existed).

    Run inside the caller's transaction, with the triggers in place, so that no row is counted
    twice or missed. The minute blocks are summed from the raw rows, each coarser width from the
    width below it. Seconds per million raw rows: it runs once per store.
    """
    for table in TABLES:
        conn.execute(f"DELETE FROM {table}")
    minute = MINUTE_SQL
    sums = ", ".join(f"SUM({c})" for c in _COUNTERS)
    conn.execute(f"INSERT INTO rollup_intervals SELECT 60, {minute}, model, key, drafter, COUNT(*), {sums} "
                 f"FROM intervals GROUP BY 2, model, key, drafter")
    conn.execute(f"""INSERT INTO rollup_positions
        SELECT 60, CAST(i.end_time / 60 AS INTEGER) * 60, i.model, i.key, i.drafter, CAST(p.key AS INTEGER), COUNT(*),
               SUM(p.value), SUM(COALESCE(json_extract(i.accepted_per_pos, '$[' || p.key || ']'), 0))
        FROM intervals AS i, json_each(i.proposed_per_pos) AS p GROUP BY 2, 3, 4, 5, 6""")
    values = {name: sql.format(r="requests") for name, sql in _REQUEST_VALUES.items()}
    conn.execute(f"INSERT INTO rollup_requests SELECT 60, {minute}, model, key, COUNT(*), SUM({values['errors']}), "
                 f"SUM({values['new_tokens']}), SUM({values['busy_s']}) FROM requests GROUP BY 2, model, key")
    metrics = " UNION ALL ".join(f"SELECT end_time, model, key, '{m}' AS metric, {v.format(r='requests')} AS value "
                                 f"FROM requests WHERE error IS NULL" for m, v in _LATENCY_VALUES.items())
    conn.execute(f"INSERT INTO rollup_latency SELECT 60, {minute}, model, key, metric, {latency_bucket_sql('value')}, "
                 f"COUNT(*) FROM ({metrics}) WHERE value IS NOT NULL GROUP BY 2, model, key, metric, 6")
    keys = {"rollup_intervals": ("model, key, drafter", f"SUM(rows), {', '.join(f'SUM({c})' for c in _COUNTERS)}"),
            "rollup_positions": ("model, key, drafter, position", "SUM(rows), SUM(proposed), SUM(accepted)"),
            "rollup_requests": ("model, key", "SUM(rows), SUM(errors), SUM(new_tokens), SUM(busy_s)"),
            "rollup_latency": ("model, key, metric, bucket", "SUM(count)")}
    for finer, width in zip(WIDTHS, WIDTHS[1:]):
        for table, (series, total) in keys.items():
            conn.execute(f"INSERT INTO {table} SELECT {width}, start / {width} * {width}, {series}, {total} "
                         f"FROM {table} WHERE width = {finer} GROUP BY 2, {series}")


def present(conn) -> bool:
    """Whether the store has its rollups (a store written before them has not, until a writer opens it)."""
    names = {row[0] for row in conn.execute(
        f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({', '.join('?' * len(TABLES))})", TABLES)}
    return names == set(TABLES)
