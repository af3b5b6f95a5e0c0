"""Controller state as seen from its steps: speculation on/off, active drafter, current k.

The policy's own state (``AdaptivePolicy.state()``) is not part of the observer hooks, and a
static or simulated policy has none, so telemetry reads the controller's decisions off the
``StepOutcome`` stream, the one thing every policy produces. Each step records what the policy
decided (``decided_drafter``, ``decided_k``) before the token budget capped ``k`` or the match
gate cut the draft, and that decision is what is tracked:

- *current k*: the decided ``k`` of the last speculative step.
- *active drafter*: the decided drafter of the last speculative step.
- *speculation on*: at least ``on_fraction`` of the last ``window`` steps were decided
  speculative (a drafter other than ``none`` with ``k > 0``). The window smooths out the
  adaptive guard's probes: plain probes while speculation is on and bursts of speculative probes
  while it is off are both a small share of a window, and stay on their side of the threshold.

A record without a decision (written by an older caller) counts as decided as done, except a
drafter with ``k = 0``, which only the budget can produce and is left out.

A change of either becomes a ``Decision``; the very first state of a series is reported with
``previous=None`` so that readers can tell an initial state from a switch.

>>> tracker = SpeculationTracker(window=4, min_steps=2)
>>> step = StepOutcome("ngram", 4, 4, 4, 5, 0.0, 0.0)
>>> [(d.kind, d.value, d.previous) for d in tracker.update("m", "", step)]
[('drafter', 'ngram', None)]
>>> [(d.kind, d.value, d.previous) for d in tracker.update("m", "", step)]
[('speculation', 'on', None)]
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from policies.outcome import PLAIN, StepOutcome


@dataclass(frozen=True, slots=True)
class Decision:
    """One ``decisions`` row: a controller decision (or a policy event) for a series."""

    time: float
    model: str
    key: str
    kind: str  # "speculation" | "drafter" | "collapse"
    drafter: str | None
    value: str  # speculation: "on"/"off"; drafter: the new drafter; collapse: acceptance after
    previous: str | None  # the state before (None: the series' first state)
    detail: str = ""  # JSON with the event's fields (collapse)

    def row(self, run_id: str) -> tuple:
        return (run_id, self.time, self.model, self.key, self.kind, self.drafter, self.value, self.previous,
                self.detail)


class _SeriesState:
    __slots__ = ("recent", "spec_count", "enabled", "drafter", "k")

    def __init__(self, window: int) -> None:
        self.recent: deque[bool] = deque(maxlen=window)
        self.spec_count = 0
        self.enabled: bool | None = None
        self.drafter: str | None = None
        self.k = 0


def decided(outcome: StepOutcome) -> tuple[str, int]:
    """(drafter, k) as the policy chose them for this step."""
    if outcome.decided_drafter is not None and outcome.decided_k is not None:
        return outcome.decided_drafter, outcome.decided_k
    return outcome.drafter, outcome.k


def is_speculative(outcome: StepOutcome) -> bool:
    drafter, k = decided(outcome)
    return k > 0 and drafter != PLAIN


class SpeculationTracker:
    """Per (model, key): speculation on/off, active drafter and k; LRU-bounded to ``max_series``."""

    def __init__(self, window: int = 32, on_fraction: float = 0.5, min_steps: int = 8,
                 max_series: int = 1024) -> None:
        if not 1 <= min_steps <= window:
            raise ValueError(f"need 1 <= min_steps <= window, got min_steps={min_steps}, window={window}")
        if not 0.0 < on_fraction <= 1.0:
            raise ValueError(f"on_fraction must be in (0, 1], got on_fraction={on_fraction}")
        self.window, self.on_fraction, self.min_steps, self.max_series = window, on_fraction, min_steps, max_series
        self.series: OrderedDict[tuple[str, str], _SeriesState] = OrderedDict()

    def state(self, model: str, key: str) -> tuple[bool | None, str | None, int]:
        """(speculation on, active drafter, current k) of a series; on is None before ``min_steps``."""
        s = self.series.get((model, key))
        return (None, None, 0) if s is None else (s.enabled, s.drafter, s.k)

    def update(self, model: str, key: str, outcome: StepOutcome) -> list[Decision]:
        """Feed one step; returns the decisions it revealed (usually none)."""
        drafter, k = decided(outcome)
        if k == 0 and drafter != PLAIN:
            return []  # an old record capped by the token budget, not a decision
        s = self.series.get((model, key))
        if s is None:
            s = self.series[(model, key)] = _SeriesState(self.window)
            if len(self.series) > self.max_series:
                self.series.popitem(last=False)
        spec = is_speculative(outcome)
        if len(s.recent) == s.recent.maxlen and s.recent[0]:
            s.spec_count -= 1
        s.recent.append(spec)
        s.spec_count += spec
        out: list[Decision] = []
        if spec:
            s.k = k
            if drafter != s.drafter:
                out.append(Decision(outcome.timestamp, model, key, "drafter", drafter, drafter, s.drafter))
                s.drafter = drafter
        if len(s.recent) >= self.min_steps:
            enabled = s.spec_count >= self.on_fraction * len(s.recent)
            if enabled != s.enabled:
                previous = None if s.enabled is None else ("on" if s.enabled else "off")
                out.append(Decision(outcome.timestamp, model, key, "speculation", s.drafter,
                                    "on" if enabled else "off", previous))
                s.enabled = enabled
        return out
