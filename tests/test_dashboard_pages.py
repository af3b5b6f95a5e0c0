"""The Alerts and Controllers pages on a store the engine recorded."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from dashboard_testkit import APP, query, record_store
from dashboard.ui import stamp


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return record_store(tmp_path_factory.mktemp("recorded"))


def page(path, name, monkeypatch) -> AppTest:
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(path))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page(f"app_pages/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_alerts_page_lists_the_firing_alert_with_its_threshold(recorded, monkeypatch):
    at = page(recorded.firing, "alerts", monkeypatch)
    assert [s.value for s in at.subheader][:2] == ["Firing (1)", "Resolved in the last 24 h (0)"]
    firing = at.dataframe[0].value
    ((value, threshold),) = query(recorded.firing, "SELECT value, threshold FROM alerts")
    assert list(firing["rule"]) == ["acceptance_collapse"]
    assert list(firing["threshold"]) == [f"{threshold:.4g}"] and list(firing["value"]) == [f"{value:.4g}"]
    assert not at.success  # no "no alerts firing"


def test_alerts_page_shows_the_resolved_alert_and_the_prometheus_rules(recorded, monkeypatch):
    at = page(recorded.final, "alerts", monkeypatch)
    assert any(s.value == "no alerts firing" for s in at.success)
    resolved = at.dataframe[0].value
    ((fired_at, resolved_at),) = query(recorded.final, "SELECT fired_at, resolved_at FROM alerts")
    assert list(resolved["fired"]) == [stamp(fired_at)] and list(resolved["resolved"]) == [stamp(resolved_at)]
    assert {e.label.split(" ")[0] for e in at.expander} == {
        "AdaptiveSpecAcceptanceCollapse", "AdaptiveSpecSpeculationOff", "AdaptiveSpecTpotRegression"}


def test_controllers_page_shows_each_key_state_and_last_collapse(recorded, monkeypatch):
    at = page(recorded.final, "controllers", monkeypatch)
    assert [s.value for s in at.subheader] == ["key chat", "key copy"]
    shown = [(m.label, m.value) for m in at.metric]
    assert shown[:3] == [("active drafter", "none"), ("speculation", "off"), ("last collapse", "none")]
    ((when, detail),) = query(recorded.final, "SELECT time, detail FROM decisions WHERE kind = 'collapse'")
    copy = dict(shown[3:])
    assert copy["active drafter"] == "d" and copy["speculation"] == "on"
    assert copy["last collapse"] == stamp(when)
    event = json.loads(detail)
    assert any(c.value == f"collapse of d: acceptance {event['acceptance_before']:.2f} -> "
                          f"{event['acceptance_after']:.2f}" for c in at.caption)


@pytest.mark.parametrize("detail", ["not json", "[1, 2]", '{"drafter": "d", "acceptance_before": "high"}'])
def test_controllers_page_survives_a_malformed_collapse_detail(tmp_path, monkeypatch, detail):
    # one decisions row whose detail is not the event's JSON object used to stop the page
    # (JSONDecodeError, AttributeError on a list, TypeError formatting a string)
    import time

    from adaptive_spec.telemetry import store

    now = time.time() - 10
    path = tmp_path / "t.sqlite"
    conn = store.connect(path)
    store.write_batch(conn, [
        ("intervals", ("r", "tiny", "copy", "d", now - 1, now, 10, 10, 40, 20, 30, 40, 0.5, 0.5, "[10]", "[5]")),
        ("decisions", ("r", now, "tiny", "copy", "collapse", "d", "0.1", None, detail)),
    ])
    conn.close()
    at = page(path, "controllers", monkeypatch)
    shown = {m.label: m.value for m in at.metric}
    assert shown["active drafter"] == "d" and shown["last collapse"] == stamp(now)
    captions = [c.value for c in at.caption if c.value.startswith("collapse of")]
    assert captions == ([] if detail != '{"drafter": "d", "acceptance_before": "high"}'
                        else ["collapse of d: acceptance - -> -"])
