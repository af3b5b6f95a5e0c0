"""An online cost model: seconds to draft ``k`` tokens and to verify them, measured, not assumed.

Three quantities, each fitted from ``StepOutcome.draft_s`` / ``verify_s`` with forgetting:

- ``plain_s``: one target forward of one token (steps that verified no draft tokens). Measured
  separately because it is not on the line below: on a 2-core CPU a forward of 2 tokens already
  costs ~1.8x a forward of 1, while 2..16 tokens rise only to ~2.5x.
- ``verify_s(k) ~ intercept + slope * k`` for ``k >= 1`` drafts (a forward of ``k + 1`` tokens plus
  the acceptance test), shared by all drafters since it is the target's cost.
- ``draft_s(drafter, k) ~ intercept + slope * k`` per drafter (an n-gram lookup is ~constant, a
  small model costs per token).

Each line is a decayed least-squares fit whose slope is pulled toward a prior (ridge on the slope):
with a single distinct ``k`` observed the slope is not identified, and the prior is what lets the
controller price a ``k`` it has never tried (interpolation and extrapolation along the line). The
verify prior is deliberately a little optimistic so that longer drafts get tried; one measured step
at a new ``k`` corrects it.
"""

from __future__ import annotations

import math

from policies.decayed import DecayedMean, decay_for_half_life


# the draft slope's prior (0) is optimism meant to get a longer draft tried, not a belief: it
# weighs ~one step, so two measured lengths identify the slope of a drafter that pays per token
DRAFT_SLOPE_PRIOR_STRENGTH = 1.0
MIN_SAMPLES_AT_K = 3.0  # decayed weight of measurements at one k before they replace the line
# a length not verified for this many steps (any steps, plain ones included) stops being "measured":
# its cost is interpolated or priced optimistically again, so the controller tries it and re-measures
# (costs drift: a busy spell inflates the lengths used then, and a gate that never drafts them again
# would otherwise price them on that spell forever)
STALE_AFTER_STEPS = 256
SPIKE_FACTOR = 4.0  # samples above 4x the prediction are clipped to it
SPIKE_FLOOR_S = 1e-3  # ... where the prediction is tiny (n-gram lookup), to at least 4 ms


def clip_spike(seconds: float, predicted: float) -> float:
    """``seconds``, at most ``SPIKE_FACTOR`` times ``predicted`` (unclipped when nothing is predicted)."""
    if not predicted > 0:  # NaN (nothing predicted yet) or no prediction to clip to
        return seconds
    cap = SPIKE_FACTOR * predicted
    return seconds if seconds < cap else cap


class DecayedLinearFit:
    """Weighted least squares of ``y ~ intercept + slope * x`` with exponential forgetting.

    Keeps five decayed sums, so an update is O(1). ``coefficients(prior_slope, strength)`` solves

        min  sum_i w_i (y_i - intercept - slope x_i)^2 + strength * (slope - prior_slope)^2

    whose solution, with ``x_bar``/``y_bar`` the weighted means and ``Sxx``/``Sxy`` the centred
    weighted sums, is ``slope = (Sxy + strength * prior_slope) / (Sxx + strength)`` and
    ``intercept = y_bar - slope * x_bar``.
    """

    __slots__ = ("decay", "w", "wx", "wy", "wxx", "wxy")

    def __init__(self, half_life: float) -> None:
        self.decay = decay_for_half_life(half_life)
        self.w = self.wx = self.wy = self.wxx = self.wxy = 0.0

    def update(self, x: float, y: float) -> None:
        d = self.decay
        self.w = self.w * d + 1.0
        self.wx = self.wx * d + x
        self.wy = self.wy * d + y
        self.wxx = self.wxx * d + x * x
        self.wxy = self.wxy * d + x * y

    @property
    def has_data(self) -> bool:
        return self.w > 0.0

    def means(self) -> tuple[float, float]:
        return self.wx / self.w, self.wy / self.w

    def coefficients(self, prior_slope: float, strength: float) -> tuple[float, float]:
        """``(intercept, slope)``; call only when ``has_data``."""
        mean_x, mean_y = self.means()
        sxx = max(self.wxx - self.w * mean_x * mean_x, 0.0)  # rounding can dip below 0
        sxy = self.wxy - self.w * mean_x * mean_y
        slope = (sxy + strength * prior_slope) / (sxx + strength)
        return mean_y - slope * mean_x, slope


class CostModel:
    """Measured step costs in seconds: ``plain_s``, ``verify_s(k)``, ``draft_s(drafter, k)``.

    Observe every ``StepOutcome`` through ``update``; predictions are NaN only for ``plain_s``
    before the first step that verified no drafts (the adaptive policy takes one first).
    """

    def __init__(self, half_life_steps: float, verify_prior_intercept: float,
                 verify_prior_slope: float, slope_prior_strength: float) -> None:
        self.half_life_steps = half_life_steps
        self.verify_prior_intercept = verify_prior_intercept  # in units of plain_s
        self.verify_prior_slope = verify_prior_slope  # in units of plain_s per draft token
        self.slope_prior_strength = slope_prior_strength
        self.plain = DecayedMean(half_life_steps)
        self.verify = DecayedLinearFit(half_life_steps)
        # measured means per verified length: the line is only for lengths not measured enough.
        # On a CPU the cost is not linear in k: 2-3 tokens cost ~1.05x one token, 9 tokens ~2x,
        # and a line through all of them overprices the short drafts that pay at low acceptance
        self.verify_at: dict[int, DecayedMean] = {}
        # the lengths measured at least MIN_SAMPLES_AT_K times, sorted (a decayed weight that
        # starts at 0 only grows, so a length never leaves this list)
        self._measured_ks: list[int] = []
        self._steps = 0  # updates seen, for STALE_AFTER_STEPS
        self._last_verified: dict[int, int] = {}  # length -> the update that last verified it
        self._verify_cache: tuple[int, list[float]] | None = None  # (max_k, predictions) until the next update
        self.draft: dict[str, DecayedLinearFit] = {}

    def update(self, drafter: str, k: int, proposed: int, draft_s: float, verify_s: float) -> None:
        # Verification cost follows what was actually verified (``proposed``), not what was asked.
        # A sample far above the current prediction (a GC pause, a first call that builds
        # kernels, a noisy neighbour on the CPU) is clipped, so one spike cannot swing the model.
        self._steps += 1
        if proposed == 0:
            plain_s = self.plain.value
            self.plain.update(clip_spike(verify_s, plain_s))
            self._verify_cache = None
        else:
            if not self.verify.has_data:
                predicted = math.nan
            else:  # the cached predictions (plans priced this step with them) or a fresh line
                cached = self._verify_cache
                if cached is None or cached[0] < proposed:
                    cached = self._verify_cache = (proposed, self._predict_verify(proposed))
                predicted = cached[1][proposed]
            clipped = clip_spike(verify_s, predicted)
            self.verify.update(proposed, clipped)
            at = self.verify_at.get(proposed)
            if at is None:
                at = self.verify_at[proposed] = DecayedMean(self.half_life_steps)
            at.update(clipped)
            self._last_verified[proposed] = self._steps
            if at.weight >= MIN_SAMPLES_AT_K and proposed not in self._measured_ks:
                self._measured_ks.append(proposed)
                self._measured_ks.sort()
        self._verify_cache = None
        if k > 0:
            fit = self.draft.get(drafter)
            if fit is None:
                fit = self.draft[drafter] = DecayedLinearFit(self.half_life_steps)
                fit.update(proposed, draft_s)
            else:
                intercept, slope = fit.coefficients(0.0, DRAFT_SLOPE_PRIOR_STRENGTH)
                predicted = intercept + slope * max(proposed, 1)  # draft_s_by_k's prediction
                fit.update(proposed, clip_spike(draft_s, max(predicted, SPIKE_FLOOR_S)))

    def plain_s(self) -> float:
        return self.plain.value

    def verify_s_by_k(self, max_k: int) -> list[float]:
        """Predicted verify seconds for ``k = 0..max_k`` (entry 0 is ``plain_s``).

        Before any speculative step: the prior line ``intercept + slope * k`` in units of the
        measured plain step. Afterwards, the measured mean at each ``k`` verified often enough, and
        for the others: linear interpolation between measured neighbours (``plain_s`` at ``k = 0``
        included), and optimism beyond them: a longer draft than any measured is priced like the
        longest measured, so the controller tries it and learns its real price.

        The curve is far from a line, and not even monotone: on one 2-core CPU 2-3 tokens cost
        ~1.15-1.2x one token, 5 tokens ~1.6x, 9 tokens ~1.9x; on another (AMD EPYC, 2 vCPUs,
        SmolLM2 at a 100-token context, 2026-12-02) one token took 68 ms, 2 tokens 105, 3 tokens
        125, 5 tokens 88, 9 tokens 104 and 17 tokens 114, as matrix kernels change with the shape.
        So a measured length keeps its measured mean even where it undercuts a shorter one: a
        controller that forced the curve to rise would price 4 drafts at the cost of 2 there and
        never use the cheaper length. Before any length is measured the prior line rises.
        """
        cached = self._verify_cache
        if cached is not None and cached[0] >= max_k:
            return cached[1][: max_k + 1]
        out = self._predict_verify(max_k)
        self._verify_cache = (max_k, out)
        return out[:]

    def _predict_verify(self, max_k: int) -> list[float]:
        plain_s = self.plain.value
        if math.isnan(plain_s):
            return [math.nan] * (max_k + 1)
        out = [plain_s]
        measured_ks = self._measured_ks
        if measured_ks:
            oldest = self._steps - STALE_AFTER_STEPS
            last = self._last_verified
            if any(last[k] < oldest for k in measured_ks):
                measured_ks = [k for k in measured_ks if last[k] >= oldest]
        if not measured_ks:
            prior_slope = self.verify_prior_slope * plain_s
            if self.verify.has_data:
                intercept, slope = self.verify.coefficients(prior_slope, self.slope_prior_strength)
            else:
                intercept, slope = self.verify_prior_intercept * plain_s, prior_slope
            for k in range(1, max_k + 1):
                out.append(max(intercept + slope * k, out[-1]))
            return out
        # this runs after every speculative step: plain loops and comparisons, no generators.
        # Measured means are taken as they are, even where a longer draft measured cheaper than
        # a shorter one: the target's kernels differ by shape (see verify_s_by_k)
        verify_at = self.verify_at
        k0, v0 = 0, plain_s
        k = 1
        for k1 in measured_ks:
            if k1 > max_k:
                break
            v1 = verify_at[k1].value
            step = (v1 - v0) / (k1 - k0)
            while k < k1:  # between measured neighbours: linear interpolation
                out.append(v0 + step * (k - k0))
                k += 1
            out.append(v1)
            k += 1
            k0, v0 = k1, v1
        if k <= max_k:
            if k0 < measured_ks[-1]:  # the next measured length is beyond max_k: interpolate
                k1 = next(m for m in measured_ks if m > k0)
                v1 = verify_at[k1].value
                step = (v1 - v0) / (k1 - k0)
                while k <= max_k:
                    out.append(v0 + step * (k - k0))
                    k += 1
            else:  # beyond the longest measured draft: priced like it
                out.extend([v0] * (max_k + 1 - k))
        return out

    def draft_s_by_k(self, drafter: str, max_k: int) -> list[float]:
        """Predicted draft seconds for ``k = 0..max_k``; zeros for a drafter never observed.

        Zero for an untried drafter is optimism on purpose: trying it once is cheap and replaces
        the guess. The slope prior is the measured mean cost per drafted token (a line through
        the origin), the natural guess for a drafter that runs one forward per token.
        """
        fit = self.draft.get(drafter)
        if fit is None:
            return [0.0] * (max_k + 1)
        # Slope prior 0: until two draft lengths have been measured, assume a longer draft costs
        # no more than the one measured. Optimism on purpose: a per-token prior (the mean cost per
        # drafted token) would price a constant-cost drafter (n-gram lookup, ~0.3 ms whatever k)
        # as if every token cost that much, so the controller would never try a longer draft and
        # never learn otherwise. One step at a longer k identifies the slope of a drafter that
        # really pays per token (a draft model).
        intercept, slope = fit.coefficients(0.0, DRAFT_SLOPE_PRIOR_STRENGTH)
        if slope >= 0.0 and intercept + slope >= 0.0:  # the usual case: no clamping needed
            return [0.0] + [intercept + slope * k for k in range(1, max_k + 1)]
        return [0.0] + [max(intercept + slope * k, 0.0) for k in range(1, max_k + 1)]
