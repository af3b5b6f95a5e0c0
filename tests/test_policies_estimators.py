"""The pure pieces of the adaptive controller: acceptance profile, cost fit, optimal k."""

import math

import pytest

from policies.acceptance import AcceptanceProfile, expected_tokens_by_k, expected_tokens_iid
from policies.costs import CostModel, DecayedLinearFit
from policies.decayed import DecayedMean, decay_for_half_life
from policies.goodput import best_draft_len


def test_profile_expectation_equals_leviathan_formula_for_a_flat_profile():
    totals = expected_tokens_by_k([0.7] * 6)
    for k, total in enumerate(totals):
        assert total == pytest.approx(expected_tokens_iid(0.7, k))


def test_expected_tokens_literal_values():
    assert expected_tokens_by_k([0.9, 0.2]) == pytest.approx([1.0, 1.9, 2.08])
    assert expected_tokens_iid(1.0, 3) == 4.0


def test_best_draft_len_prefers_plain_when_speculation_loses_and_smaller_k_on_ties():
    assert best_draft_len([1.0, 1.4], [1.0, 1.85]) == (0, 1.0)
    assert best_draft_len([1.0, 2.0, 2.0], [1.0, 1.0, 1.0])[0] == 1
    with pytest.raises(ValueError, match="one entry per k"):
        best_draft_len([1.0, 2.0], [1.0])


def test_half_life_halves_the_weight():
    assert decay_for_half_life(10) ** 10 == pytest.approx(0.5)
    mean = DecayedMean(half_life=1)
    mean.update(0.0)
    mean.update(1.0)  # the older 0 now weighs 0.5
    assert mean.value == pytest.approx(1 / 1.5)


def test_profile_counts_the_prefix_and_the_first_rejection_only():
    profile = AcceptanceProfile(max_k=4, half_life_steps=1e9, prior_rate=0.5, prior_weight=1e-9,
                                shrink_weight=1e-9)
    profile.update(k=4, num_accepted=1)  # position 0 accepted, position 1 rejected, 2-3 unseen
    assert profile.trials == pytest.approx([1, 1, 0, 0])
    assert profile.accepted == pytest.approx([1, 0, 0, 0])
    profile.update(k=2, num_accepted=2)  # both accepted, no rejection observed
    assert profile.trials == pytest.approx([2, 2, 0, 0])
    rates = profile.conditional_rates()
    assert rates[0] == pytest.approx(1.0) and rates[1] == pytest.approx(0.5)
    # unexplored positions inherit the pooled rate: 3 accepted of 4 trials
    assert rates[3] == pytest.approx(0.75)


def test_profile_learns_a_falling_per_position_acceptance():
    import random

    rng = random.Random(0)
    truth = [0.95, 0.8, 0.6, 0.4]
    profile = AcceptanceProfile(max_k=4, half_life_steps=1e9, prior_rate=0.5, prior_weight=2, shrink_weight=8)
    for _ in range(3000):
        accepted = 0
        while accepted < 4 and rng.random() < truth[accepted]:
            accepted += 1
        profile.update(4, accepted)
    for estimate, true in zip(profile.conditional_rates(), truth):
        assert abs(estimate - true) < 0.05


def test_linear_fit_recovers_a_line_and_falls_back_to_the_prior_slope():
    fit = DecayedLinearFit(half_life=1e9)
    for x in (1, 2, 3, 4, 8):
        fit.update(x, 0.06 + 0.002 * x)
    intercept, slope = fit.coefficients(prior_slope=0.0, strength=1e-9)
    assert intercept == pytest.approx(0.06) and slope == pytest.approx(0.002)
    single = DecayedLinearFit(half_life=1e9)
    single.update(4, 0.1)
    assert single.coefficients(prior_slope=0.01, strength=1.0) == pytest.approx((0.06, 0.01))


def test_cost_model_measures_plain_separately_and_interpolates_unseen_k_between_measured_ones():
    costs = CostModel(half_life_steps=1e9, verify_prior_intercept=1.5, verify_prior_slope=0.05,
                      slope_prior_strength=1e-6)
    assert math.isnan(costs.plain_s())
    costs.update("none", 0, 0, 0.0, 0.035)
    # before any speculative step: the prior line, in units of the measured plain step
    assert costs.verify_s_by_k(2)[2] == pytest.approx(0.035 * 1.6)
    for _ in range(20):  # enough spread in k that the draft slope's weak prior (0) no longer matters
        for proposed in (2, 4, 6):
            costs.update("int8", proposed, proposed, 0.02 * proposed, 0.063 + 0.002 * proposed)
    verify = costs.verify_s_by_k(16)
    assert verify[0] == pytest.approx(0.035)
    assert verify[4] == pytest.approx(0.063 + 0.008)  # measured
    assert verify[3] == pytest.approx((0.063 + 0.004 + 0.063 + 0.008) / 2)  # between measured 2 and 4
    assert verify[1] == pytest.approx((0.035 + 0.063 + 0.004) / 2)  # between plain (k = 0) and 2
    assert verify[16] == pytest.approx(0.063 + 0.012)  # beyond 6: priced like 6 until tried
    assert costs.draft_s_by_k("int8", 10)[10] == pytest.approx(0.2, rel=0.01)
    assert costs.draft_s_by_k("never-seen", 3) == [0.0] * 4  # optimistic until tried


def test_a_length_measured_cheaper_than_a_shorter_one_keeps_its_measured_cost():
    # measured on an AMD EPYC VM (SmolLM2, 2 threads): 3 tokens 125 ms, 5 tokens 88 ms
    costs = CostModel(half_life_steps=1e9, verify_prior_intercept=1.5, verify_prior_slope=0.05,
                      slope_prior_strength=1e-6)
    costs.update("none", 0, 0, 0.0, 0.068)
    for _ in range(5):
        for proposed, seconds in ((1, 0.105), (2, 0.125), (4, 0.088), (8, 0.104)):
            costs.update("ngram", 16, proposed, 0.0003, seconds)
    verify = costs.verify_s_by_k(12)
    assert verify[:3] == pytest.approx([0.068, 0.105, 0.125])
    assert verify[4] == pytest.approx(0.088)  # not raised to the 2-draft cost
    assert verify[3] == pytest.approx((0.125 + 0.088) / 2)
    assert verify[6] == pytest.approx((0.088 + 0.104) / 2) and verify[12] == pytest.approx(0.104)
    tokens = expected_tokens_by_k([0.3] * 12)  # a weak match: 4 drafts beat 1 or 2 at these costs
    assert best_draft_len(tokens, verify, min_k=1)[0] == 4
