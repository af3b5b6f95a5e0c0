"""Altair charts with units on every axis; one function per kind of chart the pages draw."""

from __future__ import annotations

import altair as alt
import pandas as pd

HEIGHT = 220


def time_axis(times: pd.Series) -> alt.Axis:
    """Every tick label readable on its own: Vega's default mixes "09:19" with ":30" and its overlap
    pruning can keep only the ":30" ones; the format follows the span shown, a few ticks at most."""
    span = (times.max() - times.min()) if len(times) else pd.Timedelta(0)
    if span > pd.Timedelta(days=1):
        fmt = "%d %b %H:%M"
    elif span > pd.Timedelta(minutes=10):
        fmt = "%H:%M"
    else:
        fmt = "%H:%M:%S"
    return alt.Axis(format=fmt, tickCount=5, labelOverlap="greedy")


def over_time(df: pd.DataFrame, y: str, y_title: str, color: str | None = None, y_format: str | None = None,
              rule: float | None = None, interpolate: str = "linear") -> alt.Chart:
    """A line per ``color`` value of ``y`` against wall-clock ``time``; ``rule``: a dashed threshold."""
    df = df[df[y].notna()]
    axis = alt.Axis(format=y_format) if y_format else alt.Axis()
    enc = dict(x=alt.X("time:T", title="time (local)", axis=time_axis(df["time"])), y=alt.Y(f"{y}:Q", title=y_title, axis=axis),
               tooltip=[alt.Tooltip("time:T", format="%H:%M:%S"), alt.Tooltip(f"{y}:Q", format=y_format or ".3f")])
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=color.replace("_", " "))
        enc["tooltip"].append(alt.Tooltip(f"{color}:N"))
    chart = alt.Chart(df).mark_line(point=True, interpolate=interpolate).encode(**enc).properties(height=HEIGHT)
    if rule is not None:
        chart += alt.Chart(pd.DataFrame({"y": [rule]})).mark_rule(strokeDash=[4, 4], color="red").encode(y="y:Q")
    return chart


def stacked_share(df: pd.DataFrame, y: str, color: str, y_title: str) -> alt.Chart:
    """Shares of ``y`` per ``color`` value, stacked to 100 % per time bucket (which drafter ran)."""
    return alt.Chart(df).mark_area().encode(
        x=alt.X("time:T", title="time (local)", axis=time_axis(df["time"])),
        y=alt.Y(f"sum({y}):Q", stack="normalize", title=y_title, axis=alt.Axis(format="%")),
        color=alt.Color(f"{color}:N", title=color.replace("_", " ")),
        tooltip=[alt.Tooltip("time:T", format="%H:%M:%S"), f"{color}:N", alt.Tooltip(f"sum({y}):Q", title=y)],
    ).properties(height=HEIGHT)


def bars(df: pd.DataFrame, x: str, y: str, x_title: str, y_title: str, color: str | None = None,
         y_format: str | None = None) -> alt.Chart:
    """Grouped bars (per-position acceptance: positions on x, one bar per drafter)."""
    enc = dict(x=alt.X(f"{x}:O", title=x_title, axis=alt.Axis(labelAngle=0)), y=alt.Y(f"{y}:Q", title=y_title,
                                                           axis=alt.Axis(format=y_format) if y_format else alt.Axis()),
               tooltip=[f"{x}:O", alt.Tooltip(f"{y}:Q", format=y_format or ".3f")])
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=color.replace("_", " "))
        enc["xOffset"] = alt.XOffset(f"{color}:N")
        enc["tooltip"].append(f"{color}:N")
    return alt.Chart(df).mark_bar().encode(**enc).properties(height=HEIGHT)
