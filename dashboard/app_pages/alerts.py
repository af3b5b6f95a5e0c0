"""Alerts: what is firing, what fired recently, the series behind each, and the Prometheus rules.

The dashboard only reads the ``alerts`` table: the rules are evaluated by the engine's writer
thread (or ``adaptive-spec alerts``), so every reader sees the same verdicts.
"""

from dataclasses import fields
from pathlib import Path

import pandas as pd
import streamlit as st
import yaml

from adaptive_spec.telemetry.alerts import AlertRules
from dashboard import charts, data, ui

RULES_FILE = Path(data.__file__).resolve().parents[1] / "deploy" / "prometheus" / "alerts.yml"

st.title("Alerts")
path = ui.require_store()


def alert_table(rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "rule": rows["rule"], "model": rows["model"], "key": rows["key"].replace("", "-"),
        "drafter": rows["drafter"].replace("", "-"), "fired": rows["fired_at"].map(ui.stamp),
        "resolved": rows["resolved_at"].map(ui.stamp), "value": rows["value"].map(lambda v: ui.fmt(v, ".4g")),
        "threshold": rows["threshold"].map(lambda v: ui.fmt(v, ".4g")), "message": rows["message"],
    })


def fired_series(alert) -> None:
    """The series an alert was judged on, from before it fired to its end (or now)."""
    rules = AlertRules()
    lookback = {"acceptance_collapse": rules.collapse.window_s + rules.collapse.baseline_s,
                "speculation_off": rules.speculation_off.limit_s * 2,
                "tpot_regression": rules.tpot_regression.window_s * 2}.get(alert.rule, 600.0)
    since = alert.fired_at - lookback
    until = alert.resolved_at if alert.resolved_at == alert.resolved_at and alert.resolved_at else None
    span = (until or data.window_start(0.0)) - since
    keys = (alert.key,) if alert.rule != "tpot_regression" else ()  # tpot's plain side is the whole model's
    buckets = data.interval_buckets(path, since, data.bucket_for(span), alert.model, keys, until)
    if buckets.empty:
        st.info("no rows of this series left in the store (retention, or the traffic stopped)")
        return
    if alert.rule == "acceptance_collapse":
        rows = data.rate_series(buckets[buckets["drafter"] == alert.drafter], [])
        chart = charts.over_time(rows, "acceptance_rate", "accepted / draft tokens", y_format=".0%",
                                 rule=alert.threshold)
    elif alert.rule == "speculation_off":
        b = buckets.assign(plain=buckets["steps"].where(buckets["drafter"] == data.PLAIN, 0))
        rows = b.groupby("t", as_index=False)[["plain", "steps"]].sum()
        rows["share_off"], rows["time"] = rows["plain"] / rows["steps"], pd.to_datetime(rows["t"], unit="s")
        chart = charts.over_time(rows, "share_off", "plain steps / steps", y_format=".0%")
    else:
        b = buckets.assign(side=buckets["drafter"].where(buckets["drafter"] == data.PLAIN, "speculative"),
                           seconds=buckets["draft_s"] + buckets["verify_s"])
        rows = b.groupby(["t", "side"], as_index=False)[["seconds", "emitted_tokens"]].sum()
        rows["tpot_ms"] = 1e3 * rows["seconds"] / rows["emitted_tokens"].where(rows["emitted_tokens"] > 0)
        rows["time"] = pd.to_datetime(rows["t"], unit="s")
        chart = charts.over_time(rows, "tpot_ms", "time per output token (ms)", "side")
    st.altair_chart(chart)


def thresholds() -> None:
    st.subheader("Rules and their default thresholds")
    st.caption("The thresholds above are those of the last evaluation; these are the built-in defaults "
               "(`adaptive_spec/telemetry/alerts.py`), which a deployment may override.")
    rules = AlertRules()
    rows = [{"rule": name, "parameter": f.name, "default": getattr(getattr(rules, attr), f.name)}
            for name, attr in (("acceptance_collapse", "collapse"), ("speculation_off", "speculation_off"),
                               ("tpot_regression", "tpot_regression"))
            for f in fields(getattr(rules, attr))]
    st.dataframe(pd.DataFrame(rows).astype({"default": str}), hide_index=True)


def prometheus() -> None:
    st.subheader("The same rules in Prometheus")
    st.markdown(f"""
The engine can export its counters for Prometheus: run it with `--telemetry prometheus:9464` (with
`sqlite:PATH` too, comma-separated, to keep this dashboard). Then, in `prometheus.yml`:

```yaml
scrape_configs:
  - job_name: adaptive-spec
    static_configs: [{{targets: ["127.0.0.1:9464"]}}]
rule_files:
  - {RULES_FILE.relative_to(RULES_FILE.parents[2])}
```

Check and test the rules with `promtool check rules deploy/prometheus/alerts.yml` and
`promtool test rules deploy/prometheus/alerts_test.yml`, and route the alerts with Alertmanager. The
exported counters carry model and drafter but not the traffic key, so Prometheus judges acceptance
and TPOT per model (and drafter), not per key.""")
    try:
        groups = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        st.caption(f"({RULES_FILE} not readable here: {exc})")
        return
    for rule in (r for g in groups for r in g["rules"] if "alert" in r):
        with st.expander(f"{rule['alert']} (for {rule.get('for', '0s')})"):
            st.code(rule["expr"].strip(), language="promql")


window = st.selectbox("resolved within", list(ui.WINDOWS), index=4, key="alerts_window")
rows = data.alerts(path, data.window_start(ui.WINDOWS[window]))
firing, resolved = rows[rows["state"] == "firing"], rows[rows["state"] == "resolved"]
st.subheader(f"Firing ({len(firing)})")
if firing.empty:
    st.success("no alerts firing")
else:
    st.dataframe(alert_table(firing).drop(columns="resolved"), hide_index=True)
st.subheader(f"Resolved in the last {window} ({len(resolved)})")
if resolved.empty:
    st.caption("none")
else:
    st.dataframe(alert_table(resolved), hide_index=True)
if not rows.empty:
    st.subheader("The series behind an alert")
    labels = [f"{r.state}: {r.rule} on {'/'.join(x for x in (r.model, r.key, r.drafter) if x)} at {ui.stamp(r.fired_at)}"
              for r in rows.itertuples()]
    chosen = st.selectbox("alert", range(len(labels)), format_func=labels.__getitem__, key="alerts_pick")
    fired_series(next(rows.iloc[[chosen]].itertuples()))
thresholds()
prometheus()
