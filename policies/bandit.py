"""Choosing among drafters when the best one changes: discounted UCB (Garivier & Moulines 2011).

Which drafter pays depends on the traffic: prompt lookup wins on copy-heavy prompts (code edits,
summaries quoting the input) and loses on open-ended ones, where a small draft model wins. A plain
UCB bandit averages over all history and would take ages to notice a shift; *discounted* UCB
multiplies every arm's statistics by ``discount`` at each play, so

- an arm's mean reward follows its recent performance (window ~``1 / (1 - discount)`` plays), and
- an arm left unplayed sees its discounted count ``N_i`` shrink, its exploration bonus
  ``exploration * sqrt(log(n) / N_i)`` grow, and gets retried: that is how a drafter that
  recovered is noticed.

Reward. The textbook arm mean is the discounted average of measured rewards; ``update`` keeps it
(``mean``), rewarding a play with the step's measured tokens per second over the measured plain
speed (1.0 = as fast as plain: one ``exploration`` constant then works on any model and machine).
The adaptive policy instead passes its own estimate as the mean (``select(..., means=...)``): the
cost model's predicted tokens/s for the drafter at its best ``k``, over plain speed. That is the
same quantity, built from the same measurements with the same forgetting, but (a) it is not
confounded by the ``k`` each play happened to use, (b) it has far less variance than a per-step
token count of 1..k+1, and (c) it is wiped when the change detector sees a collapse, whereas a
discounted average of rewards needs ~1 / (1 - discount) new plays to forget. The discounted
*counts*, and so the exploration bonus, are the bandit's own in both cases.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from policies.validation import check_positive, check_range


class DiscountedUCB:
    """Discounted UCB over a fixed list of arms. Deterministic: ties go to the earlier arm."""

    def __init__(self, arms: Sequence[str], discount: float, exploration: float) -> None:
        if not arms:
            raise ValueError("arms must name at least one arm, got arms=[]")
        check_range("discount", discount, 0.0, 1.0, low_open=True)
        check_positive("exploration", exploration)
        self.arms = list(arms)
        self.discount = discount
        self.exploration = exploration
        self.counts = {arm: 0.0 for arm in self.arms}  # discounted number of plays N_i
        self.sums = {arm: 0.0 for arm in self.arms}  # discounted sum of rewards

    def update(self, arm: str, reward: float) -> None:
        """Record one play of ``arm``; every arm's statistics decay by one play."""
        if arm not in self.counts:
            return  # a drafter forced by an override that this bandit does not choose among
        d = self.discount
        for a in self.arms:
            self.counts[a] *= d
            self.sums[a] *= d
        self.counts[arm] += 1.0
        self.sums[arm] += reward

    def reset_arm(self, arm: str) -> None:
        """Forget one arm (its environment changed), so it is explored afresh."""
        if arm in self.counts:
            self.counts[arm] = 0.0
            self.sums[arm] = 0.0

    def mean(self, arm: str) -> float:
        count = self.counts[arm]
        return self.sums[arm] / count if count > 0 else math.nan

    def bonus(self, arm: str, total: float | None = None) -> float:
        """``exploration * sqrt(log(n) / N_i)``; infinite for an arm never played. ``total`` is
        ``n``, the discounted number of all plays, when the caller has it already."""
        count = self.counts[arm]
        if count <= 1e-12:
            return math.inf
        if total is None:
            total = sum(self.counts.values())
        return self.exploration * math.sqrt(max(math.log(total), 0.0) / count)

    def index(self, arm: str, mean: float | None = None, total: float | None = None) -> float:
        """Upper confidence index ``mean + bonus``; ``mean`` defaults to the discounted reward mean."""
        bonus = self.bonus(arm, total)
        if math.isinf(bonus):
            return math.inf
        return (self.mean(arm) if mean is None else mean) + bonus

    def select(self, candidates: Iterable[str] | None = None, means: Mapping[str, float] | None = None) -> str:
        """The arm with the highest index among ``candidates`` (default: all arms).

        ``means`` optionally replaces the reward means by the caller's estimates (see above).
        """
        pool = self.arms if candidates is None else [a for a in candidates if a in self.counts]
        if not pool:
            raise ValueError(f"candidates must include at least one of {self.arms}, got none")
        means = means or {}
        total = sum(self.counts.values())
        best, best_index = pool[0], self.index(pool[0], means.get(pool[0]), total)
        for arm in pool[1:]:
            value = self.index(arm, means.get(arm), total)
            if value > best_index:
                best, best_index = arm, value
        return best
