"""Controllers that choose the drafter and draft length for each step. Pure Python: no torch."""

from policies.base import Policy
from policies.outcome import PLAIN, Action, StepOutcome
from policies.static import StaticPolicy

__all__ = ["PLAIN", "Action", "Policy", "StaticPolicy", "StepOutcome"]
