"""The store: what the recorder writes equals what generation did; retention bounds it; failures
of the disk never reach generation."""

import logging
import sqlite3
import threading
import time

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.telemetry import store
from adaptive_spec.telemetry import writer as writer_module
from adaptive_spec.telemetry.aggregate import IntervalAggregator
from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder
from adaptive_spec.telemetry.writer import BackgroundWriter, WriterConfig
from policies import StaticPolicy
from policies.outcome import StepOutcome
from tiny import loaded, tiny_llama

PROMPT = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]


@pytest.fixture(scope="module")
def target():
    return loaded(tiny_llama(0))


def test_aggregator_counts_per_position_and_cuts_rows_per_interval():
    agg = IntervalAggregator(interval_s=1.0)
    assert agg.add("m", "", StepOutcome("d", 4, 4, 2, 3, 0.01, 0.02, timestamp=10.1)) == []
    assert agg.add("m", "", StepOutcome("d", 4, 3, 3, 4, 0.01, 0.02, timestamp=10.9)) == []
    (row,) = agg.add("m", "", StepOutcome("d", 4, 4, 0, 1, 0.01, 0.02, timestamp=11.0))
    assert (row.steps, row.drafts, row.draft_tokens, row.accepted_tokens, row.emitted_tokens) == (2, 2, 7, 5, 7)
    assert row.proposed_per_pos == [2, 2, 2, 1] and row.accepted_per_pos == [2, 2, 1, 0]
    assert (row.start_time, row.end_time) == (10.1, 10.9)
    plain = agg.add("m", "", StepOutcome("none", 0, 0, 0, 1, 0.0, 0.01, timestamp=11.2))
    assert plain == []  # another drafter is another series
    assert sorted(c.drafter for c in agg.close("m", "")) == ["d", "none"]


def test_recorded_rows_add_up_to_the_generation_stats(tmp_path, target):
    path = tmp_path / "t.sqlite"
    recorder = StoreRecorder(path, RecorderConfig(step_rows=True))
    decoder = SpeculativeDecoder(target, [NgramDrafter()], StaticPolicy("ngram", 4), observers=[recorder])
    plain = SpeculativeDecoder(target, [NgramDrafter()], StaticPolicy("ngram", 4))
    results = [decoder.generate(PROMPT, max_new_tokens=30, key="copy") for _ in range(2)]
    assert results[0].token_ids == plain.generate(PROMPT, max_new_tokens=30).token_ids  # telemetry changes nothing
    recorder.close()

    requests = store.read_requests(path)
    assert [r["new_tokens"] for r in requests] == [30, 30]
    r, s = requests[0], results[0].stats
    assert (r["steps"], r["drafts"], r["draft_tokens"], r["accepted_tokens"]) == (s.steps, s.drafts, s.draft_tokens, s.accepted_tokens)
    assert r["ttft_s"] == s.prefill_s and r["tpot_s"] == pytest.approx(s.decode_s / 29)
    assert (r["model"], r["key"], r["policy"], r["finish_reason"], r["main_drafter"]) == ("tiny", "copy", "static", "length", "ngram")
    intervals = store.read_intervals(path)
    assert sum(i["draft_tokens"] for i in intervals) == sum(x.stats.draft_tokens for x in results)
    assert sum(i["accepted_tokens"] for i in intervals) == sum(x.stats.accepted_tokens for x in results)
    assert sum(i["steps"] for i in intervals) == len(store.read_steps(path)) == sum(x.stats.steps for x in results)
    assert recorder.writer.stats.dropped_full == recorder.writer.stats.dropped_errors == 0


def test_retention_by_age_and_by_rows_keeps_firing_alerts(tmp_path):
    conn = store.connect(tmp_path / "r.sqlite")
    cols = store.COLUMNS["decisions"]
    store.write_batch(conn, [("decisions", ("r", float(t), "m", "k", "speculation", None, "on", None, ""))
                             for t in range(100)])
    for t, state in ((0.0, "firing"), (1.0, "resolved")):
        conn.execute("INSERT INTO alerts (rule, model, key, drafter, state, fired_at, updated_at) VALUES "
                     "('acceptance_collapse', 'm', 'k', 'd', ?, ?, ?)", (state, t, t))
    assert len(cols) == 9
    deleted = store.apply_retention(conn, store.Retention(max_age_s=50, max_rows=None), now=100.0)
    times = [r[0] for r in conn.execute("SELECT time FROM decisions ORDER BY time")]
    assert times == [float(t) for t in range(50, 100)] and deleted == 51  # 50 decisions + the resolved alert
    store.apply_retention(conn, store.Retention(max_age_s=None, max_rows=10), now=100.0)
    times = [r[0] for r in conn.execute("SELECT time FROM decisions ORDER BY time")]
    assert times == [float(t) for t in range(90, 100)]
    assert [r[0] for r in conn.execute("SELECT state FROM alerts")] == ["firing"]


def test_full_queue_drops_and_counts_without_blocking(tmp_path, monkeypatch):
    release = threading.Event()
    real_write = writer_module.store.write_batch

    def slow_write(conn, batch):
        release.wait(10)
        return real_write(conn, batch)

    monkeypatch.setattr(writer_module.store, "write_batch", slow_write)
    w = BackgroundWriter(tmp_path / "q.sqlite", WriterConfig(queue_size=5, max_batch=1))
    row = ("r", 1.0, "m", "k", "speculation", None, "on", None, "")
    w.put("decisions", row)
    while w._queue.qsize():  # the writer took the first row and is stuck writing it
        release.wait(0.01)
    for _ in range(10):
        w.put("decisions", row)
    assert (w.stats.queued, w.stats.dropped_full) == (6, 5)
    release.set()
    assert w.flush()
    assert w.stats.written == 6
    w.close()


def test_unwritable_path_is_reported_once_and_generation_goes_on(tmp_path, target, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    recorder = StoreRecorder(blocker / "t.sqlite")
    decoder = SpeculativeDecoder(target, [NgramDrafter()], StaticPolicy("ngram", 4), observers=[recorder])
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        for _ in range(2):
            assert decoder.generate(PROMPT, max_new_tokens=8).stats.new_tokens == 8
            recorder.flush()
    assert recorder.writer.stats.open_errors == 1  # retried only every reopen_every_s
    assert recorder.writer.stats.dropped_errors >= 2
    assert len([m for m in caplog.messages if "cannot be opened" in m]) == 1
    assert decoder.observers.errors == 0
    recorder.close()


def test_locked_database_drops_the_batch_counts_it_and_recovers(tmp_path, caplog):
    path = tmp_path / "l.sqlite"
    store.connect(path).close()
    w = BackgroundWriter(path, WriterConfig())
    row = ("r", time.time(), "m", "k", "speculation", None, "on", None, "")
    w.put("decisions", row)
    w.flush()
    assert w.stats.written == 1
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holding the write lock past the busy timeout
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        w.put("decisions", row)
        w.flush()
    assert (w.stats.write_errors, w.stats.dropped_errors) == (1, 1)
    assert any("write failed" in m for m in caplog.messages)
    holder.execute("ROLLBACK")
    holder.close()
    w.put("decisions", row)
    w.flush()
    assert w.stats.written == 2
    w.close()
    assert len(store.read_decisions(path)) == 2


@pytest.mark.parametrize("name", ["flush_every_s", "periodic_every_s", "queue_size"])
def test_writer_config_rejects_infinite_values_by_name(name):
    # flush_every_s=inf used to be accepted, then the writer thread died at its first queue wait
    # (OverflowError) and every row after was lost uncounted
    with pytest.raises(ValueError, match=f"{name}=inf"):
        WriterConfig(**{name: float("inf")})
