"""Execution-time prediction: how long prefill, a verify forward and drafting take.

The simulator advances its clock by predicted durations, so this module decides whether the
simulation is right about *when* speculation pays. It is fitted on a measured profile
(``simulator/profile.py``) with scikit-learn, then predicts in pure Python (a dot product per
step: calling ``sklearn.predict`` per step would cost ~50 us, more than the rest of the step).

Verify forward (one target pass over ``tokens`` = k + 1 tokens for each of ``batch`` sequences)::

    verify_s = w0 + w1 tokens + w2 multi_token + w3 context_len + w4 batch
                  + w5 batch_tokens + w6 batch_context + w7 max(0, batch_tokens - knee)
                  + w8 attention_pairs + w9 wide_context

- ``multi_token`` (batch_tokens > 1): with more than one row of activations the forward switches
  from matrix-vector to matrix-matrix kernels; on this project's CPU a 2-16 token forward costs
  ~2x a 1-token one, nearly flat after the jump.
- ``batch_tokens`` = tokens verified across the whole batch; ``batch_context`` = KV entries read.
- ``attention_pairs``: query-key pairs the attention computes (``policies.batch_layout``): in either
  form of a batched forward, its rows times its widest row's width times its slots.
- ``wide_context`` (``batch_context`` of a batched forward more than one token wide): the attention
  then takes its masked path over every slot, measured dearer than a one-token step's beyond what
  the pairs say.
- ``max(0, batch_tokens - knee)`` is the roofline: below the knee a forward is memory-bound
  (reading the weights dominates, extra tokens are nearly free - why speculation pays at batch 1);
  above it the forward is compute-bound and costs grow with every token verified. The knee is
  chosen by least squares from the candidates the samples offer; the slopes are fitted. Nothing
  says "speculation stops paying at batch N": that comes out of measured (or supplied) samples.

All weights are constrained >= 0 (``LinearRegression(positive=True)``) so a fitted cost never
falls with more work (a measured batch-1 width, below, keeps what was measured, which may). Features constant across the samples are dropped (their weight would be
unidentifiable); if every sample has batch 1, the batch features are dropped and predicting a
batch > 1 raises - measure batched forwards before planning continuous batching.

Batch 1 at a measured width. The linear form cannot follow a CPU whose small matrix-matrix
kernels are slow: on this project's machine a 2- or 3-token forward has measured dearer than a
5- to 17-token one, and a least-squares line through all widths then misprices exactly the short
drafts a controller weighs against plain steps (and plain steps themselves). So for batch 1 the
widths the profile measured are priced from their own samples: each width's base (its samples'
own line in context), linearly interpolated between measured widths and continued beyond them by
the fitted line's slope in tokens.

Prefill: ``prefill_s = v0 + v1 prompt_tokens + v2 prompt_tokens**2`` (attention is quadratic).
Drafting: ``per_call_s + per_token_s * k`` per call, from the profile's ``draft`` section.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from policies.batch_layout import attention_pairs, packs, scored
from simulator.profile import DraftCost, PrefillSample, Profile, VerifySample

VERIFY_FEATURES = (
    "tokens", "multi_token", "context_len", "batch", "batch_tokens", "batch_context", "excess_tokens",
    "attention_pairs", "wide_context",
)
BATCH_FEATURES = ("batch", "batch_tokens", "batch_context", "wide_context")


class CostModel(Protocol):
    """What a replica asks; tests may supply any object with these methods (e.g. exponential service)."""

    def prefill_s(self, prompt_tokens: int) -> float: ...

    def verify_s(self, tokens: int, context_len: int, batch: int = 1, batch_tokens: int | None = None,
                 batch_context: int | None = None, pairs: int | None = None) -> float: ...

    def draft_s(self, drafter: str, k: int, batch: int = 1, batch_draft_tokens: int | None = None) -> float: ...


def forward_verify_s(cost, widths: Sequence[int], contexts: Sequence[float], slots: int | None = None) -> float:
    """Seconds of one target forward over rows ``widths`` tokens wide (k + 1 each) at ``contexts``
    tokens of context. A profile timed on the engine's batched forward (``cost.padded``) is priced
    as the engine runs each step (``policies.batch_layout``) over its slot axis (``slots``, at least
    the longest context: the longest context where not given): padded, every row at the widest
    row's width, or packed, each row at its own, with the attention both forms compute; a ragged
    profile scores each row at its own."""
    batch, context = len(widths), sum(contexts)
    if not getattr(cost, "padded", False):
        return cost.verify_s(max(widths), context / batch, batch, sum(widths), context)
    if batch == 1:
        return cost.verify_s(widths[0], contexts[0])
    slots = max(max(contexts), slots or 0)
    tokens = scored(widths, packs(widths))
    return cost.verify_s(tokens / batch, slots, batch, tokens, batch * slots, attention_pairs(widths, slots))


def verify_features(tokens: float, context_len: float, batch: int, batch_tokens: int, batch_context: float,
                    knee: float, pairs: float | None = None) -> list[float]:
    """The feature row of one forward, in VERIFY_FEATURES order; ``pairs`` defaults to a padded
    forward's (every row ``tokens`` wide over ``context_len`` slots)."""
    pairs = batch_tokens * (context_len + tokens) if pairs is None else pairs
    return [tokens, 1.0 if batch_tokens > 1 else 0.0, context_len, batch, batch_tokens, batch_context,
            max(0.0, batch_tokens - knee), pairs, batch_context if tokens > 1 and batch > 1 else 0.0]


def fit_linear(features: np.ndarray, seconds: np.ndarray) -> tuple[float, np.ndarray]:
    """Non-negative least squares with intercept; constant columns get weight 0. Pure function."""
    keep = features.std(axis=0) > 0
    coef = np.zeros(features.shape[1])
    if not keep.any():
        return float(seconds.mean()), coef
    # imported here: scikit-learn takes over a second to import, which every CLI command would pay
    from sklearn.linear_model import LinearRegression

    model = LinearRegression(positive=True).fit(features[:, keep], seconds)
    coef[keep] = model.coef_
    return float(model.intercept_), coef


@dataclass(frozen=True)
class VerifyFit:
    intercept: float
    weights: dict[str, float]  # feature name -> seconds per unit
    knee: float  # batch_tokens where the compute-bound slope starts (inf: no knee found)
    batch_fitted: bool  # False when the profile has only batch-1 samples
    max_rel_error: float  # worst |predicted - measured| / measured over the samples


def sample_features(s: VerifySample, knee: float) -> list[float]:
    """A profile sample's feature row: a packed sample's ``packed`` rows ``tokens`` wide, the rest one token."""
    if not s.packed:
        return verify_features(s.tokens, s.context_len, s.batch, s.batch * s.tokens, s.batch * s.context_len, knee)
    widths = [s.tokens] * s.packed + [1] * (s.batch - s.packed)
    return verify_features(s.width, s.context_len, s.batch, sum(widths), s.batch * s.context_len,
                           knee, attention_pairs(widths, s.context_len))


def _design(samples: list[VerifySample], knee: float, use_batch: bool) -> np.ndarray:
    rows = []
    for s in samples:
        row = sample_features(s, knee)
        if not use_batch:
            for name in BATCH_FEATURES:
                row[VERIFY_FEATURES.index(name)] = 0.0
        rows.append(row)
    return np.asarray(rows, dtype=float)


def fit_verify(samples: list[VerifySample] | tuple[VerifySample, ...]) -> VerifyFit:
    """Fit the verify-forward model, choosing the roofline knee by least squares."""
    samples = list(samples)
    y = np.asarray([s.seconds for s in samples])
    use_batch = any(s.batch > 1 for s in samples)
    total = sorted({s.batch * s.tokens for s in samples if not s.packed})
    best = None
    for knee in [float("inf"), *total[:-1]]:
        x = _design(samples, knee, use_batch)
        intercept, coef = fit_linear(x, y)
        sse = float(np.sum((intercept + x @ coef - y) ** 2))
        # a knee must earn its extra parameter: at least 10 % less squared error than no knee
        if best is None or sse < 0.9 * best[0]:
            best = (sse, knee, intercept, coef)
    _, knee, intercept, coef = best
    predicted = intercept + _design(samples, knee, use_batch) @ coef
    return VerifyFit(intercept, dict(zip(VERIFY_FEATURES, coef.tolist())), knee, use_batch,
                     float(np.max(np.abs(predicted - y) / y)))


def fit_ride(samples) -> tuple[float, float] | None:
    """(intercept, per_token) seconds a prompt chunk of n tokens adds to the batched step it rides
    in (a sample's step with it less without it); None without samples (or with one chunk length
    only: no slope to fit)."""
    n = np.asarray([s.prompt_tokens for s in samples], dtype=float)
    if n.size == 0 or n.std() == 0:
        return None
    intercept, coef = fit_linear(n[:, None], np.asarray([s.seconds - s.alone_s for s in samples]))
    return float(intercept), float(coef[0])


def fit_prefill(samples: list[PrefillSample] | tuple[PrefillSample, ...]) -> tuple[float, float, float]:
    """(intercept, per_token, per_token_squared) seconds for a prefill of n prompt tokens."""
    n = np.asarray([s.prompt_tokens for s in samples], dtype=float)
    y = np.asarray([s.seconds for s in samples])
    intercept, coef = fit_linear(np.column_stack([n, n * n]), y)
    return intercept, float(coef[0]), float(coef[1])


@dataclass
class FittedCostModel:
    """The cost model fitted on a profile; predictions are plain float arithmetic."""

    verify: VerifyFit
    prefill: tuple[float, float, float]
    draft: dict[str, DraftCost] = field(default_factory=dict)

    measured: tuple[VerifySample, ...] = ()  # batch-1 samples priced width by width (module docstring)
    # a batched forward pads every sequence to the widest (this engine's BatchedDecoder), rather
    # than scoring only each sequence's own tokens (a ragged engine such as vLLM's)
    padded: bool = False
    ride: tuple[float, float] | None = None  # fit_ride's; None: riding priced from the prefill fit

    def __post_init__(self) -> None:
        w = self.verify.weights
        # batch-1 fast path: the cost of a t-token forward, minus its context term, precomputed
        line = [0.0] + [self._batch_cost(t, 0, 1, t, 0) for t in range(1, 257)]
        self._base1, self._ctx1 = _measured_widths(line, self.measured, w["context_len"] + w["batch_context"]
                                                   + w["attention_pairs"])

    def _batch_cost(self, tokens: float, context_len: float, batch: int, batch_tokens: int,
                    batch_context: float, pairs: float | None = None) -> float:
        w, v = self.verify.weights, self.verify
        row = verify_features(tokens, context_len, batch, batch_tokens, batch_context, v.knee, pairs)
        return v.intercept + sum(w[name] * x for name, x in zip(VERIFY_FEATURES, row))

    def prefill_s(self, prompt_tokens: int) -> float:
        v0, v1, v2 = self.prefill
        return v0 + v1 * prompt_tokens + v2 * prompt_tokens * prompt_tokens

    def ride_s(self, done: int, tokens: int) -> float | None:
        """What ``tokens`` more of a prompt whose first ``done`` are in add to the batched step they
        ride in: the ride fit, plus the prefill fit's growth in attention over the earlier chunks;
        None without a ride fit."""
        if self.ride is None:
            return None
        v2 = self.prefill[2]
        return max(0.0, self.ride[0] + self.ride[1] * tokens + v2 * 2 * done * tokens)

    def verify_s(self, tokens: float, context_len: float, batch: int = 1, batch_tokens: int | None = None,
                 batch_context: int | None = None, pairs: int | None = None) -> float:
        """Seconds of one forward; ``tokens`` is the per-sequence (padded) width k + 1.

        For a batch, ``context_len`` is the mean context; ``batch_tokens`` / ``batch_context`` default
        to ``batch * tokens`` / ``batch * context_len``, ``pairs`` to a padded forward's attention
        pairs.
        """
        if batch == 1 and tokens < len(self._base1):
            return self._base1[tokens] + self._ctx1[tokens] * context_len
        if batch > 1 and not self.verify.batch_fitted:
            raise ValueError(
                f"batch={batch}: the profile's verify samples all have batch 1, so the cost of a batched "
                "forward cannot be fitted; add verify samples with batch > 1"
            )
        bt = batch * tokens if batch_tokens is None else batch_tokens
        bc = batch * context_len if batch_context is None else batch_context
        return self._batch_cost(tokens, context_len, batch, bt, bc, pairs)

    def draft_s(self, drafter: str, k: int, batch: int = 1, batch_draft_tokens: int | None = None) -> float:
        """Seconds to draft ``k`` tokens (the longest draft in the batch) for ``batch`` sequences.

        A batched drafter runs once for the batch: ``per_call + per_token * k``. An unbatched one runs
        per sequence: ``batch * per_call + per_token * batch_draft_tokens`` (the sum of the k's).
        """
        cost = self.draft.get(drafter)
        if cost is None:
            raise ValueError(f"drafter={drafter!r} has no draft cost in the profile (known: {sorted(self.draft)})")
        if cost.batched or batch == 1:
            return cost.per_call_s + cost.per_token_s * k
        total = batch * k if batch_draft_tokens is None else batch_draft_tokens
        return batch * cost.per_call_s + cost.per_token_s * total

    def describe(self) -> dict:
        """The fitted weights, for reports and for checking a fit by eye."""
        v = self.verify
        return {
            "verify": {"intercept_s": v.intercept, "weights": v.weights, "knee_batch_tokens": v.knee,
                       "batch_fitted": v.batch_fitted, "max_rel_error": v.max_rel_error,
                       "batch1_measured_widths": sorted({m.tokens for m in self.measured if m.batch == 1})},
            "prefill": dict(zip(("intercept_s", "per_token_s", "per_token_sq_s"), self.prefill)),
            "draft": {d: vars(c) for d, c in self.draft.items()},
        }


def _measured_widths(line: list[float], samples: tuple[VerifySample, ...],
                     ctx_slope: float) -> tuple[list[float], list[float]]:
    """Batch-1 ``(base, context slope)`` per width (index = tokens): each measured width's own
    least-squares line in context (the fitted ``ctx_slope`` where it was measured at one context),
    interpolated between measured widths, and beyond them the fitted ``line``'s slope in tokens with
    the nearest measured width's context slope (module docstring).

    >>> from simulator.profile import VerifySample as V
    >>> line = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]      # the fit: 1 s per token
    >>> base, slope = _measured_widths(line, (V(1, 0, 1.0), V(1, 10, 2.0), V(3, 0, 4.0)), 0.5)
    >>> base, [round(c, 6) for c in slope]
    ([0.0, 1.0, 2.5, 4.0, 5.0, 6.0], [0.5, 0.1, 0.3, 0.5, 0.5, 0.5])
    """
    by_width: dict[int, list[VerifySample]] = {}
    for s in samples:
        if s.batch == 1 and s.tokens < len(line):
            by_width.setdefault(s.tokens, []).append(s)
    if not by_width:
        return line, [ctx_slope] * len(line)
    own = {t: _context_line(group, ctx_slope) for t, group in by_width.items()}
    widths = sorted(own)
    base, slope = [0.0], [ctx_slope]
    for t in range(1, len(line)):
        if t in own:
            b, c = own[t]
        elif t < widths[0]:
            b, c = max(own[widths[0]][0] - (line[widths[0]] - line[t]), 0.0), own[widths[0]][1]
        elif t > widths[-1]:
            b, c = own[widths[-1]][0] + (line[t] - line[widths[-1]]), own[widths[-1]][1]
        else:
            lo = max(w for w in widths if w < t)
            hi = min(w for w in widths if w > t)
            f = (t - lo) / (hi - lo)
            b, c = (own[lo][0] + (own[hi][0] - own[lo][0]) * f, own[lo][1] + (own[hi][1] - own[lo][1]) * f)
        base.append(b)
        slope.append(c)
    return base, slope


def _context_line(samples: list[VerifySample], fallback_slope: float) -> tuple[float, float]:
    """``(seconds at context 0, seconds per context token)`` of one width's samples, both >= 0; the
    fitted ``fallback_slope`` where they were all taken at one context."""
    xs = np.asarray([[s.context_len] for s in samples], dtype=float)
    ys = np.asarray([s.seconds for s in samples])
    if xs.std() > 0:
        intercept, coef = fit_linear(xs, ys)
        slope = float(coef[0])
    else:
        slope = fallback_slope
        intercept = float(ys.mean()) - slope * float(xs.mean())
    return max(intercept, 0.0), slope


def fit_cost_model(profile: Profile) -> FittedCostModel:
    """Fit every part of the cost model on a profile."""
    padded = profile.metadata.get("batched_forward") == "padded"
    return FittedCostModel(fit_verify(profile.verify), fit_prefill(profile.prefill), dict(profile.draft),
                           tuple(profile.verify), padded, fit_ride(profile.ride))
