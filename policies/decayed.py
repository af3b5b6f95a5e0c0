"""Exponentially decayed statistics: how every estimator in ``policies/`` forgets.

Traffic changes (a copy-heavy prompt is followed by an open-ended one; a machine gets busy), so
each estimate weighs an observation ``n`` updates old by ``decay ** n``. A *half-life* is the
readable way to set ``decay``: after ``half_life`` updates an observation counts half. The
effective number of observations behind an estimate is at most ``1 / (1 - decay)`` (about
``1.44 * half_life``), which is what sets its noise.

Example: with ``half_life=50`` the estimate rests on at most ~72 observations, and a shift in the
true value is half absorbed after 50 updates.
"""

from __future__ import annotations

import math

from policies.validation import check_positive


def decay_for_half_life(half_life: float) -> float:
    """The per-update decay factor whose weight halves after ``half_life`` updates."""
    check_positive("half_life", half_life)
    return 0.5 ** (1.0 / half_life)


class DecayedMean:
    """A decayed mean, ``sum(w_i * x_i) / sum(w_i)`` with ``w_i = decay ** age_i``.

    ``prior`` is returned until the first observation; ``weight`` is the effective count.
    """

    __slots__ = ("decay", "weighted_sum", "weight", "prior")

    def __init__(self, half_life: float, prior: float = math.nan) -> None:
        self.decay = decay_for_half_life(half_life)
        self.weighted_sum = 0.0
        self.weight = 0.0
        self.prior = prior

    def update(self, value: float, weight: float = 1.0) -> None:
        self.weighted_sum = self.weighted_sum * self.decay + value * weight
        self.weight = self.weight * self.decay + weight

    @property
    def value(self) -> float:
        return self.weighted_sum / self.weight if self.weight > 0 else self.prior


class DecayedRatio:
    """A decayed ratio of sums, ``sum(w_i * num_i) / sum(w_i * den_i)``.

    The right way to average a rate such as tokens per second over steps of different lengths:
    the mean of per-step ratios would weigh a 10 ms step as much as a 100 ms one.
    """

    __slots__ = ("decay", "numerator", "denominator", "count")

    def __init__(self, half_life: float) -> None:
        self.decay = decay_for_half_life(half_life)
        self.numerator = 0.0
        self.denominator = 0.0
        self.count = 0  # undecayed number of updates since the last reset

    def update(self, numerator: float, denominator: float) -> None:
        self.numerator = self.numerator * self.decay + numerator
        self.denominator = self.denominator * self.decay + denominator
        self.count += 1

    def reset(self, numerator: float = 0.0, denominator: float = 0.0, count: int = 0) -> None:
        self.numerator, self.denominator, self.count = numerator, denominator, count

    @property
    def value(self) -> float:
        return self.numerator / self.denominator if self.denominator > 0 else math.nan
