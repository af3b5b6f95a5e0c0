"""Detecting an acceptance collapse: the Page-Hinkley test (Page 1954, Hinkley 1971).

A drafter's acceptance can fall off a cliff: a request stream switches from summarising a document
(prompt lookup accepts 0.9) to free chat (0.1), or a deployment swaps the target model. Decayed
estimates follow such a change only at the speed of their half-life; a change detector notices it
in a few dozen steps, lets the controller forget the old profile at once, and gives the operator an
event to alert on.

The test, for a *decrease* in the mean of ``x_1, x_2, ...`` (here: each speculative step's
acceptance per tested position, ``step_acceptance``)::

    m_t = sum_{i<=t} (x_i - mean_i + delta)     mean_i: the running mean of x_1..x_i
    M_t = max_{i<=t} m_i
    alarm when  M_t - m_t > lambda

Without change ``m_t`` drifts upward by ``delta`` per step, so noise must run against the drift to
raise an alarm: the false-alarm rate falls exponentially in ``delta * lambda / sigma^2``. After a
drop of ``D`` the statistic grows by ``D - delta`` per step, so detection takes about
``lambda / (D - delta)`` steps. ``delta`` and ``lambda`` are set in units of the measured standard
deviation ``sigma`` (floored), which makes the false-alarm rate the same for a drafter run at
``k = 1`` (Bernoulli steps, sigma ~0.5) and one at ``k = 8`` (sigma ~0.3).

The change point is estimated as the step where ``m`` peaked; the acceptance before and after it
are the means on either side, which the event reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.validation import check_int, check_positive, check_range


def step_acceptance(k: int, num_accepted: int) -> float:
    """One step's estimate of the per-position acceptance rate: accepted / tested positions.

    Positions tested are the accepted ones plus the first rejected one (when ``num_accepted < k``).
    Unlike ``num_accepted / k`` this does not fall just because ``k`` grew: at acceptance 0.6 a
    step with ``k = 8`` averages ~0.18 accepted per draft but ~0.45 per tested position.

    >>> step_acceptance(4, 4), step_acceptance(4, 1), step_acceptance(4, 0)
    (1.0, 0.5, 0.0)
    """
    if k <= 0:
        raise ValueError(f"k must be >= 1 for a speculative step, got k={k}")
    return num_accepted / min(num_accepted + 1, k)


@dataclass(frozen=True, slots=True)
class AcceptanceCollapse:
    """An alarm: ``drafter``'s acceptance fell from ``acceptance_before`` to ``acceptance_after``."""

    step: int  # the policy's step count when the alarm was raised
    timestamp: float  # StepOutcome.timestamp of the step that raised it
    drafter: str
    key: str  # traffic key the policy serves
    acceptance_before: float  # mean step_acceptance before the estimated change point
    acceptance_after: float  # mean step_acceptance since the change point
    steps_since_change: int  # detection delay estimate: steps between change point and alarm


@dataclass(frozen=True)
class DetectorConfig:
    # drift allowed per step, in sigmas: a quarter sigma ignores slow wander of the mean
    drift_sigmas: float = 0.25
    # alarm threshold, in sigmas: exp(2 * 0.25 * 20) ~ 2e4 steps between false alarms in theory,
    # ~20-40 steps to detect a drop of one sigma or more
    threshold_sigmas: float = 20.0
    # no alarm before this many samples: the running mean and sigma need them to settle
    min_samples: int = 30
    # floor on sigma: after a run of all-accepted steps (sigma ~0) one rejection is not a collapse
    min_sigma: float = 0.1
    # report only drops of at least this size; smaller shifts the decayed estimates absorb alone
    min_drop: float = 0.15

    def __post_init__(self) -> None:
        check_positive("drift_sigmas", self.drift_sigmas)
        check_positive("threshold_sigmas", self.threshold_sigmas)
        check_int("min_samples", self.min_samples, 2)
        check_range("min_sigma", self.min_sigma, 0.0, 1.0, low_open=True)
        check_range("min_drop", self.min_drop, 0.0, 1.0)


class PageHinkley:
    """One-sided (decrease) Page-Hinkley test over a stream of rates in [0, 1].

    ``update(x)`` returns ``(mean_before, mean_after, steps_since_change)`` on an alarm, else
    ``None``; after an alarm the detector restarts from scratch on the new regime.
    """

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self.total = 0.0
        self.sum_sq_dev = 0.0  # Welford's M2 for the running variance
        self.mean = 0.0
        self.statistic = 0.0  # m_t
        self.peak = 0.0  # M_t
        self.n_at_peak = 0
        self.total_at_peak = 0.0

    def sigma(self) -> float:
        var = self.sum_sq_dev / (self.n - 1) if self.n > 1 else 0.0
        return max(math.sqrt(var), self.config.min_sigma)

    def update(self, x: float) -> tuple[float, float, int] | None:
        cfg = self.config
        self.n += 1
        self.total += x
        delta_mean = x - self.mean
        self.mean += delta_mean / self.n
        self.sum_sq_dev += delta_mean * (x - self.mean)
        sigma = self.sigma()
        self.statistic += x - self.mean + cfg.drift_sigmas * sigma
        if self.statistic >= self.peak:
            self.peak = self.statistic
            self.n_at_peak, self.total_at_peak = self.n, self.total
            return None
        if self.n < cfg.min_samples or self.peak - self.statistic <= cfg.threshold_sigmas * sigma:
            return None
        after_n = self.n - self.n_at_peak
        before = self.total_at_peak / self.n_at_peak if self.n_at_peak else self.mean
        after = (self.total - self.total_at_peak) / after_n
        self.reset()
        if before - after < cfg.min_drop:
            return None
        return before, after, after_n
