"""Time axes label every tick on its own (no bare ":30" ticks), in a format that fits the span shown."""

import pandas as pd
import pytest

from dashboard import charts


@pytest.mark.parametrize("span, fmt", [(pd.Timedelta(minutes=4), "%H:%M:%S"), (pd.Timedelta(hours=1), "%H:%M"),
                                       (pd.Timedelta(days=3), "%d %b %H:%M")])
def test_time_axis_format_follows_the_span(span, fmt):
    times = pd.to_datetime([0, span.total_seconds()], unit="s")
    df = pd.DataFrame({"time": times, "acceptance_rate": [0.5, 0.6], "key": ["a", "a"]})
    for chart in (charts.over_time(df, "acceptance_rate", "accepted / draft tokens", "key"),
                  charts.stacked_share(df.assign(steps=[1, 2], drafter="ngram"), "steps", "drafter", "share of steps")):
        x = chart.to_dict()["encoding"]["x"]
        assert x["axis"]["format"] == fmt
        assert x["title"] == "time (local)"


def test_an_empty_frame_still_draws():
    df = pd.DataFrame({"time": pd.to_datetime([], unit="s"), "acceptance_rate": []})
    assert charts.over_time(df, "acceptance_rate", "accepted / draft tokens").to_dict()["encoding"]["x"]["axis"]["format"]
