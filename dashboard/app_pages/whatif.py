"""What-if: what would a traffic shift, more replicas or another controller do to latency?

Runs the simulator in the page (``dashboard/whatif.py``) on a scenario built from the form: each
policy on the same seeded traffic, so the only difference between the lines is the controller.
The traffic is synthetic (rate, class mix, a shift at T), or the requests the telemetry store
recorded, replayed ("replay my traffic": what would another policy or replica count have done?).
"""

import json

import altair as alt
import pandas as pd
import streamlit as st

from adaptive_spec.telemetry.access import StoreError
from dashboard import charts, data, ui, whatif

st.title("What-if")
st.caption("Simulated with the capacity simulator on a measured cost profile: each policy sees the same "
           "seeded requests. Times are simulated seconds from the start of the run.")

KNOWN_POLICIES = ["none", "static:ngram:2", "static:ngram:4", "static:ngram:8", "static:int8:2", "static:int8:4",
                  "heuristic:ngram", "adaptive"]
bases = sorted(whatif.SCENARIOS.glob("*.yaml"))


def base_changed() -> None:
    """Another base: its own replica mode and batch size, not the last base's (widgets keep their values)."""
    for key in ("wi_mode", "wi_max_batch"):
        st.session_state.pop(key, None)


base = st.selectbox("base scenario (profile and request classes)", bases, format_func=lambda p: p.name,
                    index=bases.index(whatif.DEFAULT_BASE) if whatif.DEFAULT_BASE in bases else 0, key="wi_base",
                    on_change=base_changed)
classes = whatif.class_names(base)
raw = whatif.load_base(base)
default = whatif.WhatIf(base=str(base))
raw_shift = ((raw.get("workload") or {}).get("shifts") or [{}])[0]
def synthetic_traffic() -> dict:
    st.markdown("**Traffic**")
    return dict(
        rate=st.number_input("arrival rate (requests/s)", 0.001, 100.0,
                             float(raw["workload"]["arrival"].get("rate", default.rate)), format="%.3f", key="wi_rate"),
        duration_s=st.number_input("duration (simulated s)", 60.0, 86400.0,
                                   float(raw["workload"].get("duration_s", default.duration_s)), step=60.0,
                                   key="wi_duration"),
        mix={c: st.number_input(f"mix at start: {c}", 0.0, 100.0, float(raw["workload"]["mix"].get(c, 0.0)),
                                key=f"wi_mix_{c}") for c in classes})


def synthetic_shift() -> dict:
    st.markdown("**Shift at time T**")
    return dict(
        shift_at_s=st.number_input("T (simulated s; 0 = no shift)", 0.0, 86400.0, float(raw_shift.get("at_s", 0.0)),
                                   step=60.0, key="wi_shift_at"),
        shift_rate=st.number_input("rate after T (requests/s; 0 = unchanged)", 0.0, 100.0,
                                   float(raw_shift.get("rate") or 0.0), format="%.3f", key="wi_shift_rate"),
        shift_mix={c: st.number_input(f"mix after T: {c}", 0.0, 100.0,
                                      float((raw_shift.get("mix") or {}).get(c, 0.0)), key=f"wi_shift_mix_{c}")
                   for c in classes})


def replay_source():
    """The store's recent requests for one model, or None (with the reason on the page)."""
    path = data.store_path()
    try:
        data.check_store(path)
    except StoreError as exc:
        st.info(f"Replay reads the telemetry store, which cannot be read: {exc}")
        return None
    pick = st.columns(2)
    window = pick[0].selectbox("requests of the last", list(ui.WINDOWS), index=2, key="wi_replay_window")
    since = data.window_start(ui.WINDOWS[window])
    models = sorted(data.series(str(path), since)["model"].unique())
    if not models:
        st.info(f"no traffic in the last {window} to replay")
        return None
    model = pick[1].selectbox("model", models, key="wi_replay_model")
    trace = data.trace(str(path), since, model)
    if trace.empty:
        st.info(f"no finished requests of {model} in the last {window} to replay")
        return None
    return trace


replay = st.radio("workload", ["synthetic traffic", "replay my traffic"], horizontal=True, key="wi_workload",
                  help="replay: the requests the telemetry store recorded in a window, each traffic key as a class")
trace = None
if replay == "replay my traffic":
    trace = replay_source()

with st.form("whatif"):
    left, middle, right = st.columns(3)
    if trace is not None:
        with left:
            st.markdown(f"**Replay: {len(trace):,} requests**")
            key_class = {}
            for key in sorted(trace["key"].unique()):
                chosen = st.selectbox(f"key {key or '(no key)'} as class", ["(leave out)", *classes],
                                      index=1 + (classes.index(key) if key in classes else 0), key=f"wi_class_{key}")
                if chosen != "(leave out)":
                    key_class[key] = chosen
        with middle:
            st.markdown("**Time**")
            time_scale = st.number_input("time scale (2 = the same requests twice as fast)", 0.01, 1000.0, 1.0,
                                         key="wi_time_scale")
    else:
        with left:
            traffic = synthetic_traffic()
        with middle:
            shift = synthetic_shift()
    with right:
        st.markdown("**Service and SLO**")
        replicas = st.number_input("replicas", 1, 64, int((raw.get("replicas") or {}).get("count", 1)), key="wi_replicas")
        base_replicas = raw.get("replicas") or {}
        modes = ["serial", "batching"]
        mode = st.selectbox("replica mode", modes, key="wi_mode",
                            index=modes.index(base_replicas.get("mode", "serial")) if base_replicas.get("mode") in modes else 0,
                            help="serial: one request at a time (serve's default); batching: continuous batching "
                                 "(serve --max-batch), which needs a profile calibrated with --batch-sizes")
        max_batch = st.number_input("max batch (batching)", 1, 256, int(base_replicas.get("max_batch", 8)), key="wi_max_batch")
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
        if trace is not None:
            rows = whatif.trace_rows(trace, key_class)
            if not rows:
                raise ValueError("replay: every traffic key is left out")
            span = (max(r["arrival_s"] for r in rows) - min(r["arrival_s"] for r in rows)) / time_scale
            workload = dict(replay=rows, time_scale=time_scale, shift_at_s=None, shift_mix=None)
            bin_s = max(1.0, span / 24)
        else:
            workload = dict(rate=traffic["rate"], mix={c: w for c, w in traffic["mix"].items() if w > 0},
                            duration_s=traffic["duration_s"], shift_at_s=shift["shift_at_s"] or None,
                            shift_rate=shift["shift_rate"] or None,
                            shift_mix={c: w for c, w in shift["shift_mix"].items() if w > 0} or None)
            bin_s = max(60.0, traffic["duration_s"] / 24)
        inputs = whatif.WhatIf(
            base=str(base), **workload, replicas=int(replicas), mode=mode, max_batch=int(max_batch),
            policies=tuple(policies), slo_ttft_s=slo_ttft or None, slo_e2e_s=slo_e2e or None,
            slo_percentile=percentile, seed=int(seed), bin_s=bin_s, profile=profile)
        if not policies:
            raise ValueError("policies: pick at least one policy to simulate")
        scenario = whatif.build_scenario(inputs)
        rates = whatif.parse_rates(rates_text)
    except ValueError as exc:
        st.error(f"Cannot build the scenario: {exc}")
    else:
        bar = st.progress(0.0, "starting")
        try:
            runs = whatif.run_policies(scenario, lambda f, text: bar.progress(f, text))
        except ValueError as exc:  # what the scenario cannot run (a profile that cannot price a batch)
            bar.empty()
            st.error(f"Cannot simulate the scenario: {exc}")
            st.stop()
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
    drafting = whatif.drafting_by_batch(runs)
    if inputs.mode == "batching" and not drafting.empty:
        st.subheader("Speculation by batch size")
        st.caption("share of each policy's decode steps that verified a draft, by sequences decoding in the "
                   "iteration: a batch cap cuts the drafts a fuller iteration cannot afford")
        st.altair_chart(charts.bars(drafting, "batch", "share", "sequences in the iteration", "steps drafting",
                                    color="policy", y_format=".0%"))
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
