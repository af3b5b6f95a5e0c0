"""The engine's recent step costs, handed to controllers that start cold.

What a step costs is a property of the engine and the machine (the target's forward at each
length, each drafter's time per token), shared by every traffic key; how often drafts are accepted
is a property of the traffic. A controller for a new traffic key (or a new policy object passed to
``generate``) would otherwise learn the costs from scratch: one plain step to measure plain speed,
and one try of every drafter whose cost it does not know. On a CPU the try of a model drafter is
dear: it catches up on the whole prompt, then drafts each token at a sizeable fraction of a
target step, where the n-gram lookup it displaces costs next to nothing; on a short request that
is a visible share of the request's time.

``StepCostMemory`` keeps the last few steps at every verified length and of every drafter, so a
cold controller's cost model (``AdaptivePolicy.warm_start``) starts from measurements instead of
its priors. Acceptance is never carried over.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from policies.outcome import StepOutcome

PER_LENGTH = 4  # steps kept per verified length: enough for the cost model to trust that length
PER_DRAFTER = 4  # steps kept per drafter: its draft seconds at the lengths it was run


class StepCostMemory:
    """Bounded memory of recent steps: ``PER_LENGTH`` per verified length, ``PER_DRAFTER`` per drafter."""

    def __init__(self) -> None:
        self._by_length: dict[int, deque[StepOutcome]] = {}
        self._by_drafter: dict[str, deque[StepOutcome]] = {}

    def record(self, outcome: StepOutcome) -> None:
        by_length = self._by_length.get(outcome.proposed)
        if by_length is None:
            by_length = self._by_length[outcome.proposed] = deque(maxlen=PER_LENGTH)
        by_length.append(outcome)
        if outcome.k > 0:
            by_drafter = self._by_drafter.get(outcome.drafter)
            if by_drafter is None:
                by_drafter = self._by_drafter[outcome.drafter] = deque(maxlen=PER_DRAFTER)
            by_drafter.append(outcome)

    def outcomes(self) -> list[StepOutcome]:
        """Every kept step once, oldest first."""
        kept = {id(o): o for group in (*self._by_length.values(), *self._by_drafter.values()) for o in group}
        return sorted(kept.values(), key=lambda o: o.timestamp)

    def __iter__(self) -> Iterator[StepOutcome]:
        return iter(self.outcomes())

    def __len__(self) -> int:
        """Steps recorded per verified length (a step may also be among its drafter's)."""
        return sum(len(group) for group in self._by_length.values())
