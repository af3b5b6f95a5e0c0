"""How many tokens a speculative step yields: the acceptance profile and its expectation.

Leviathan et al. (2023) assume every draft token is accepted independently with the same rate
``a``; a step with draft length ``k`` then emits, in expectation,

    E[tokens] = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)

(the accepted prefix plus one recovered or bonus token). Real drafters are not that uniform: an
n-gram match is either right for a whole phrase or wrong from its first token, and a small model
drifts further from the target the deeper it drafts. So the controller measures a *per-position
profile*: ``a[i]`` is the probability that draft token ``i`` is accepted given that tokens
``0..i-1`` were, and

    E[tokens] = 1 + sum_{j=1..k} prod_{i<j} a[i].

Acceptance is always a prefix, so a step with ``num_accepted = n`` tells us positions ``0..n-1``
were accepted (given they were reached) and position ``n`` was not (when ``n < k``); positions
past ``n`` were never reached and tell us nothing. A drafter that proposed fewer than ``k``
tokens (an n-gram miss, an early stop) counts as a rejection at ``proposed``: for choosing ``k``
the question is how many tokens asking for ``k`` yields, and a missing proposal yields none.

Deep positions are seen rarely, so each position's estimate is shrunk toward the drafter's pooled
rate (the iid rate of Leviathan et al.), and the pooled rate toward a prior: unexplored positions
inherit the pooled rate, which is exactly how the iid formula extrapolates.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.decayed import decay_for_half_life
from policies.validation import check_int, check_positive, check_range


def expected_tokens_iid(acceptance_rate: float, k: int) -> float:
    """Leviathan et al.'s expected tokens per step, ``(1 - a^(k+1)) / (1 - a)``.

    >>> expected_tokens_iid(0.5, 2)  # 1 + 0.5 + 0.25
    1.75
    >>> expected_tokens_iid(1.0, 3)  # every draft accepted, plus the bonus token
    4.0
    """
    if acceptance_rate >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance_rate ** (k + 1)) / (1.0 - acceptance_rate)


def expected_tokens_by_k(conditional_acceptance: Sequence[float]) -> list[float]:
    """Expected tokens per step for every ``k`` from 0 to ``len(conditional_acceptance)``.

    ``conditional_acceptance[i]`` is P(position i accepted | positions < i accepted).
    Entry ``k`` of the result is ``1 + sum_{j=1..k} prod_{i<j} a[i]``.

    >>> expected_tokens_by_k([0.5, 0.5])  # k=0: 1; k=1: 1 + 0.5; k=2: 1 + 0.5 + 0.25
    [1.0, 1.5, 1.75]
    >>> expected_tokens_by_k([0.75, 0.5])  # a confident first token, a shakier second
    [1.0, 1.75, 2.125]
    """
    totals = [1.0]
    total = reach = 1.0  # reach: P(all positions so far accepted)
    for rate in conditional_acceptance:
        reach *= rate
        total += reach
        totals.append(total)
    return totals


class AcceptanceProfile:
    """A decayed, shrunk estimate of one drafter's per-position conditional acceptance.

    Counts decay by ``0.5 ** (1 / half_life_steps)`` per observed step. Estimates:

    - pooled rate ``a = (accepted + prior_weight * prior_rate) / (trials + prior_weight)``
    - position rate ``a[i] = (accepted[i] + shrink_weight * a) / (trials[i] + shrink_weight)``
    """

    __slots__ = ("max_k", "decay", "prior_rate", "prior_weight", "shrink_weight", "trials",
                 "accepted", "total_trials", "total_accepted", "steps")

    def __init__(self, max_k: int, half_life_steps: float, prior_rate: float, prior_weight: float,
                 shrink_weight: float) -> None:
        check_int("max_k", max_k, 1)
        check_positive("half_life_steps", half_life_steps)
        check_range("prior_rate", prior_rate, 0.0, 1.0, low_open=True, high_open=True)
        check_positive("prior_weight", prior_weight)
        check_positive("shrink_weight", shrink_weight)
        self.max_k = max_k
        self.decay = decay_for_half_life(half_life_steps)
        self.prior_rate = prior_rate
        self.prior_weight = prior_weight
        self.shrink_weight = shrink_weight
        self.reset()

    def reset(self) -> None:
        """Forget everything (after a detected collapse the old profile is wrong, not just old)."""
        self.trials = [0.0] * self.max_k
        self.accepted = [0.0] * self.max_k
        self.total_trials = 0.0
        self.total_accepted = 0.0
        self.steps = 0

    def update(self, k: int, num_accepted: int) -> None:
        """Record one step that asked for ``k`` drafts and had ``num_accepted`` accepted."""
        if k <= 0:
            return
        decay = self.decay
        trials, accepted = self.trials, self.accepted
        for i in range(self.max_k):
            trials[i] *= decay
            accepted[i] *= decay
        reached = min(num_accepted, self.max_k)
        for i in range(reached):
            trials[i] += 1.0
            accepted[i] += 1.0
        rejected_at = num_accepted < k and num_accepted < self.max_k
        if rejected_at:
            trials[num_accepted] += 1.0
        self.total_trials = self.total_trials * decay + reached + rejected_at
        self.total_accepted = self.total_accepted * decay + reached
        self.steps += 1

    def soften(self, max_trials: float) -> None:
        """Scale the evidence down to at most ``max_trials`` pooled trials, keeping every rate.

        Called when a new request starts: what earlier requests showed stays as the prior (the
        rates are unchanged), but it weighs no more than a few steps of the new request, whose own
        acceptance (a prompt that can be copied, or one that cannot) then dominates within steps.
        """
        if self.total_trials <= max_trials:
            return
        factor = max_trials / self.total_trials
        self.trials = [t * factor for t in self.trials]
        self.accepted = [a * factor for a in self.accepted]
        self.total_trials *= factor
        self.total_accepted *= factor

    @property
    def pooled_rate(self) -> float:
        """The iid acceptance rate of Leviathan et al., shrunk toward the prior."""
        return (self.total_accepted + self.prior_weight * self.prior_rate) / (
            self.total_trials + self.prior_weight
        )

    def conditional_rates(self) -> list[float]:
        """``a[i]`` for ``i in 0..max_k-1``: P(position i accepted | earlier positions accepted)."""
        pooled = self.pooled_rate
        shrink = self.shrink_weight
        return [(s + shrink * pooled) / (n + shrink) for s, n in zip(self.accepted, self.trials)]
