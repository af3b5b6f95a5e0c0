"""Drafter switching: discounted UCB, alone and inside the adaptive controller."""

import math

import pytest

from policies.guard import GuardConfig
from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.bandit import DiscountedUCB
from policies.synthetic import SyntheticDrafter, SyntheticEnv, run_policy


def test_unplayed_arms_are_tried_first_in_order_then_the_best_mean_wins():
    bandit = DiscountedUCB(["a", "b"], discount=0.99, exploration=0.1)
    assert bandit.select() == "a"
    bandit.update("a", 1.0)
    assert bandit.select() == "b"
    bandit.update("b", 2.0)
    assert bandit.select() == "b"
    assert bandit.index("a") < bandit.index("b")


def test_an_abandoned_arm_is_retried_as_its_discounted_count_fades():
    bandit = DiscountedUCB(["good", "bad"], discount=0.95, exploration=0.5)
    bandit.update("bad", 0.5)
    plays = []
    for _ in range(300):
        arm = bandit.select()
        plays.append(arm)
        bandit.update(arm, 1.5 if arm == "good" else 0.5)
    assert plays.count("good") > 250
    assert plays[100:].count("bad") >= 1  # re-explored despite being worse


def test_reset_arm_and_candidates():
    bandit = DiscountedUCB(["a", "b"], discount=0.9, exploration=1.0)
    bandit.update("a", 1.0)
    bandit.reset_arm("a")
    assert math.isinf(bandit.index("a"))
    assert bandit.select(["b"]) == "b"
    with pytest.raises(ValueError, match="candidates must include at least one of"):
        bandit.select(["zzz"])


@pytest.mark.parametrize("kwargs, name", [({"discount": 1.5}, "discount"), ({"exploration": 0}, "exploration")])
def test_invalid_bandit_parameters_name_the_parameter(kwargs, name):
    args = {"arms": ["a"], "discount": 0.9, "exploration": 1.0, **kwargs}
    with pytest.raises(ValueError, match=f"{name}="):
        DiscountedUCB(**args)


def test_controller_moves_to_the_better_drafter_after_a_shift():
    env = SyntheticEnv([
        SyntheticDrafter("ngram", 0.9, draft_s_fixed=0.0001),
        SyntheticDrafter("int8", 0.75, draft_s_per_token=0.0035),  # 0.1 of a plain step per token
    ], seed=0)
    # a probe cap of 128 plain steps, as for drafters that are not shadow-drafted in the engine
    policy = AdaptivePolicy(["ngram", "int8"], AdaptiveConfig(guard=GuardConfig(backoff_max=128)))
    before = run_policy(policy, env, 500)
    spec_before = [o.drafter for o in before[-200:] if o.k > 0]
    assert spec_before.count("ngram") / len(spec_before) > 0.8
    env.set_acceptance("ngram", 0.2)  # copy-heavy traffic ended: lookup stops matching
    after = run_policy(policy, env, 500)
    spec_after = [o.drafter for o in after[-200:] if o.k > 0]
    assert len(spec_after) > 150
    assert spec_after.count("int8") / len(spec_after) > 0.8
