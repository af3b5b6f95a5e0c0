"""Controllers that choose the drafter and draft length for each step. Pure Python: no torch.

Start with ``make_policy`` (specs ``static:<drafter>:<k>``, ``heuristic:<drafter>``, ``adaptive``)
or ``PolicyRegistry`` (one policy per traffic key). The early-stop classes live in
``policies.early_stop`` and are loaded on first access, since they import scikit-learn.
"""

from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.base import Policy
from policies.change import AcceptanceCollapse
from policies.heuristic import HeuristicPolicy
from policies.outcome import PLAIN, Action, StepOutcome
from policies.registry import OverridePolicy, PolicyRegistry, make_policy
from policies.static import StaticPolicy

_LAZY = {"ConfidenceThreshold", "LearnedEarlyStop", "LearnedEarlyStopConfig", "DraftFeatures"}


def __getattr__(name: str):
    if name in _LAZY:
        from policies import early_stop

        return getattr(early_stop, name)
    raise AttributeError(f"module 'policies' has no attribute {name!r}")


__all__ = [
    "PLAIN", "AcceptanceCollapse", "Action", "AdaptiveConfig", "AdaptivePolicy", "ConfidenceThreshold",
    "DraftFeatures", "HeuristicPolicy", "LearnedEarlyStop", "LearnedEarlyStopConfig", "OverridePolicy",
    "Policy", "PolicyRegistry", "StaticPolicy", "StepOutcome", "make_policy",
]
