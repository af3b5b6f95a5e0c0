"""A telemetry store recorded by the real engine (tiny model) for the dashboard's tests.

The run, on a fake clock of 0.1 s per step that starts a minute ago (``telemetry_testkit``):
plain decoding on key ``chat``, then on key ``copy`` a drafter that is good (the target itself),
turns useless (an acceptance collapse fires, and the adaptive policy's detector records one) and
recovers (the alert resolves). The store is copied
while the alert fires and again at the end, so a test can show a page both ways.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.telemetry.alerts import AlertEvaluator, AlertRules, CollapseRule
from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder
from policies import Action, OverridePolicy, StaticPolicy, make_policy
from telemetry_testkit import FakeClock, Retimed, SwitchableDrafter
from tiny import loaded, one_thread, tiny_llama

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
MODEL = "tiny"
EVAL_S = 0.5
RULES = AlertRules(collapse=CollapseRule(floor=0.3, fraction=0.5, window_s=2.0, baseline_s=8.0, for_s=1.0,
                                         min_draft_tokens=20), check_every_s=0.25)
PROMPT = [5, 9, 13, 2, 7, 5, 9, 13, 2, 7]


@dataclass
class Recorded:
    firing: Path  # a copy taken while the collapse alert fired
    final: Path  # the store at the end: the alert resolved


def copy_store(source: Path, target: Path) -> Path:
    """A consistent copy of a WAL store (the backup API: a file copy would miss the -wal's rows)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return target


def record_store(directory: Path) -> Recorded:
    path = directory / "recorded.sqlite"
    clock = FakeClock(start=float(int(time.time())) - 60.0)
    recorder = StoreRecorder(path, RecorderConfig(interval_s=0.25))
    drafter = SwitchableDrafter(tiny_llama(0))
    decoder = SpeculativeDecoder(loaded(tiny_llama(0), name=MODEL), [drafter], StaticPolicy("none", 0),
                                 observers=[Retimed(recorder, clock)])
    evaluator = AlertEvaluator(RULES)
    next_eval = [clock.now + EVAL_S]

    def run(fake_seconds: float, key: str) -> None:
        end = clock.now + fake_seconds
        while clock.now < end:
            decoder.generate(PROMPT, max_new_tokens=24, key=key)
            assert recorder.flush()
            while next_eval[0] <= clock.now:
                evaluator.evaluate_path(path, next_eval[0])
                next_eval[0] += EVAL_S

    with one_thread():
        run(2.0, "chat")  # plain steps: the tokens/s baseline
        # the adaptive policy's change detector records the collapse as a decision; its action is
        # forced because on the tiny model the draft costs as much as the target (it would decode plainly)
        decoder.policy = OverridePolicy(make_policy("adaptive", ["d"], early_stop="off"), Action("d", 4))
        run(10.0, "copy")  # the collapse rule's baseline fills with acceptance ~1
        drafter.mode = "bad"
        run(5.0, "copy")
        firing = copy_store(path, directory / "firing.sqlite")
        drafter.mode = "good"
        run(3.0, "copy")
    recorder.close()
    return Recorded(firing, path)


def strip_rollups(path: Path) -> Path:
    """Make ``path`` what a version-2 writer left: no rollup tables or triggers, version 2."""
    conn = sqlite3.connect(path)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rollup_%'"
                                    ).fetchall():
            conn.execute(f"DROP TABLE {name}")
        conn.execute("UPDATE schema_info SET value = '2' WHERE name = 'version'")
        conn.commit()
    finally:
        conn.close()
    return path


def store_counters(path: Path, where: str = "drafter != 'none'") -> dict:
    """Sums of the interval counters straight from the store, for comparing with the pages."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(f"SELECT SUM(steps), SUM(drafts), SUM(draft_tokens), SUM(accepted_tokens) FROM intervals "
                           f"WHERE {where}").fetchone()
        total = conn.execute("SELECT SUM(steps) FROM intervals").fetchone()[0]
    finally:
        conn.close()
    return dict(steps=row[0], drafts=row[1], draft_tokens=row[2], accepted_tokens=row[3], all_steps=total)


def query(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()
