"""Stopping a draft early: predict whether the next draft token will be accepted.

Drafting token ``i + 1`` is wasted work when token ``i`` is likely to be rejected: everything after
the first rejection is thrown away. A drafter with probabilities (a small model, an int8 copy of
the target) can ask after each drafted token whether to keep going. Two answers, one interface:

- ``ConfidenceThreshold`` - transformers' rule (``assistant_confidence_threshold=0.4``): stop when
  the draft's probability ``q`` of the token it just drafted is below 0.4. Cheap, but ``q`` is not
  an acceptance probability: an int8 self-draft is confident where the target is too, a small
  model is overconfident, and neither knows how acceptance falls with depth.
- ``LearnedEarlyStop`` - a logistic regression, trained online on this traffic, of
  P(token accepted | draft-side features): ``q`` of the token, the entropy of ``q``, its position
  in the draft and the drafter's recent acceptance. It stops when that calibrated probability is
  below ``stop_below``. scikit-learn's ``SGDClassifier(loss="log_loss")`` learns it by
  ``partial_fit`` on mini-batches with a constant step (so it keeps following the traffic), and
  the weights used are an exponential moving average of the SGD iterates (Polyak averaging with
  forgetting), which removes most of a constant step's jitter: on a synthetic stream the averaged
  model is within ~0.1 of the true acceptance probability where the raw iterate wanders by ~0.3.
  Prediction is a dot product done here in pure Python (~1 us), since calling sklearn per drafted
  token would cost more than the n-gram drafter itself.

How a drafter uses it (``stopper`` comes from ``AdaptivePolicy.early_stop(drafter_name)``)::

    for position in range(k):
        token, q = draft_one_token(...)            # q: the draft distribution at this position
        tokens.append(token)                       # the token is kept: verifying it is ~free
        features = stopper.features(top_prob=q[token], entropy=entropy(q), position=position)
        if not stopper.should_continue(features):
            break                                  # do not draft position + 1

and after verification the engine reports the step, with ``draft_confidences`` (and
``draft_entropies`` if known) in the ``StepOutcome``; the policy then calls
``stopper.learn_step(...)``. Labels are taken only up to the first rejection: ``should_continue``
is only ever asked about a token whose predecessors were all accepted, so that is the conditional
distribution to learn. Drafters without probabilities (n-gram) never consult it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sklearn.linear_model import SGDClassifier

from policies.decayed import DecayedMean, decay_for_half_life
from policies.validation import check_int, check_positive, check_range

POSITION_SCALE = 8.0  # positions are divided by this so features share a scale (SGD needs it)
ENTROPY_SCALE = 4.0  # nats; a flat distribution over ~50 tokens has entropy ~4


@dataclass(frozen=True, slots=True)
class DraftFeatures:
    """What a drafter knows about the token it just drafted, before the target sees it."""

    top_prob: float  # q(token): the draft's probability of the token it proposed
    entropy: float  # entropy of q in nats; NaN when unknown (then the min-entropy -log q is used)
    position: int  # 0-based index of this token in the step's draft
    recent_acceptance: float  # decayed per-position acceptance of this drafter, in [0, 1]

    def vector(self) -> list[float]:
        """Scaled features; unknown entropy is replaced by its lower bound ``-log q(token)``."""
        entropy = self.entropy if not math.isnan(self.entropy) else -math.log(max(self.top_prob, 1e-9))
        return [
            self.top_prob,
            min(entropy, 4.0 * ENTROPY_SCALE) / ENTROPY_SCALE,
            self.position / POSITION_SCALE,
            self.recent_acceptance,
        ]


class EarlyStop(Protocol):
    def features(self, top_prob: float, entropy: float = math.nan, position: int = 0) -> DraftFeatures: ...

    def should_continue(self, features: DraftFeatures) -> bool: ...

    def learn(self, features: DraftFeatures, accepted: bool) -> None: ...


class _RecentAcceptance:
    """The ``recent_acceptance`` feature, and the bookkeeping shared by both early stops."""

    def __init__(self, half_life_tokens: float) -> None:
        # starts at 0.5: no evidence either way
        self.recent = DecayedMean(half_life_tokens, prior=0.5)
        self.decisions = 0  # should_continue calls
        self.stops = 0  # ... that answered False

    def features(self, top_prob: float, entropy: float = math.nan, position: int = 0) -> DraftFeatures:
        """Fill ``recent_acceptance`` from this object's own decayed record of labels."""
        return DraftFeatures(top_prob, entropy, position, self.recent.value)

    def learn_step(self, confidences: Sequence[float], num_accepted: int,
                   entropies: Sequence[float] | None = None) -> None:
        """Learn from one verified draft: positions ``0..num_accepted`` (the first rejected one
        included), labelled accepted iff ``position < num_accepted``."""
        last = min(num_accepted, len(confidences) - 1)
        recent = self.recent.value
        for position in range(last + 1):
            entropy = entropies[position] if entropies is not None else math.nan
            features = DraftFeatures(confidences[position], entropy, position, recent)
            self.learn(features, position < num_accepted)

    def learn(self, features: DraftFeatures, accepted: bool) -> None:
        self.recent.update(1.0 if accepted else 0.0)

    def _count(self, keep_going: bool) -> bool:
        self.decisions += 1
        self.stops += not keep_going
        return keep_going


class ConfidenceThreshold(_RecentAcceptance):
    """transformers' fixed rule: continue while ``q(token) >= threshold``."""

    def __init__(self, threshold: float = 0.4, half_life_tokens: float = 64.0) -> None:
        # 0.4 is transformers' default assistant_confidence_threshold
        check_range("threshold", threshold, 0.0, 1.0)
        check_positive("half_life_tokens", half_life_tokens)
        super().__init__(half_life_tokens)
        self.threshold = threshold

    def should_continue(self, features: DraftFeatures) -> bool:
        return self._count(features.top_prob >= self.threshold)


@dataclass(frozen=True)
class LearnedEarlyStopConfig:
    # stop when P(accepted) < 0.4: the same number as transformers' threshold, so a comparison
    # measures calibration alone. The economic break-even is the draft cost per token over the
    # value of a token (~0.5 for an int8 self-draft on CPU); set it from the cost model if wanted.
    stop_below: float = 0.4
    # labels per partial_fit call: sklearn's ~0.3 ms per call amortised to ~10 us per token
    batch_size: int = 32
    # labels before the model replaces the confidence threshold (and both classes must be seen)
    min_samples: int = 64
    # constant SGD step: a decaying step would stop following traffic shifts. 0.3 with the
    # averaging below converged within ~1000 labels on the synthetic stream in the tests
    learning_rate: float = 0.3
    # half-life, in partial_fit batches, of the moving average of SGD weights (8 x 32 ~ 256 labels)
    weight_half_life_batches: float = 8.0
    # L2 penalty, sklearn's default; the four features are few and scaled
    alpha: float = 1e-4
    # half-life of the recent_acceptance feature, in labelled tokens
    half_life_tokens: float = 64.0
    # the fixed threshold used until the model is trained
    fallback_threshold: float = 0.4

    def __post_init__(self) -> None:
        check_range("stop_below", self.stop_below, 0.0, 1.0)
        check_int("batch_size", self.batch_size, 1)
        check_int("min_samples", self.min_samples, 1)
        check_positive("learning_rate", self.learning_rate)
        check_positive("weight_half_life_batches", self.weight_half_life_batches)
        check_range("alpha", self.alpha, 0.0, 1.0)
        check_positive("half_life_tokens", self.half_life_tokens)
        check_range("fallback_threshold", self.fallback_threshold, 0.0, 1.0)


class LearnedEarlyStop(_RecentAcceptance):
    """Online logistic regression of P(draft token accepted); continue while it is >= stop_below."""

    def __init__(self, config: LearnedEarlyStopConfig | None = None, seed: int = 0) -> None:
        self.config = config or LearnedEarlyStopConfig()
        super().__init__(self.config.half_life_tokens)
        self.model = SGDClassifier(loss="log_loss", alpha=self.config.alpha, learning_rate="constant",
                                   eta0=self.config.learning_rate, random_state=seed)
        self.pending_x: list[list[float]] = []
        self.pending_y: list[int] = []
        self.samples = 0  # labels learned so far
        self.classes_seen: set[int] = set()
        self.weight_decay = decay_for_half_life(self.config.weight_half_life_batches)
        self.averaged: list[float] | None = None  # moving average of [coef_..., intercept_]
        self.weights: list[float] | None = None  # the averaged coef_ in use, None until trained
        self.bias = 0.0

    @property
    def trained(self) -> bool:
        return self.weights is not None

    def predict_accept(self, features: DraftFeatures) -> float:
        """P(this draft token is accepted); the fallback threshold's 0/1 answer before training."""
        if self.weights is None:
            return 1.0 if features.top_prob >= self.config.fallback_threshold else 0.0
        z = self.bias + sum(w * x for w, x in zip(self.weights, features.vector()))
        return 1.0 / (1.0 + math.exp(-z)) if z > -30.0 else 0.0

    def should_continue(self, features: DraftFeatures) -> bool:
        return self._count(self.predict_accept(features) >= self.config.stop_below)

    def learn(self, features: DraftFeatures, accepted: bool) -> None:
        super().learn(features, accepted)
        self.pending_x.append(features.vector())
        self.pending_y.append(int(accepted))
        self.classes_seen.add(int(accepted))
        self.samples += 1
        if len(self.pending_y) >= self.config.batch_size:
            self._fit()

    def _fit(self) -> None:
        self.model.partial_fit(self.pending_x, self.pending_y, classes=[0, 1])
        self.pending_x, self.pending_y = [], []
        latest = [float(w) for w in self.model.coef_[0]] + [float(self.model.intercept_[0])]
        if self.averaged is None:
            self.averaged = latest
        else:
            d = self.weight_decay
            self.averaged = [d * old + (1.0 - d) * new for old, new in zip(self.averaged, latest)]
        if self.samples >= self.config.min_samples and len(self.classes_seen) == 2:
            self.weights, self.bias = self.averaged[:-1], self.averaged[-1]
