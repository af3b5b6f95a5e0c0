"""Progress of a long simulation, on stderr: a bar on a terminal, a line now and then otherwise.

A ``Progress`` is the ``on_arrival`` callback of ``simulate``: it sees each request as the arrival
process releases it, so it costs nothing per decode step. How far the run is: the larger of two
shares, simulated time (the latest arrival against the workload's duration: right however wrong
the request estimate is) and requests (arrived against expected: right when ``max_requests`` stops
arrivals early). The time left assumes the rest goes as fast as so far (the drain after the last
arrival is not counted).

Nothing is printed for a run shorter than ``delay_s``: a bar or a line only appears once the run
has lasted that long, so short runs (and tests) see no output at all. On a terminal the bar is
``rich``'s and disappears when the run ends; elsewhere (a log, a pipe, CI) one line every
``interval_s`` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from simulator.entities import Request


class Progress:
    """``on_arrival`` callback that reports how far a run is; call ``close`` when the run ends."""

    def __init__(self, duration_s: float, expected_requests: int, stream: TextIO | None = None,
                 interval_s: float = 10.0, delay_s: float = 2.0) -> None:
        self.duration_s = duration_s  # simulated seconds of arrivals: 100 % when the last one arrives
        self.expected_requests = expected_requests  # shown beside the count, for scale
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s  # seconds between lines when not on a terminal
        self.delay_s = delay_s  # nothing is shown before the run has lasted this long
        self.arrived = 0
        self._started = time.monotonic()
        self._next_report = self._started + delay_s
        self._bar = None  # rich Progress, once shown
        self._task = None
        self._terminal = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, request: Request) -> None:
        self.arrived += 1
        if self.arrived % 256 == 0:  # look at the clock now and then only: it is not free
            now = time.monotonic()
            if now >= self._next_report:
                self._report(request.arrival_s, now)

    def _report(self, simulated_s: float, now: float) -> None:
        by_time = simulated_s / self.duration_s if self.duration_s > 0 else 1.0
        fraction = min(1.0, max(by_time, self.arrived / max(1, self.expected_requests)))
        elapsed = now - self._started
        if self._terminal and self._show_bar(fraction):
            self._next_report = now + 0.2
            return
        left = elapsed * (1 - fraction) / fraction if fraction > 0 else float("nan")
        self.stream.write(
            f"simulate: {fraction:.0%} ({self.arrived:,} of ~{self.expected_requests:,} requests arrived, "
            f"{simulated_s:,.0f} of {self.duration_s:,.0f} simulated s), {elapsed:,.0f} s elapsed, "
            f"about {left:,.0f} s left\n")
        self.stream.flush()
        self._next_report = now + self.interval_s

    def _show_bar(self, fraction: float) -> bool:
        if self._bar is None:
            try:
                from rich.console import Console
                from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            except ImportError:
                return False
            self._bar = Bar(TextColumn("simulate"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                            TextColumn("{task.fields[arrived]} requests"), TimeElapsedColumn(), TimeRemainingColumn(),
                            console=Console(file=self.stream), transient=True)
            self._task = self._bar.add_task("simulate", total=1.0, arrived="0")
            self._bar.start()
        self._bar.update(self._task, completed=fraction, arrived=f"{self.arrived:,}")
        return True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
