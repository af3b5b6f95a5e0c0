"""Controllers: per traffic key, what the controller has seen and decided, read from the store.

The controller's own estimates live in the serving process; this page shows the same quantities
measured from outside (the ``intervals`` counters and ``decisions`` rows): acceptance per draft
position and drafter, measured step costs, the chosen k, whether speculation is on, and the last
acceptance collapse its change detector raised.
"""

import json

import pandas as pd
import streamlit as st

from dashboard import charts, data, ui

st.title("Controllers")
path = ui.require_store()


def last_decision(decisions: pd.DataFrame, key: str, kind: str):
    rows = decisions[(decisions["key"] == key) & (decisions["kind"] == kind)]
    return None if rows.empty else rows.iloc[-1]


def collapse_detail(detail) -> dict:
    """A collapse decision's ``detail`` (the event's fields as a JSON object); {} when it is not one,
    so that one malformed row (another writer, a truncated value) does not stop the page."""
    try:
        event = json.loads(detail) if isinstance(detail, (str, bytes)) else None
    except ValueError:
        return {}
    if not isinstance(event, dict):
        return {}
    # the acceptances are shown as numbers: anything else is shown as "-"
    return {k: (None if k.startswith("acceptance_") and (isinstance(v, bool) or not isinstance(v, (int, float))) else v)
            for k, v in event.items()}


def costs(buckets: pd.DataFrame) -> pd.DataFrame:
    """Measured per drafter: mean k, seconds per draft and per verify, tokens per step."""
    g = buckets.groupby("drafter", as_index=False).sum(numeric_only=True)
    return pd.DataFrame({
        "drafter": g["drafter"], "steps": g["steps"],
        "mean k": (g["k_sum"] / g["steps"]).round(2),
        "draft ms / step": (1e3 * g["draft_s"] / g["steps"]).round(2),
        "verify ms / step": (1e3 * g["verify_s"] / g["steps"]).round(2),
        "tokens / step": (g["emitted_tokens"] / g["steps"]).round(2),
        "acceptance": (g["accepted_tokens"] / g["draft_tokens"].where(g["draft_tokens"] > 0)).round(3),
    })


def one_key(key: str, buckets: pd.DataFrame, positions: pd.DataFrame, decisions: pd.DataFrame) -> None:
    st.subheader(f"key {key or '(no key)'}")
    drafter, spec = last_decision(decisions, key, "drafter"), last_decision(decisions, key, "speculation")
    collapse = last_decision(decisions, key, "collapse")
    c = st.columns(3)
    # no drafter decision: a series that never speculated (the tracker records switches of drafter)
    busiest = buckets.groupby("drafter")["steps"].sum().idxmax()
    c[0].metric("active drafter", drafter["value"] if drafter is not None else busiest)
    c[1].metric("speculation", spec["value"] if spec is not None else "-",
                help="on when >= 50% of the last 32 steps were speculative")
    c[2].metric("last collapse", ui.stamp(collapse["time"]) if collapse is not None else "none")
    event = collapse_detail(collapse["detail"]) if collapse is not None else {}
    if event:
        st.caption(f"collapse of {event.get('drafter')}: acceptance {ui.fmt(event.get('acceptance_before'), '.2f')} "
                   f"-> {ui.fmt(event.get('acceptance_after'), '.2f')}")
    left, right = st.columns(2)
    with left:
        st.markdown("**Measured step costs**")
        st.dataframe(costs(buckets), hide_index=True)
    with right:
        st.markdown("**Acceptance per position**")
        pos = positions[positions["key"] == key]
        if pos.empty:
            st.caption("no drafts in the window")
        else:
            pos = pos.assign(acceptance=pos["accepted"] / pos["proposed"], position=pos["position"] + 1)
            st.altair_chart(charts.bars(pos, "position", "acceptance", "draft position", "accepted / reached",
                                        "drafter", ".0%"))


window = st.selectbox("window", list(ui.WINDOWS), index=2, key="ctl_window")
since = data.window_start(ui.WINDOWS[window])
choices = data.series(path, since)
if choices.empty:
    st.info(f"no traffic in the last {window}")
    st.stop()
model = st.selectbox("model", sorted(choices["model"].unique()), key="ctl_model")
buckets = data.interval_buckets(path, since, ui.WINDOWS[window], model)
positions = data.position_acceptance(path, since, model)
decisions = data.decisions(path, since, model)
for key in sorted(buckets["key"].unique()):
    one_key(key, buckets[buckets["key"] == key], positions, decisions)
