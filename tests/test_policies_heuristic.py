"""transformers' +2 / -1 draft-length schedule."""

import pytest

from policies.heuristic import HeuristicPolicy
from policies.outcome import StepOutcome


def outcome(k, accepted, drafter="int8"):
    return StepOutcome(drafter, k, k, accepted, accepted + 1, 0.01, 0.05)


def test_all_accepted_adds_two_any_rejection_subtracts_one():
    policy = HeuristicPolicy("int8", start_k=4)
    ks = []
    for accepted_all in (True, True, False, False, True):
        k = policy.decide().k
        policy.observe(outcome(k, k if accepted_all else k - 1))
        ks.append(policy.decide().k)
    assert ks == [6, 8, 7, 6, 8]


def test_k_never_drops_below_one_and_never_exceeds_max_k():
    policy = HeuristicPolicy("int8", start_k=2, max_k=5)
    for _ in range(5):
        policy.observe(outcome(policy.decide().k, 0))
    assert policy.decide().k == 1
    for _ in range(5):
        k = policy.decide().k
        policy.observe(outcome(k, k))
    assert policy.decide().k == 5


def test_a_step_forced_beyond_max_k_does_not_lift_k_past_max_k():
    policy = HeuristicPolicy("int8", start_k=4, max_k=16)
    policy.observe(outcome(64, 10))  # an override forced k = 64 on this drafter; a rejection
    assert policy.decide().k == 16


def test_outcomes_of_other_drafters_and_plain_steps_are_ignored():
    policy = HeuristicPolicy("int8", start_k=4)
    policy.observe(outcome(4, 4, drafter="ngram"))
    policy.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.03))
    assert policy.decide().k == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"drafter": "none"}, "drafter must name a drafter other than 'none', got drafter='none'"),
        ({"drafter": "int8", "start_k": 0}, "start_k must be an integer in [1, 64], got start_k=0"),
        ({"drafter": "int8", "max_k": 0}, "max_k must be an integer >= 1, got max_k=0"),
    ],
)
def test_invalid_parameters_name_the_parameter(kwargs, message):
    with pytest.raises(ValueError) as error:
        HeuristicPolicy(**kwargs)
    assert str(error.value) == message
