"""Rendering pieces the pages share: the store check, number formats, the alert banner."""

from __future__ import annotations

from datetime import datetime

import streamlit as st

from adaptive_spec.telemetry.access import StoreError
from dashboard import data

WINDOWS = {"5 min": 300.0, "15 min": 900.0, "1 h": 3600.0, "6 h": 6 * 3600.0, "24 h": 86400.0, "7 days": 7 * 86400.0}


def require_store() -> str:
    """The store's path when it can be read; otherwise an explanation on the page, and the page stops."""
    path = data.store_path()
    try:
        data.check_store(path)
    except StoreError as exc:
        if exc.kind == "missing":
            st.info(f"No telemetry store at `{path}` yet. Run the engine with `--telemetry sqlite:{path}` "
                    "(or pass `adaptive-spec dashboard --telemetry-db PATH` for another store); this page "
                    "fills in as soon as it has rows.")
        else:
            # the store's reasons name the telemetry commands' --db; here the option is --telemetry-db
            st.error(f"Cannot read the telemetry store: {str(exc).replace('--db ', '--telemetry-db ')}")
        st.stop()
    return str(path)


def fmt(value: float | None, spec: str = ".2f", scale: float = 1.0, unit: str = "") -> str:
    """A number for a metric tile; "-" for a rate over nothing (never "nan")."""
    if value is None or value != value:
        return "-"
    return format(value * scale, spec) + unit


def duration(seconds: float | None) -> str:
    """A latency for a tile: ms below a second (TPOT, TTFT), seconds above (E2E); "-" for none."""
    if seconds is None or seconds != seconds:
        return "-"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def stamp(t: float | None) -> str:
    return "-" if t is None or t != t else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def alert_banner(path: str) -> int:
    """One error box per firing alert (all models and keys: an alert elsewhere still matters); returns how many."""
    firing = data.alerts(path, data.window_start(0.0))
    firing = firing[firing["state"] == "firing"]
    for a in firing.itertuples():
        series = "/".join(x for x in (a.model, a.key, a.drafter) if x)
        st.error(f"**ALERT {a.rule}** firing on {series} since {stamp(a.fired_at)}: {a.message} "
                 f"(value {fmt(a.value, '.3g')}, threshold {fmt(a.threshold, '.3g')})")
    return len(firing)
