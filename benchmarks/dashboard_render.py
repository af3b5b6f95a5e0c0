"""How long each dashboard page takes to render on a big telemetry store, and while the engine writes to it.

    .venv/bin/python -m benchmarks.dashboard_render [--requests 100000] [--interval-rows 1000000]
        [--step-rows 1000000] [--renders 5] [--raw-renders 3] [--concurrent-s 60]
        [--out benchmarks/results/dashboard_render.json]

1. Builds a synthetic store: ``--requests`` requests, ``--interval-rows`` 1 s ``intervals`` rows and
   ``--step-rows`` ``steps`` rows spread over the last 7 days (one model, three traffic keys, three
   drafters each, draft lengths up to 8, a decision every few minutes per key, a few alerts),
   inserted in time order through ``store.write_batch``: the writer's schema, triggers and
   transactions. The times end now, so the store is built afresh on every run.
2. Renders every page with Streamlit's ``AppTest`` (the whole script, as a browser's rerun runs
   it) for each window, with the data cache cleared before each render (the Live page refreshes
   every ``TTL_S``, as long as the cache keeps a query: every refresh is a miss). Each render is
   done twice on the same store, interleaved: reading the rollups, and reading the raw rows as on
   a store written before them (``data.has_rollups`` forced false). Medians of the renders.
3. Times a writer opening a copy of the store stripped of its rollups (a version-2 store): it
   builds them from the raw rows, once.
4. Renders the Live page repeatedly for ``--concurrent-s`` seconds while another process writes
   to a copy of the store through the real ``BackgroundWriter`` (1 s batches, retention each
   minute) at a busy engine's rate, and reports render times, page errors and the writer's
   counters (a "database is locked" would show as a write error or a page exception).

Wall times on the shared 2-core VMs vary with what else runs: the JSON records the load average.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from adaptive_spec.outputs import output_path, write_json_atomic  # noqa: E402
from adaptive_spec.telemetry import rollup, store  # noqa: E402

APP = REPO / "dashboard" / "app.py"
WEEK_S = 7 * 86400.0
MODEL = "SmolLM2-135M-Instruct"
KEYS = ("chat", "copy", "code")
DRAFTERS = ("none", "ngram", "int8")
WINDOWS = ("15 min", "1 h", "24 h", "7 days")
# page, its window selector's key (None: no window), the windows rendered
PAGES = [("live", "live_window", WINDOWS), ("controllers", "ctl_window", WINDOWS),
         ("alerts", "alerts_window", ("24 h", "7 days")), ("whatif", "wi_replay_window", ("1 h", "24 h", "7 days"))]
BUDGET_S = 1.0  # issue 14: every page in under 1 s on this store


# -- 1. the store ----------------------------------------------------------------------------------

def interval_row(rng: random.Random, end: float) -> tuple:
    key, drafter = rng.choice(KEYS), rng.choice(DRAFTERS)
    steps = rng.randint(8, 30)
    if drafter == "none":
        return ("bench", MODEL, key, drafter, end - 1.0, end, steps, 0, 0, 0, steps, 0, 0.0, steps * 0.06, "[]", "[]")
    k = rng.randint(2, 8)
    p_accept = {"copy": 0.8, "code": 0.6, "chat": 0.3}[key] * (0.9 if drafter == "int8" else 1.0)
    proposed, accepted = [steps] * k, []
    alive = steps
    for _ in range(k):  # drafts still accepted at each position: a geometric fall, with rounding noise
        alive = int(alive * p_accept + rng.random())
        accepted.append(alive)
    emitted = sum(accepted) + steps
    return ("bench", MODEL, key, drafter, end - 1.0, end, steps, steps, steps * k, sum(accepted), emitted, steps * k,
            steps * 0.004, steps * 0.09, json.dumps(proposed), json.dumps(accepted))


def request_row(rng: random.Random, i: int, end: float) -> tuple:
    key = rng.choice(KEYS)
    new_tokens = rng.randint(16, 256)
    ttft, tpot = rng.lognormvariate(-2.0, 0.5), rng.lognormvariate(-2.9, 0.3)
    decode = tpot * (new_tokens - 1)
    error = "RuntimeError: out of memory" if rng.random() < 0.01 else None
    if error:
        return ("bench", i, MODEL, key, "adaptive", end - ttft, end, 40, 0, 256, 0.0, None, error, None, None, None,
                0, 0, 0, 0, "", "none")
    return ("bench", i, MODEL, key, "adaptive", end - ttft - decode, end, rng.randint(20, 400), new_tokens, 256, 0.0,
            "length", None, ttft, decode, tpot, new_tokens // 2, new_tokens // 3, new_tokens, new_tokens // 2,
            "ngram", "ngram")


def step_row(rng: random.Random, t: float) -> tuple:
    k = rng.choice((0, 4, 8))
    accepted = rng.randint(0, k)
    return ("bench", rng.randrange(10**6), t, MODEL, rng.choice(KEYS), "ngram" if k else "none", k, k, accepted,
            accepted + 1, 0.001 * k, 0.09, rng.randint(50, 900))


def build_store(path: Path, requests: int, interval_rows: int, step_rows: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    now = time.time()

    def rows(table: str, n: int, make):  # (time, table, row) in time order
        for i, t in enumerate(sorted(now - rng.uniform(0, WEEK_S - 120) for _ in range(n))):
            yield t, table, make(i, t)

    decisions = int(WEEK_S / 300) * len(KEYS)  # a decision every ~5 min per key
    stream = heapq.merge(
        rows("intervals", interval_rows, lambda i, t: interval_row(rng, t)),
        rows("requests", requests, lambda i, t: request_row(rng, i, t)),
        rows("steps", step_rows, lambda i, t: step_row(rng, t)),
        rows("decisions", decisions, lambda i, t: ("bench", t, MODEL, rng.choice(KEYS), "drafter", "ngram",
                                                   rng.choice(DRAFTERS[1:]), rng.choice(DRAFTERS[1:]), None)),
        key=lambda item: item[0])
    started = time.perf_counter()
    conn = store.connect(path)
    try:
        while batch := [(table, row) for _, table, row in itertools.islice(stream, 20_000)]:
            store.write_batch(conn, batch)  # in time order: ids grow with time, as the writer's do
        for j, fired in enumerate((now - 3 * 86400, now - 86400, now - 3600)):
            firing = j == 2
            conn.execute("INSERT INTO alerts (rule, model, key, drafter, state, fired_at, resolved_at, value, threshold, "
                         "message, updated_at) VALUES ('acceptance_collapse', ?, 'copy', 'ngram', ?, ?, ?, 0.1, 0.3, "
                         "'acceptance fell', ?)", (MODEL, "firing" if firing else "resolved", fired,
                                                   None if firing else fired + 600, now if firing else fired + 600))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return dict(requests=requests, interval_rows=interval_rows, step_rows=step_rows, decisions=decisions,
                span_days=WEEK_S / 86400, build_s=round(time.perf_counter() - started, 1),
                file_mb=round(path.stat().st_size / 2**20, 1))


def time_migration(path: Path) -> float:
    """Seconds a writer takes to open a copy of the store as written before rollups (it builds them)."""
    copy = path.with_name("before_rollups.sqlite")
    shutil.copy(path, copy)
    conn = sqlite3.connect(copy)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    for table in rollup.TABLES:
        conn.execute(f"DROP TABLE {table}")
    conn.execute("UPDATE schema_info SET value = '2' WHERE name = 'version'")
    conn.commit()
    conn.close()
    started = time.perf_counter()
    store.connect(copy).close()
    seconds = time.perf_counter() - started
    copy.unlink()
    return seconds


# -- 2. rendering ----------------------------------------------------------------------------------

def open_page(page: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=300).run()
    if page != "live":
        at.switch_page(f"app_pages/{page}.py").run()
    if page == "whatif":
        at.radio(key="wi_workload").set_value("replay my traffic").run()
    return at


def render(at, selector: str, window: str, raw: bool) -> tuple[float, list[str]]:
    """One render of the page at ``window``, data cache cleared; (seconds, exception messages).
    ``at.metric`` then holds the tiles it showed."""
    import streamlit as st

    from dashboard import data

    data.has_rollups = _no_rollups if raw else _has_rollups
    at.selectbox(key=selector).set_value(window)
    st.cache_data.clear()
    started = time.perf_counter()
    at.run()
    seconds = time.perf_counter() - started
    return seconds, [e.value for e in at.exception]


def _no_rollups(path) -> bool:
    return False


_has_rollups = None  # dashboard.data.has_rollups, set in main (importing streamlit is slow)


def time_pages(renders: int, raw_renders: int) -> list[dict]:
    results = []
    for page, selector, windows in PAGES:
        at = open_page(page)
        for window in windows:
            times: dict[bool, list[float]] = {False: [], True: []}
            errors: list[str] = []
            tiles: dict[bool, dict[str, str]] = {}
            render(at, selector, window, raw=False)  # warm-up: SQLite's and the OS's page caches
            for i in range(max(renders, raw_renders)):
                for raw in ((False, True) if i % 2 == 0 else (True, False)):  # alternate which goes first
                    if i < (raw_renders if raw else renders):
                        seconds, exceptions = render(at, selector, window, raw)
                        times[raw].append(seconds)
                        errors += exceptions
                        tiles[raw] = {m.label: m.value for m in at.metric}
            row = dict(page=page, window=window, rollups_s=statistics.median(times[False]),
                       raw_s=statistics.median(times[True]), rollups_all=[round(t, 3) for t in times[False]],
                       raw_all=[round(t, 3) for t in times[True]], errors=sorted(set(errors)))
            if tiles[False]:  # the same figures both ways (latency percentiles: within the histograms' 0.5%)
                row["tiles"] = tiles[False]
                row["tiles_differing"] = sorted(k for k in tiles[True] if tiles[True][k] != tiles[False].get(k))
            results.append(row)
            print(f"{page:12} {window:8} rollups {row['rollups_s']:6.3f} s   raw {row['raw_s']:6.3f} s"
                  + (f"   ERRORS {row['errors']}" if errors else ""), flush=True)
    return results


# -- 3. rendering while the engine writes ----------------------------------------------------------

# per second: 9 series' 1 s intervals rows plus one per request end, per-step rows of ~60 steps/s,
# 2 requests, a decision every 10 s; ~10x the request rate of a served SmolLM2 on these CPUs
WRITE_RATE = dict(intervals=11, steps=60, requests=2, decisions=0.1)


def write_traffic(path: str, seconds: float) -> None:
    """The engine's side (run in its own process): rows at ``WRITE_RATE`` through the real writer."""
    from adaptive_spec.telemetry.writer import BackgroundWriter

    rng = random.Random(1)
    writer = BackgroundWriter(path)
    tick, i = 0.1, 0
    carry = {table: 0.0 for table in WRITE_RATE}
    end = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < end:
        now = time.time()
        for table, rate in WRITE_RATE.items():
            carry[table] += rate * tick
            while carry[table] >= 1:
                carry[table] -= 1
                i += 1
                row = {"intervals": lambda: interval_row(rng, now), "requests": lambda: request_row(rng, i, now),
                       "steps": lambda: step_row(rng, now),
                       "decisions": lambda: ("bench", now, MODEL, rng.choice(KEYS), "drafter", "ngram", "int8",
                                             "ngram", None)}[table]()
                writer.put(table, row)
        time.sleep(tick)
    writer.close(timeout_s=30)
    s = writer.stats
    print(json.dumps(dict(queued=s.queued, written=s.written, batches=s.batches, write_errors=s.write_errors,
                          open_errors=s.open_errors, job_errors=s.job_errors,
                          dropped=s.dropped_full + s.dropped_errors)), flush=True)


def while_writing(path: Path, seconds: float) -> dict:
    copy = path.with_name("concurrent.sqlite")
    shutil.copy(path, copy)
    os.environ["ADAPTIVE_SPEC_TELEMETRY_DB"] = str(copy)
    code = f"from benchmarks.dashboard_render import write_traffic; write_traffic({str(copy)!r}, {seconds!r})"
    writer = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "ready"
    at = open_page("live")
    times, errors, by_window = [], [], {w: [] for w in WINDOWS}
    end = time.monotonic() + seconds - 2
    while time.monotonic() < end:
        window = WINDOWS[len(times) % len(WINDOWS)]
        t, exceptions = render(at, "live_window", window, raw=False)
        times.append(t)
        by_window[window].append(t)
        errors += exceptions
    stats = json.loads(writer.communicate(timeout=120)[0].strip().splitlines()[-1])
    ordered = sorted(times)
    return dict(seconds=seconds, write_rate_per_s=WRITE_RATE, renders=len(times),
                render_s=dict(median=statistics.median(times), p95=ordered[max(0, int(0.95 * len(ordered)) - 1)],
                              max=ordered[-1]),
                median_by_window={w: statistics.median(v) for w, v in by_window.items() if v},
                page_errors=sorted(set(errors)), writer=stats)


def main() -> None:
    global _has_rollups
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--interval-rows", type=int, default=1_000_000)
    parser.add_argument("--step-rows", type=int, default=1_000_000)
    parser.add_argument("--renders", type=int, default=5, help="timed renders per page and window, reading rollups")
    parser.add_argument("--raw-renders", type=int, default=3, help="the same reading the raw rows (slow: fewer)")
    parser.add_argument("--concurrent-s", type=float, default=60.0, help="seconds of rendering while writing")
    parser.add_argument("--out", type=output_path, default="benchmarks/results/dashboard_render.json")
    args = parser.parse_args()
    for name in ("requests", "interval_rows", "step_rows", "renders", "raw_renders", "concurrent_s"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    import streamlit

    from dashboard import data

    _has_rollups = data.has_rollups
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        built = build_store(path, args.requests, args.interval_rows, args.step_rows)
        print(f"store: {built}", flush=True)
        built["migrate_s"] = round(time_migration(path), 1)
        print(f"a writer opening it as written before rollups builds them in {built['migrate_s']} s", flush=True)
        os.environ["ADAPTIVE_SPEC_TELEMETRY_DB"] = str(path)
        pages = time_pages(args.renders, args.raw_renders)
        load_pages = os.getloadavg()
        concurrent = while_writing(path, args.concurrent_s)
        print(f"while writing: {concurrent}", flush=True)
    result = dict(
        store=built, budget_s=BUDGET_S, renders=args.renders, raw_renders=args.raw_renders, pages=pages,
        concurrent=concurrent,
        machine=dict(cpus=os.cpu_count(), platform=platform.platform(), python=platform.python_version(),
                     sqlite=sqlite3.sqlite_version, streamlit=streamlit.__version__,
                     load_before=[round(x, 2) for x in load_before], load_after_pages=[round(x, 2) for x in load_pages],
                     load_after=[round(x, 2) for x in os.getloadavg()]))
    write_json_atomic(args.out, result, "out")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
