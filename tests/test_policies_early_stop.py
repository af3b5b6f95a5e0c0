"""Learned early stopping versus transformers' fixed confidence threshold."""

import math
import random

import pytest

from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.early_stop import ConfidenceThreshold, DraftFeatures, LearnedEarlyStop, LearnedEarlyStopConfig
from policies.outcome import StepOutcome


def overconfident_acceptance(top_prob, position):
    """A small draft model's truth: q overstates acceptance, more so deeper in the draft."""
    return top_prob ** 2 * (1.0 - 0.08 * position)


def train(stopper, steps, seed=0, k=6):
    rng = random.Random(seed)
    for _ in range(steps):
        confidences = [rng.betavariate(4, 1.5) for _ in range(k)]
        accepted = 0
        while accepted < k and rng.random() < overconfident_acceptance(confidences[accepted], accepted):
            accepted += 1
        stopper.learn_step(confidences, accepted)


def test_threshold_rule_is_transformers_04():
    rule = ConfidenceThreshold()
    assert rule.should_continue(rule.features(top_prob=0.41)) is True
    assert rule.should_continue(rule.features(top_prob=0.39)) is False
    assert (rule.decisions, rule.stops) == (2, 1)


def test_learned_model_is_calibrated_on_the_synthetic_truth():
    stopper = LearnedEarlyStop(seed=0)
    train(stopper, 1500)
    assert stopper.trained
    for top_prob in (0.5, 0.7, 0.9):
        for position in (0, 2):
            predicted = stopper.predict_accept(stopper.features(top_prob, position=position))
            assert abs(predicted - overconfident_acceptance(top_prob, position)) < 0.12


def test_learned_stop_stops_where_the_fixed_threshold_keeps_drafting_rejected_tokens():
    stopper = LearnedEarlyStop(seed=0)
    train(stopper, 1500)
    rule = ConfidenceThreshold()
    # q = 0.55 at position 3: the threshold continues, yet only ~23% of such tokens are accepted
    features = stopper.features(top_prob=0.55, position=3)
    assert overconfident_acceptance(0.55, 3) < 0.4
    assert rule.should_continue(features) is True
    assert stopper.should_continue(features) is False
    # a confident first token continues under both
    assert stopper.should_continue(stopper.features(top_prob=0.95, position=0)) is True


def test_untrained_model_falls_back_to_the_threshold():
    stopper = LearnedEarlyStop(LearnedEarlyStopConfig(min_samples=10_000))
    train(stopper, 50)
    assert not stopper.trained
    assert stopper.should_continue(stopper.features(0.5)) is True
    assert stopper.should_continue(stopper.features(0.3)) is False


def test_labels_stop_at_the_first_rejection():
    stopper = ConfidenceThreshold()
    seen = []
    stopper.learn = lambda features, accepted: seen.append((features.position, accepted))
    stopper.learn_step([0.9, 0.8, 0.7, 0.6], num_accepted=1)
    assert seen == [(0, True), (1, False)]
    seen.clear()
    stopper.learn_step([0.9, 0.8], num_accepted=2)  # all accepted: nothing after them is known
    assert seen == [(0, True), (1, True)]


def test_unknown_entropy_is_replaced_by_the_min_entropy():
    known = DraftFeatures(0.5, math.log(2), 0, 0.5).vector()
    unknown = DraftFeatures(0.5, math.nan, 0, 0.5).vector()
    assert unknown == pytest.approx(known)


def test_same_seed_same_model():
    weights = []
    for _ in range(2):
        stopper = LearnedEarlyStop(seed=3)
        train(stopper, 300, seed=1)
        weights.append((stopper.weights, stopper.bias))
    assert weights[0] == weights[1]


def test_policy_hands_out_one_stopper_per_drafter_and_trains_it_from_outcomes():
    policy = AdaptivePolicy(["int8"], AdaptiveConfig(early_stop="learned"))
    stopper = policy.early_stop("int8")
    assert policy.early_stop("int8") is stopper
    for _ in range(40):
        policy.observe(StepOutcome("int8", 4, 4, 2, 3, 0.02, 0.07, draft_confidences=(0.9, 0.8, 0.3, 0.2)))
    assert stopper.samples == 40 * 3  # two accepted positions and the first rejection
    assert AdaptivePolicy(["int8"], AdaptiveConfig(early_stop="off")).early_stop("int8") is None
    assert isinstance(AdaptivePolicy(["int8"], AdaptiveConfig(early_stop="threshold")).early_stop("int8"),
                      ConfidenceThreshold)


@pytest.mark.parametrize("field, value", [("stop_below", 2.0), ("batch_size", 0), ("learning_rate", 0.0)])
def test_invalid_early_stop_parameters_name_the_parameter(field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        LearnedEarlyStopConfig(**{field: value})
