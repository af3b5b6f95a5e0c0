"""Live: is speculation paying right now, and what is the controller doing about it?

Refreshes itself every ``data.TTL_S`` seconds (a fragment: only this view reruns, not the app).
Every figure is a rate derived from the store's counters over the chosen window (``data.py``).
"""

import pandas as pd
import streamlit as st

from adaptive_spec.telemetry import rollup
from dashboard import charts, data, ui

st.title("Live")
path = ui.require_store()


def key_label(key: str) -> str:
    return key or "(no key)"


def throughput(buckets: pd.DataFrame, plain_all_keys: pd.DataFrame, reqs: dict) -> None:
    spec = data.rates(buckets[buckets["drafter"] != data.PLAIN])
    plain = data.rates(plain_all_keys[plain_all_keys["drafter"] == data.PLAIN])
    speedup = data.ratio(spec["decode_tokens_per_s"] or 0, plain["decode_tokens_per_s"] or 0) \
        if spec["decode_tokens_per_s"] and plain["decode_tokens_per_s"] else None
    c = st.columns(4)
    c[0].metric("speculative decode tokens/s", ui.fmt(spec["decode_tokens_per_s"], ".1f"),
                help="emitted tokens / (draft s + verify s) of the speculative steps")
    c[1].metric("plain decoding tokens/s", ui.fmt(plain["decode_tokens_per_s"], ".1f"),
                help="the same model's plain steps (all keys): guard probes or plain configurations")
    c[2].metric("speedup vs plain", ui.fmt(speedup, ".2f", unit="x"),
                help="'-' until the window holds both speculative and plain steps")
    c[3].metric("request tokens/s", ui.fmt(data.ratio(reqs["new_tokens"], reqs["busy_s"]), ".1f"),
                help="new tokens / (TTFT + decode s), whole requests")


def acceptance(buckets: pd.DataFrame) -> None:
    spec = buckets[buckets["drafter"] != data.PLAIN]
    r = data.rates(spec)
    steps = int(buckets["steps"].sum())
    c = st.columns(4)
    c[0].metric("acceptance rate", ui.fmt(r["acceptance_rate"], ".3f"), help="accepted / draft tokens")
    c[1].metric("mean acceptance length", ui.fmt(r["mean_acceptance_length"], ".2f"), help="1 + accepted / drafts")
    c[2].metric("mean k (speculative steps)", ui.fmt(r["mean_k"], ".2f"), help="k asked for, per speculative step")
    c[3].metric("steps with speculation off", ui.fmt(data.ratio(steps - r["steps"], steps), ".1%"),
                help="plain steps / all steps")


def latency(reqs: dict) -> None:
    c = st.columns(6)
    i = 0
    for name, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        for q in (50, 95):
            c[i].metric(f"{label} p{q}", ui.duration(reqs["percentiles"][name][q]))
            i += 1
    how = "nearest-rank percentiles" if reqs["exact"] else (
        f"nearest-rank percentiles from the store's latency histograms (3 significant digits: within "
        f"{rollup.RESOLUTION:.1%} of the exact values)")
    st.caption(f"{reqs['requests']} requests finished in the window ({reqs['errors']} with errors); {how}")


def over_time(buckets: pd.DataFrame, positions: pd.DataFrame) -> None:
    spec = buckets[buckets["drafter"] != data.PLAIN].assign(
        series=lambda d: d["drafter"] + " · " + d["key"].map(key_label))
    by_series = data.rate_series(spec, ["series"])
    left, right = st.columns(2)
    with left:
        st.subheader("Acceptance rate")
        st.altair_chart(charts.over_time(by_series, "acceptance_rate", "accepted / draft tokens", "series",
                                         y_format=".0%"))
        st.subheader("Chosen draft length k")
        by_key = data.rate_series(spec.assign(key=spec["key"].map(key_label)), ["key"])
        st.altair_chart(charts.over_time(by_key, "mean_k", "mean k (tokens)", "key"))
        st.subheader("Acceptance per position")
        if positions.empty:
            st.info("no drafts in the window")
        else:
            pos = positions.groupby(["drafter", "position"], as_index=False)[["proposed", "accepted"]].sum()
            pos["acceptance"] = pos["accepted"] / pos["proposed"]
            pos["position"] += 1  # 1-based for people: "the 1st draft token"
            st.altair_chart(charts.bars(pos, "position", "acceptance", "draft position", "accepted / reached",
                                        "drafter", ".0%"))
    with right:
        st.subheader("Mean acceptance length")
        st.altair_chart(charts.over_time(by_series, "mean_acceptance_length", "tokens per draft", "series"))
        st.subheader("Drafter the controller chose")
        steps = buckets.groupby(["t", "drafter"], as_index=False)["steps"].sum()
        steps["time"] = pd.to_datetime(steps["t"], unit="s")
        st.altair_chart(charts.stacked_share(steps, "steps", "drafter", "share of steps"))
        st.subheader("Speculation off")
        off = buckets.assign(key=buckets["key"].map(key_label),
                             plain=buckets["steps"].where(buckets["drafter"] == data.PLAIN, 0))
        off = off.groupby(["t", "key"], as_index=False)[["plain", "steps"]].sum()
        off["share_off"] = off["plain"] / off["steps"]
        off["time"] = pd.to_datetime(off["t"], unit="s")
        st.altair_chart(charts.over_time(off, "share_off", "plain steps / steps", "key", y_format=".0%"))


def drafter_memory(gauges: pd.DataFrame) -> None:
    """What the suffix drafter holds of past outputs (bounded by ``--suffix-max-tokens`` per key)."""
    suffix = gauges[gauges["name"].str.startswith("suffix_history_")]
    if suffix.empty:
        return
    st.subheader("Suffix drafter history")
    latest = suffix.groupby("name")["value"].last()
    c = st.columns(4)
    c[0].metric("tokens held", ui.fmt(latest.get("suffix_history_tokens"), ",.0f"), help="past outputs' tokens, all keys")
    c[1].metric("outputs held", ui.fmt(latest.get("suffix_history_outputs"), ",.0f"))
    c[2].metric("traffic keys", ui.fmt(latest.get("suffix_history_keys"), ",.0f"))
    megabytes = latest.get("suffix_history_memory_bytes")
    c[3].metric("memory", ui.fmt(None if megabytes is None else megabytes / 1e6, ".1f", unit=" MB"),
                help="token buffer and index, as allocated")
    tokens = suffix[suffix["name"] == "suffix_history_tokens"].assign(
        time=lambda d: pd.to_datetime(d["time"], unit="s"), series="tokens held")
    st.altair_chart(charts.over_time(tokens, "value", "tokens", "series"))


def batching(by_rows: pd.DataFrame, buckets: pd.DataFrame) -> None:
    """How full the batch ran and how much of it speculated (``serve --max-batch`` above 1)."""
    if by_rows.empty or not by_rows["forwards"].sum():
        return
    st.subheader("Batching")
    st.caption("the batched engine's decode forwards of this model in the window, every traffic key (a forward's "
               "rows may be of any key)")
    total = by_rows.sum()
    priced = by_rows[[c for c in data.CAP_COLUMNS if c != "cap_none"]].sum(axis=1)  # per batch size
    cut = by_rows["cap_shortened"] + by_rows["cap_plain"]
    c = st.columns(4)
    c[0].metric("rows per forward", ui.fmt(data.ratio(total["row_steps"], total["forwards"]), ".2f"),
                help="requests decoding together, mean over the decode forwards")
    c[1].metric("rows' steps drafting", ui.fmt(data.ratio(total["drafting"], total["row_steps"]), ".1%"),
                help="rows' decode steps that verified a draft, all batch sizes")
    c[2].metric("forwards the cap cut", ui.fmt(data.ratio(cut.sum(), priced.sum()), ".1%"),
                help="of the forwards the batch cap priced: its drafts cut shorter or to nothing")
    c[3].metric("prompt tokens riding", ui.fmt(total["prompt_tokens"], ",.0f"),
                help="newcomers' prompt tokens prefilled inside decode forwards")
    shares = by_rows.assign(share=by_rows["drafting"] / by_rows["row_steps"], cut=cut / priced.where(priced > 0),
                            seconds_per_forward=by_rows["seconds"] / by_rows["forwards"])
    left, middle, right = st.columns(3)
    with left:
        st.caption("share of rows' steps that drafted, by rows in the forward")
        st.altair_chart(charts.bars(shares, "rows", "share", "rows in the forward", "rows' steps drafting", y_format=".0%"))
    with middle:
        st.caption("forwards whose drafts the batch cap cut, of those it priced (a lone row: never)")
        st.altair_chart(charts.bars(shares.dropna(subset=["cut"]), "rows", "cut", "rows in the forward", "forwards cut",
                                    y_format=".0%"))
    with right:
        st.caption("seconds per forward, by rows in the forward (a newcomer's prompt riding in it included)")
        st.altair_chart(charts.bars(shares, "rows", "seconds_per_forward", "rows in the forward", "seconds", y_format=".3f"))
    over = buckets.assign(time=pd.to_datetime(buckets["t"], unit="s"), series="rows per forward",
                          rows_per_forward=buckets["row_steps"] / buckets["forwards"])
    st.altair_chart(charts.over_time(over, "rows_per_forward", "rows per forward", "series"))


def decision_log(decisions: pd.DataFrame) -> None:
    st.subheader("Controller decisions")
    if decisions.empty:
        st.caption("no decisions recorded in the window")
        return
    log = decisions.sort_values("time", ascending=False).head(50).assign(
        time=lambda d: d["time"].map(ui.stamp), key=lambda d: d["key"].map(key_label)).fillna("")
    st.dataframe(log[["time", "key", "kind", "drafter", "value", "previous"]], hide_index=True)


def live() -> None:
    ui.alert_banner(path)
    pick = st.columns(3)
    window = pick[0].selectbox("window", list(ui.WINDOWS), index=1, key="live_window")
    since = data.window_start(ui.WINDOWS[window])
    choices = data.series(path, since)
    if choices.empty:
        st.info(f"no traffic in the last {window}")
        return
    model = pick[1].selectbox("model", sorted(choices["model"].unique()), key="live_model")
    keys = pick[2].multiselect("traffic key", sorted(choices.loc[choices["model"] == model, "key"].unique()),
                               format_func=key_label, placeholder="all keys", key="live_keys")
    keys = tuple(sorted(keys))
    bucket_s = data.bucket_for(ui.WINDOWS[window])
    buckets = data.interval_buckets(path, since, bucket_s, model, keys)
    if buckets.empty:
        st.info(f"no traffic in the last {window} for {model}" + (f", keys {', '.join(keys)}" if keys else ""))
        return
    reqs = data.request_stats(path, since, model, keys, data.EXACT_PERCENTILES_MAX_REQUESTS)
    throughput(buckets, data.interval_buckets(path, since, bucket_s, model), reqs)
    acceptance(buckets)
    latency(reqs)
    refresh = "not refreshing" if st.query_params.get("refresh") == "off" else f"refreshed every {data.TTL_S:g} s"
    st.caption(f"last {window}, {bucket_s:g} s buckets, {refresh}")
    over_time(buckets, data.position_acceptance(path, since, model, keys))
    drafter_memory(data.gauges(path, since, model))
    batching(data.batch_by_rows(path, since, model), data.batch_buckets(path, since, bucket_s, model))
    decision_log(data.decisions(path, since, model, keys))


# ?refresh=off: a still page (screenshots, a printed report); otherwise the view reruns on its own
st.fragment(run_every=None if st.query_params.get("refresh") == "off" else data.TTL_S)(live)()
