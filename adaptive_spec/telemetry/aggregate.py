"""Per-interval step counters: what makes the store cheap enough to leave on.

A decode step on a CPU lasts 10-100 ms; writing a row for each would cost an insert per step and a
table that grows by millions of rows a day. Instead every step adds into the counters of its
series - (model, traffic key, drafter) - and a row is emitted once per ``interval_s`` of step
timestamps (and when a request ends, so that nothing waits in memory after the traffic stops).

Counters only, as in vLLM's ``SpecDecodingStats``; a reader sums rows and derives the rates::

    acceptance_rate          = accepted_tokens / draft_tokens
    mean_acceptance_length   = 1 + accepted_tokens / drafts
    position_i_acceptance    = accepted_per_pos[i] / proposed_per_pos[i]
    mean_k                   = k_sum / steps
    decode_tokens_per_s      = emitted_tokens / (draft_s + verify_s)
    time_per_output_token_s  = (draft_s + verify_s) / emitted_tokens

>>> agg = IntervalAggregator(interval_s=1.0)
>>> agg.add("m", "", StepOutcome("ngram", 4, 4, 2, 3, 0.01, 0.02, timestamp=10.2))
[]
>>> [row.accepted_tokens for row in agg.add("m", "", StepOutcome("ngram", 4, 4, 4, 5, 0.01, 0.02, timestamp=11.1))]
[2]
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from policies.outcome import StepOutcome


@dataclass(slots=True)
class IntervalCounters:
    """The additive counters of one series over one interval (one ``intervals`` row)."""

    model: str
    key: str
    drafter: str
    bucket: int  # floor(start_time / interval_s): which interval these steps fall in
    start_time: float
    end_time: float = 0.0
    steps: int = 0
    drafts: int = 0  # steps that proposed at least one token
    draft_tokens: int = 0
    accepted_tokens: int = 0
    emitted_tokens: int = 0
    k_sum: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    proposed_per_pos: list[int] = field(default_factory=list)
    accepted_per_pos: list[int] = field(default_factory=list)

    def add(self, outcome: StepOutcome) -> None:
        self.end_time = outcome.timestamp
        self.steps += 1
        self.k_sum += outcome.k
        self.emitted_tokens += outcome.emitted
        self.draft_s += outcome.draft_s
        self.verify_s += outcome.verify_s
        proposed = outcome.proposed
        if proposed:
            accepted = outcome.num_accepted
            self.drafts += 1
            self.draft_tokens += proposed
            self.accepted_tokens += accepted
            grow = proposed - len(self.proposed_per_pos)
            if grow > 0:
                self.proposed_per_pos.extend([0] * grow)
                self.accepted_per_pos.extend([0] * grow)
            for i in range(proposed):
                self.proposed_per_pos[i] += 1
            for i in range(accepted):
                self.accepted_per_pos[i] += 1

    def row(self, run_id: str) -> tuple:
        """The tuple for ``store.COLUMNS["intervals"]``."""
        return (run_id, self.model, self.key, self.drafter, self.start_time, self.end_time, self.steps,
                self.drafts, self.draft_tokens, self.accepted_tokens, self.emitted_tokens, self.k_sum,
                self.draft_s, self.verify_s, json.dumps(self.proposed_per_pos), json.dumps(self.accepted_per_pos))


class IntervalAggregator:
    """Counters per (model, key, drafter), cut into rows every ``interval_s`` of step time.

    Not thread-safe: the caller holds a lock (the recorder does). Memory is one
    ``IntervalCounters`` per series with steps since its last row.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s > 0):
            raise ValueError(f"interval_s must be a finite number > 0, got interval_s={interval_s!r}")
        self.interval_s = float(interval_s)
        self.open: dict[tuple[str, str, str], IntervalCounters] = {}

    def add(self, model: str, key: str, outcome: StepOutcome) -> list[IntervalCounters]:
        """Count one step; returns the rows it closed (the series' previous interval, if over)."""
        series = (model, key, outcome.drafter)
        bucket = int(outcome.timestamp // self.interval_s)
        counters = self.open.get(series)
        closed = []
        if counters is None or counters.bucket != bucket:
            if counters is not None:
                closed.append(counters)
            counters = self.open[series] = IntervalCounters(model, key, outcome.drafter, bucket, outcome.timestamp)
        counters.add(outcome)
        return closed

    def close(self, model: str | None = None, key: str | None = None) -> list[IntervalCounters]:
        """Close and return the open rows of (model, key), or of every series when both are None."""
        out = []
        for series in list(self.open):
            if model is None or series[:2] == (model, key):
                out.append(self.open.pop(series))
        return out
