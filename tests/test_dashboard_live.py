"""The Live page on a store the engine recorded: its figures are the store's counters, its banner
shows exactly while an alert fires, and a store it cannot use is explained, not a traceback."""

import pytest
from streamlit.testing.v1 import AppTest

from adaptive_spec.telemetry import store
from adaptive_spec.telemetry.summary import percentile
from dashboard.ui import duration
from dashboard_testkit import APP, MODEL, query, record_store, store_counters


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return record_store(tmp_path_factory.mktemp("recorded"))


def live(path, monkeypatch) -> AppTest:
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(path))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def banners(at: AppTest) -> list[str]:
    return [e.value for e in at.error if "ALERT" in e.value]


def test_shown_acceptance_is_the_store_counters(recorded, monkeypatch):
    shown = metrics(live(recorded.final, monkeypatch))
    c = store_counters(recorded.final)
    assert shown["acceptance rate"] == f"{c['accepted_tokens'] / c['draft_tokens']:.3f}"
    assert shown["mean acceptance length"] == f"{1 + c['accepted_tokens'] / c['drafts']:.2f}"
    assert shown["steps with speculation off"] == f"{(c['all_steps'] - c['steps']) / c['all_steps']:.1%}"
    ttft = [r[0] for r in query(recorded.final, "SELECT ttft_s FROM requests WHERE error IS NULL")]
    assert shown["TTFT p95"] == duration(percentile(ttft, 95))
    assert shown["plain decoding tokens/s"] != "-" and shown["speedup vs plain"].endswith("x")


def test_key_filter_shows_only_that_key_and_no_nan(recorded, monkeypatch):
    at = live(recorded.final, monkeypatch)
    at.multiselect(key="live_keys").select("chat").run()
    shown = metrics(at)
    assert shown["acceptance rate"] == "-"  # plain decoding drafts nothing: no rate, not NaN
    assert shown["steps with speculation off"] == "100.0%"
    assert not any("nan" in v.lower() for v in shown.values())


def test_alert_banner_appears_exactly_while_the_alert_fires(recorded, monkeypatch):
    ((state,),) = query(recorded.firing, "SELECT state FROM alerts")
    assert state == "firing"
    (banner,) = banners(live(recorded.firing, monkeypatch))
    assert "acceptance_collapse" in banner and f"{MODEL}/copy/d" in banner
    assert query(recorded.final, "SELECT state FROM alerts") == [("resolved",)]
    assert banners(live(recorded.final, monkeypatch)) == []


def test_empty_store_says_no_traffic(tmp_path, monkeypatch):
    path = tmp_path / "empty.sqlite"
    store.connect(path).close()
    at = live(path, monkeypatch)
    assert any("no traffic in the last 15 min" in i.value for i in at.info)
    assert not at.metric


def test_missing_store_is_explained(tmp_path, monkeypatch):
    at = live(tmp_path / "nowhere.sqlite", monkeypatch)
    assert any("No telemetry store at" in i.value and "--telemetry sqlite:" in i.value for i in at.info)


def test_non_sqlite_file_is_a_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are not the rows you are looking for\n" * 200)
    at = live(path, monkeypatch)
    (error,) = at.error
    assert "not an SQLite database" in error.value and str(path) in error.value
