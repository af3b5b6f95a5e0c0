"""The baseline to beat: transformers' heuristic draft-length schedule.

transformers' ``AssistedCandidateGenerator.update_candidate_strategy`` (``num_assistant_tokens_
schedule="heuristic"``) adjusts the draft length after every step by one rule:

    if every draft token was accepted:  k += 2
    else:                               k = max(1, k - 1)

It never turns speculation off, never switches drafter and never looks at costs: it climbs while
the draft agrees and backs off one token per disagreement, settling where about half the steps are
fully accepted.
"""

from __future__ import annotations

from policies.base import Policy
from policies.outcome import PLAIN, Action, StepOutcome
from policies.validation import check_int


class HeuristicPolicy(Policy):
    """transformers' +2 / -1 schedule over one fixed drafter.

    ``start_k`` defaults to 4, not transformers' ``num_assistant_tokens=20``: 20 suits a GPU where
    verifying 20 tokens costs about one forward; on a CPU, where 16 tokens cost ~2.5x one, the
    first steps at 20 would be slow and the rule needs ~10 rejections to walk down.
    ``max_k`` caps the climb (transformers has no cap) so a run of lucky steps cannot ask the
    engine for more drafts than its verify buffer holds.
    """

    name = "heuristic"

    def __init__(self, drafter: str, start_k: int = 4, max_k: int = 64) -> None:
        if not isinstance(drafter, str) or not drafter or drafter == PLAIN:
            raise ValueError(f"drafter must name a drafter other than {PLAIN!r}, got drafter={drafter!r}")
        check_int("max_k", max_k, 1)
        check_int("start_k", start_k, 1, max_k)
        self.drafter = drafter
        self.max_k = max_k
        self.k = start_k

    def decide(self) -> Action:
        return Action(self.drafter, self.k)

    def observe(self, outcome: StepOutcome) -> None:
        if outcome.drafter != self.drafter or outcome.k == 0:
            return  # a step forced by an override on another drafter says nothing about this one
        # clamped both ways: an override may have forced a k beyond max_k on this drafter
        if outcome.num_accepted == outcome.k:
            self.k = min(outcome.k + 2, self.max_k)
        else:
            self.k = min(max(1, outcome.k - 1), self.max_k)

    def k_for(self, drafter: str) -> int | None:
        return self.k if drafter == self.drafter else None
