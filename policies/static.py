"""The simplest controller: always the same drafter and draft length."""

from __future__ import annotations

from policies.base import Policy
from policies.outcome import PLAIN, Action


class StaticPolicy(Policy):
    """Fixed drafter and k. ``StaticPolicy("none", 0)`` is plain decoding."""

    name = "static"
    stateless = True

    def __init__(self, drafter: str = PLAIN, k: int = 0) -> None:
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got k={k!r}")
        if drafter == PLAIN:
            k = 0
        self.action = Action(drafter, k)

    def decide(self) -> Action:
        return self.action

    def k_for(self, drafter: str) -> int | None:
        return self.action.k if drafter == self.action.drafter else None
