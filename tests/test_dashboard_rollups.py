"""The pages read rollups for long windows and show what the raw rows show; a store written
before rollups is read raw; percentiles from the latency histograms stay within their resolution."""

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from adaptive_spec.telemetry import rollup
from adaptive_spec.telemetry.summary import percentile
from dashboard import data
from dashboard_testkit import APP, copy_store, query, record_store, store_counters, strip_rollups


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("recorded")
    final = record_store(directory).final
    return final, strip_rollups(copy_store(final, directory / "before_rollups.sqlite"))


@pytest.fixture
def covers(monkeypatch):
    """Every cover the queries used: which of them read rollup blocks."""
    st.cache_data.clear()  # a cached query would not ask for a cover
    seen = []
    real = data._cover

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(data, "_cover", spy)
    return seen


def page(path, monkeypatch, name="live", **selects) -> AppTest:
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(path))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    if name != "live":
        at.switch_page(f"app_pages/{name}.py").run()
    for key, value in selects.items():
        at.selectbox(key=key).set_value(value).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def seconds(tile: str) -> float:
    return float(tile.removesuffix(" ms")) / 1e3 if tile.endswith(" ms") else float(tile.removesuffix(" s"))


@pytest.mark.parametrize("window", ["1 h", "24 h", "7 days"])
def test_long_windows_read_rollups_and_show_the_store_counters(recorded, monkeypatch, covers, window):
    final, before = recorded
    at = page(final, monkeypatch, live_window=window)
    assert any(c.blocks for c in covers)  # the rollups were read
    tiles, c = shown(at), store_counters(final)
    assert tiles["acceptance rate"] == f"{c['accepted_tokens'] / c['draft_tokens']:.3f}"
    assert tiles["mean acceptance length"] == f"{1 + c['accepted_tokens'] / c['drafts']:.2f}"
    assert tiles["steps with speculation off"] == f"{(c['all_steps'] - c['steps']) / c['all_steps']:.1%}"
    covers.clear()
    raw = page(before, monkeypatch, live_window=window)
    assert covers and not any(c.blocks for c in covers)  # no rollups: the raw rows
    assert shown(raw) == tiles
    assert [x.value for x in raw.caption] == [x.value for x in at.caption]


def test_controllers_show_the_same_from_rollups_and_raw_rows(recorded, monkeypatch):
    final, before = recorded
    with_rollups, raw = (page(p, monkeypatch, "controllers", ctl_window="7 days") for p in (final, before))
    assert [(m.label, m.value) for m in with_rollups.metric] == [(m.label, m.value) for m in raw.metric]
    for a, b in zip(with_rollups.dataframe, raw.dataframe):
        assert a.value.equals(b.value)


def test_histogram_percentiles_stay_within_their_resolution(recorded, monkeypatch):
    final, _ = recorded
    monkeypatch.setattr(data, "EXACT_PERCENTILES_MAX_REQUESTS", 0)  # always the histograms
    at = page(final, monkeypatch, live_window="1 h")
    tiles = shown(at)
    assert any("latency histograms" in c.value and "within 0.5%" in c.value for c in at.caption)
    rows = query(final, "SELECT ttft_s, tpot_s, end_time - start_time FROM requests WHERE error IS NULL")
    for column, label in enumerate(("TTFT", "TPOT", "E2E")):
        values = [r[column] for r in rows if r[column] is not None]
        for q in (50, 95):
            exact, tile = percentile(values, q), tiles[f"{label} p{q}"]
            display = 0.05e-3 if tile.endswith(" ms") else 0.005  # the tile's own rounding
            assert abs(seconds(tile) - exact) <= rollup.RESOLUTION * exact + display, (label, q, tile, exact)


def test_request_stats_from_histograms_and_from_rows_agree(recorded):
    final, _ = recorded
    since = data.window_start(3600.0)
    exact = data.request_stats(str(final), since, "tiny", (), 10**9)
    approx = data.request_stats(str(final), since, "tiny", (), 0)
    assert exact["exact"] and not approx["exact"]
    assert {k: exact[k] for k in ("requests", "errors", "new_tokens")} == \
        {k: approx[k] for k in ("requests", "errors", "new_tokens")}
    assert approx["busy_s"] == pytest.approx(exact["busy_s"])
    for metric, by_q in exact["percentiles"].items():
        for q, value in by_q.items():
            assert approx["percentiles"][metric][q] == pytest.approx(value, rel=rollup.RESOLUTION)
