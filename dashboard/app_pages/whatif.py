"""What-if: what would a traffic shift, more replicas or another controller do to latency?

Runs the simulator in the page (``dashboard/whatif.py``) on a scenario built from the form: each
policy on the same seeded traffic, so the only difference between the lines is the controller.
Needs no telemetry store.
"""

import json

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import whatif

st.title("What-if")
st.caption("Simulated with the capacity simulator on a measured cost profile: each policy sees the same "
           "seeded requests. Times are simulated seconds from the start of the run.")

KNOWN_POLICIES = ["none", "static:ngram:2", "static:ngram:4", "static:ngram:8", "static:int8:2", "static:int8:4",
                  "heuristic:ngram", "adaptive"]
bases = sorted(whatif.SCENARIOS.glob("*.yaml"))
base = st.selectbox("base scenario (profile and request classes)", bases, format_func=lambda p: p.name,
                    index=bases.index(whatif.DEFAULT_BASE) if whatif.DEFAULT_BASE in bases else 0, key="wi_base")
classes = whatif.class_names(base)
raw = whatif.load_base(base)
default = whatif.WhatIf(base=str(base))
raw_shift = ((raw.get("workload") or {}).get("shifts") or [{}])[0]

with st.form("whatif"):
    left, middle, right = st.columns(3)
    with left:
        st.markdown("**Traffic**")
        rate = st.number_input("arrival rate (requests/s)", 0.001, 100.0,
                               float(raw["workload"]["arrival"].get("rate", default.rate)), format="%.3f", key="wi_rate")
        duration = st.number_input("duration (simulated s)", 60.0, 86400.0,
                                   float(raw["workload"].get("duration_s", default.duration_s)), step=60.0,
                                   key="wi_duration")
        start_mix = {c: st.number_input(f"mix at start: {c}", 0.0, 100.0,
                                        float(raw["workload"]["mix"].get(c, 0.0)), key=f"wi_mix_{c}") for c in classes}
    with middle:
        st.markdown("**Shift at time T**")
        shift_at = st.number_input("T (simulated s; 0 = no shift)", 0.0, 86400.0, float(raw_shift.get("at_s", 0.0)),
                                   step=60.0, key="wi_shift_at")
        shift_rate = st.number_input("rate after T (requests/s; 0 = unchanged)", 0.0, 100.0,
                                     float(raw_shift.get("rate") or 0.0), format="%.3f", key="wi_shift_rate")
        shift_mix = {c: st.number_input(f"mix after T: {c}", 0.0, 100.0,
                                        float((raw_shift.get("mix") or {}).get(c, 0.0)), key=f"wi_shift_mix_{c}")
                     for c in classes}
    with right:
        st.markdown("**Service and SLO**")
        replicas = st.number_input("replicas", 1, 64, int((raw.get("replicas") or {}).get("count", 1)), key="wi_replicas")
        mode = st.selectbox("replica mode", ["serial", "batching"], key="wi_mode",
                            help="serial: batch-1 FIFO as the engine serves today; batching: continuous batching")
        max_batch = st.number_input("max batch (batching)", 1, 256, 8, key="wi_max_batch")
        slo_ttft = st.number_input("SLO TTFT (s; 0 = none)", 0.0, 600.0, float((raw.get("slo") or {}).get("ttft_s") or 0.0),
                                   key="wi_slo_ttft")
        slo_e2e = st.number_input("SLO end-to-end (s; 0 = none)", 0.0, 3600.0,
                                  float((raw.get("slo") or {}).get("e2e_s") or 0.0), key="wi_slo_e2e")
        percentile = st.number_input("SLO percentile", 50.0, 99.9, 95.0, key="wi_slo_pct")
    options = list(dict.fromkeys([*((raw.get("compare") or {}).get("policies") or []), *KNOWN_POLICIES]))
    policies = st.multiselect("policies to compare", options, default=list(default.policies), key="wi_policies")
    seed = st.number_input("seed", 0, 2**31 - 1, int(raw.get("seed", 0)), key="wi_seed")
    rates_text = st.text_input("capacity curve: fewest replicas meeting the SLO at these rates (requests/s, "
                               "comma-separated; empty: skip)", "", key="wi_capacity_rates")
    upload = st.file_uploader("calibrated profile (JSON from `adaptive-spec calibrate`; empty: the base's)",
                              type=["json"], key="wi_profile")
    submitted = st.form_submit_button("Run")

def uploaded_profile():
    if upload is None:
        return None
    try:
        return json.loads(upload.getvalue())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"profile: {upload.name} is not a JSON file ({exc})") from None


if submitted:
    try:
        profile = uploaded_profile()
        inputs = whatif.WhatIf(
            base=str(base), rate=rate, mix={c: w for c, w in start_mix.items() if w > 0}, duration_s=duration,
            shift_at_s=shift_at or None, shift_rate=shift_rate or None,
            shift_mix={c: w for c, w in shift_mix.items() if w > 0} or None, replicas=int(replicas), mode=mode,
            max_batch=int(max_batch), policies=tuple(policies), slo_ttft_s=slo_ttft or None,
            slo_e2e_s=slo_e2e or None, slo_percentile=percentile, seed=int(seed),
            bin_s=max(60.0, duration / 24), profile=profile)
        if not policies:
            raise ValueError("policies: pick at least one policy to simulate")
        scenario = whatif.build_scenario(inputs)
        rates = whatif.parse_rates(rates_text)
    except ValueError as exc:
        st.error(f"Cannot build the scenario: {exc}")
    else:
        bar = st.progress(0.0, "starting")
        runs = whatif.run_policies(scenario, lambda f, text: bar.progress(f, text))
        try:
            curve = whatif.capacity_curve(scenario, rates, lambda f, text: bar.progress(f, text)) if rates else None
        except ValueError as exc:
            st.error(f"Capacity curve not run: {exc}")
            curve = None
        st.session_state["wi_runs"] = (inputs, runs, curve)
        bar.empty()

if "wi_runs" in st.session_state:
    inputs, runs, curve = st.session_state["wi_runs"]
    over_time = pd.concat([run.over_time for run in runs], ignore_index=True)
    st.subheader("Latency over time (by arrival time)")
    metrics = [m for m in ("E2E p95", "E2E p50", "TTFT p95", "TTFT p50") if m in set(over_time["metric"])]
    # one percentile at a time: policies x percentiles on one chart is too many lines to read
    shown = st.radio("latency", metrics, horizontal=True, key="wi_latency") if metrics else None
    latency = over_time[over_time["metric"] == shown]
    shift = alt.Chart(pd.DataFrame({"t_s": [inputs.shift_at_s]})).mark_rule(strokeDash=[4, 4]).encode(x="t_s:Q") \
        if inputs.shift_at_s else None
    chart = alt.Chart(latency).mark_line(point=True).encode(
        x=alt.X("t_s:Q", title="simulated time (s)"), y=alt.Y("value:Q", title=f"{shown} latency (s)"),
        color=alt.Color("policy:N"), tooltip=["policy:N", "metric:N", alt.Tooltip("t_s:Q", title="t (s)"), alt.Tooltip("value:Q", format=".3f")],
    ).properties(height=300)
    st.altair_chart(chart + shift if shift is not None else chart)
    st.subheader("SLO attainment over time")
    attain = alt.Chart(over_time[over_time["metric"] == "SLO attainment"]).mark_line(point=True).encode(
        x=alt.X("t_s:Q", title="simulated time (s)"),
        y=alt.Y("value:Q", title="requests meeting the SLO", axis=alt.Axis(format="%")), color="policy:N",
    ).properties(height=220)
    st.altair_chart(attain + shift if shift is not None else attain)
    st.subheader("Summary")
    st.table(whatif.summary_table(runs).set_index("metric"))
    if curve is not None:
        st.subheader("Capacity: fewest replicas meeting the SLO")
        met = curve.dropna(subset=["replicas"])
        st.altair_chart(alt.Chart(met).mark_line(point=True).encode(
            x=alt.X("rate:Q", title="arrival rate (requests/s)"), y=alt.Y("replicas:Q", title="replicas"),
            color="policy:N", tooltip=["policy:N", "rate:Q", "replicas:Q"]).properties(height=220))
        st.dataframe(curve.astype({"replicas": "object"}).fillna("not met"), hide_index=True)
        if len(met) < len(curve):
            missed = curve[curve["replicas"].isna()]
            st.caption("SLO not met within the scenario's max replicas: " + ", ".join(
                f"{r.policy} at {r.rate:g}/s" for r in missed.itertuples()))
