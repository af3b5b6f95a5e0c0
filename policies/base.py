"""The interface every controller implements.

A policy is asked what to do before each step (`decide`) and told what happened after it
(`observe`). The engine and the simulator drive the same objects the same way.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from policies.outcome import Action, StepOutcome


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self) -> Action:
        """Return the action for the next step."""
        ...

    def observe(self, outcome: StepOutcome) -> None:
        """Learn from the step just taken."""
        ...
