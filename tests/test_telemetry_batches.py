"""The batched engine's forwards in the telemetry store (``batch_intervals``), on the Live page and
in ``telemetry batches``: the store's sums are the forwards the engine ran, and the page and the
command show the store's sums."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.batching import BatchedDecoder
from adaptive_spec.telemetry import store
from adaptive_spec.telemetry.cli import telemetry_app
from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder
from batch_kit import Confident, EchoDrafter, dear_drafts_cap
from dashboard_testkit import APP, query
from policies.registry import make_policy
from tiny import loaded, one_thread, tiny_llama

COPY = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6]
PROMPTS = [COPY, [9, 9, 30, 31, 32, 9, 30], [7, 3, 7, 3, 7, 3, 11], [40, 41, 42]]


class Heard:
    def __init__(self) -> None:
        self.steps = []

    def on_batch_step(self, model, step) -> None:
        self.steps.append(step)


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    """A store a batched engine wrote: a learning row whose drafts the cap cuts beside others, rows
    drafting always, a plain one, and requests joining mid-way (1 to 4 rows a forward)."""
    path = tmp_path_factory.mktemp("batched") / "batched.sqlite"
    heard = Heard()
    recorder = StoreRecorder(path, RecorderConfig(interval_s=0.05))
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0), name="tiny"), [EchoDrafter()], observers=[recorder, heard])
    cap = dear_drafts_cap()  # a step with any multi-token row costs ~4x a plain one
    with one_thread():
        engine = BatchedDecoder(decoder, max_batch=4, draft_cap=cap)
        engine.submit(COPY, policy=Confident("echo", start_k=8), max_new_tokens=40)
        engine.submit(PROMPTS[1], policy=make_policy("static:echo:3", ["echo"]), max_new_tokens=16)
        for _ in range(3):
            engine.step()
        engine.submit(PROMPTS[2], policy=make_policy("plain", ["echo"]), max_new_tokens=12)
        engine.submit(PROMPTS[3], policy=make_policy("static:echo:2", ["echo"]), max_new_tokens=8)
        engine.run()
    recorder.close()
    return path, heard.steps


def test_the_store_sums_are_the_forwards_the_engine_ran(batched):
    path, steps = batched
    rows = {r: (f, d, cut, prompt, none, kept, short, plain) for r, f, d, cut, prompt, none, kept, short, plain in query(
        path, "SELECT rows, SUM(forwards), SUM(drafting), SUM(cut_tokens), SUM(prompt_tokens), SUM(cap_none), "
              "SUM(cap_kept), SUM(cap_shortened), SUM(cap_plain) FROM batch_intervals GROUP BY rows")}
    assert set(rows) == {s.rows for s in steps} and max(rows) >= 3
    for n, (forwards, drafting, cut, prompt, *calls) in rows.items():
        mine = [s for s in steps if s.rows == n]
        assert forwards == len(mine) and drafting == sum(s.drafting for s in mine)
        assert cut == sum(s.cut_tokens for s in mine) and prompt == sum(s.prompt_tokens for s in mine)
        tally = Counter(s.cap for s in mine)
        assert calls == [tally["none"], tally["kept"], tally["shortened"], tally["plain"]]
    # and the requests' own rows agree: every row-step of a forward is a step of one request
    ((request_steps,),) = query(path, "SELECT SUM(steps) FROM requests")
    assert sum(n * v[0] for n, v in rows.items()) == request_steps
    assert sum(v[7] for v in rows.values()) > 0  # the cap cut the learning row's drafts beside the others
    assert len(query(path, "SELECT DISTINCT end_time FROM batch_intervals")) > 1  # over several intervals


def live(path, monkeypatch) -> AppTest:
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(path))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_live_page_shows_the_batch_from_the_store(batched, monkeypatch):
    path, _ = batched
    at = live(path, monkeypatch)
    assert "Batching" in [s.value for s in at.subheader]
    shown = {m.label: m.value for m in at.metric}
    ((forwards, row_steps, drafting, priced, cut, prompt),) = query(
        path, "SELECT SUM(forwards), SUM(rows * forwards), SUM(drafting), SUM(cap_kept + cap_shortened + cap_plain), "
              "SUM(cap_shortened + cap_plain), SUM(prompt_tokens) FROM batch_intervals")
    assert shown["rows per forward"] == f"{row_steps / forwards:.2f}"
    assert shown["rows' steps drafting"] == f"{drafting / row_steps:.1%}"
    assert shown["forwards the cap cut"] == f"{cut / priced:.1%}"
    assert shown["prompt tokens riding"] == f"{prompt:,.0f}"


def test_telemetry_batches_prints_the_store_by_rows(batched):
    path, steps = batched
    out = CliRunner().invoke(telemetry_app, ["batches", "--db", str(path), "--window", "1h", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["rows"]: r for r in json.loads(out.output)}
    assert set(rows) == {s.rows for s in steps}
    for n, r in rows.items():
        mine = [s for s in steps if s.rows == n]
        assert r["forwards"] == len(mine) and r["row_steps"] == n * len(mine)
        assert r["drafting_share"] == sum(s.drafting for s in mine) / (n * len(mine))
        priced = [s for s in mine if s.cap != "none"]
        assert r["cut_share"] == (sum(s.cap in ("shortened", "plain") for s in priced) / len(priced) if priced else None)
    table = CliRunner().invoke(telemetry_app, ["batches", "--db", str(path)])
    assert table.exit_code == 0 and "rows" in table.output and "drafting" in table.output


def test_a_store_without_batches_shows_no_batching_section(tmp_path, monkeypatch):
    path = tmp_path / "single.sqlite"
    recorder = StoreRecorder(path)
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0), name="tiny"), [EchoDrafter()], observers=[recorder])
    with one_thread():
        decoder.generate(COPY, policy=make_policy("static:echo:3", ["echo"]), max_new_tokens=8)
    recorder.close()
    at = live(path, monkeypatch)
    assert at.metric and "Batching" not in [s.value for s in at.subheader]
    # a store written before the table existed (schema 4) reads the same
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE batch_intervals")
    conn.commit()
    conn.close()
    st.cache_data.clear()  # the page's queries are cached for a few seconds: read the store again
    at = live(path, monkeypatch)
    assert at.metric and "Batching" not in [s.value for s in at.subheader]
    assert store.read_batch_intervals(path) == []
    out = CliRunner().invoke(telemetry_app, ["batches", "--db", str(path)])
    assert out.exit_code == 0 and "no batched decode forwards" in out.output


def test_batch_intervals_share_one_clock_and_close_when_it_has_run():
    from adaptive_spec.telemetry.batch_intervals import BatchIntervals
    from policies.batch_step import BatchStep

    def step(rows, drafting=0, cap="none"):
        return BatchStep(rows, drafting, cap, 0, 0, 0.1)

    clock = BatchIntervals("run", interval_s=1.0)
    assert clock.add("m", step(2, 1), 10.0) == [] and clock.add("m", step(4, cap="plain"), 10.4) == []
    assert clock.due(10.9) == []  # a request's end before the interval has run: it stays open
    rows = clock.add("m", step(2), 11.0)  # the first forward after a second closes every size
    assert sorted((r[2], r[5], r[6], r[13]) for r in rows) == [(2, 1, 1, 0), (4, 1, 0, 1)]  # rows, forwards, drafting, plain
    assert [(r[3], r[4]) for r in rows if r[2] == 4] == [(10.4, 10.4)]  # its first and last forward
    assert clock.due(11.5) == [] and len(clock.due(12.0)) == 1 and clock.close() == []
