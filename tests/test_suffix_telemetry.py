"""The suffix drafter's history size reaches the telemetry store and the dashboard's Live page."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import HistoryStore, SuffixDrafter
from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder
from dashboard_testkit import APP, query
from policies import StaticPolicy
from tiny import loaded, one_thread, tiny_llama


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("suffix") / "store.sqlite"
    recorder = StoreRecorder(path, RecorderConfig(interval_s=0.25))
    history = HistoryStore()
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=3), name="tiny"), [SuffixDrafter(history)],
                                 StaticPolicy("suffix", 4), observers=[recorder])
    with one_thread():
        for i, key in enumerate(["a", "b", "a"]):
            decoder._gauges_due = 0.0  # report after every request (the engine reports every few seconds)
            decoder.generate([5, 9, 13, i], max_new_tokens=16, key=key)
    assert recorder.flush()
    recorder.close()
    return path, history.stats()


def test_the_history_size_is_recorded_as_gauges(recorded):
    path, stats = recorded
    rows = query(path, "SELECT name, value FROM gauges ORDER BY id")
    last = dict(rows)  # the latest value of each gauge
    assert last == {f"suffix_history_{name}": float(value) for name, value in stats.items()}
    assert last["suffix_history_tokens"] == 3 * 16 and last["suffix_history_keys"] == 2
    tokens = [value for name, value in rows if name == "suffix_history_tokens"]
    assert tokens == [16.0, 32.0, 48.0]  # one report per request here, growing with the history


def test_live_page_shows_what_the_history_holds(recorded, monkeypatch):
    path, stats = recorded
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(path))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = {m.label: m.value for m in at.metric}
    assert "Suffix drafter history" in [s.value for s in at.subheader]
    assert shown["tokens held"] == f"{stats['tokens']:,}" and shown["outputs held"] == "3"
    assert shown["traffic keys"] == "2" and shown["memory"] == f"{stats['memory_bytes'] / 1e6:.1f} MB"


def test_the_history_size_is_exported_as_opentelemetry_gauges():
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from adaptive_spec.telemetry.otel import OTelObserver

    registry = CollectorRegistry()
    observer = OTelObserver(MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)]))
    history = HistoryStore()
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=3), name="tiny"), [SuffixDrafter(history)],
                                 StaticPolicy("suffix", 4), observers=[observer])
    with one_thread():
        for i, key in enumerate(["a", "b"]):
            decoder._gauges_due = 0.0
            decoder.generate([5, 9, 13, i], max_new_tokens=16, key=key)
    text = generate_latest(registry).decode()
    stats = history.stats()
    for name in ("tokens", "outputs", "keys", "memory_bytes"):
        line = next(l for l in text.splitlines() if l.startswith(f"adaptive_spec_drafter_suffix_history_{name}{{"))
        assert 'gen_ai_request_model="tiny"' in line and float(line.rsplit(" ", 1)[1]) == stats[name]
    assert stats["tokens"] == 32 and stats["keys"] == 2
