"""make_policy specs, one policy per traffic key, request overrides."""

import pytest

from policies.adaptive import AdaptivePolicy
from policies.heuristic import HeuristicPolicy
from policies.outcome import Action, StepOutcome
from policies.registry import OverridePolicy, PolicyRegistry, make_policy
from policies.static import StaticPolicy

DRAFTERS = ["ngram", "int8", "model:/models/smol"]


def test_specs_build_the_named_policies():
    static = make_policy("static:int8:3", DRAFTERS)
    assert isinstance(static, StaticPolicy) and static.decide() == Action("int8", 3)
    assert make_policy("static:none:0", DRAFTERS).decide() == Action("none", 0)
    assert make_policy("static:model:/models/smol:5", DRAFTERS).decide() == Action("model:/models/smol", 5)
    heuristic = make_policy("heuristic:model:/models/smol", DRAFTERS, start_k=6)
    assert isinstance(heuristic, HeuristicPolicy) and heuristic.decide() == Action("model:/models/smol", 6)
    adaptive = make_policy("adaptive", DRAFTERS, seed=1, max_k=8)
    assert isinstance(adaptive, AdaptivePolicy) and adaptive.config.max_k == 8 and adaptive.drafters == DRAFTERS


@pytest.mark.parametrize(
    "spec, kwargs, message",
    [
        ("greedy", {},
         "spec must be one of 'static:<drafter>:<k>', 'heuristic:<drafter>' or 'adaptive', got spec='greedy'"),
        ("adaptive:ngram", {}, "got spec='adaptive:ngram'"),
        ("static:ngram", {}, "a static spec must be 'static:<drafter>:<k>', got spec='static:ngram'"),
        ("static:ngram:four", {}, "k in a static spec must be an integer >= 0, got k='four'"),
        ("static:ngram:-1", {}, "k must be an integer >= 0, got k=-1"),
        ("static:eagle:2", {}, "spec names drafter 'eagle', which is not among drafters="),
        ("heuristic:", {}, "spec must name a drafter"),
        ("heuristic:none", {}, "drafter must name a drafter other than 'none'"),
        ("heuristic:int8", {"start": 3}, "unknown heuristic policy parameter(s) ['start']"),
        ("static:int8:2", {"max_k": 3}, "a static policy takes no parameters"),
        ("adaptive", {"max_k": -2}, "max_k must be an integer in [1, 256], got max_k=-2"),
    ],
)
def test_bad_specs_and_parameters_raise_one_clear_error(spec, kwargs, message):
    with pytest.raises(ValueError) as error:
        make_policy(spec, DRAFTERS, **kwargs)
    assert message in str(error.value)


def test_registry_keeps_one_policy_per_key_and_learning_carries_across_requests():
    registry = PolicyRegistry("adaptive", DRAFTERS, seed=0)
    chat, code = registry.get("smol/chat"), registry.get("smol/code")
    assert chat is registry.get("smol/chat") and chat is not code
    chat.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.035))
    assert registry.get("smol/chat").costs.plain_s() == pytest.approx(0.035)
    assert code.costs.plain_s() != code.costs.plain_s()  # NaN: nothing learned for that key
    assert sorted(registry.keys()) == ["smol/chat", "smol/code"]
    assert chat.key == "smol/chat"


def test_registry_drops_the_least_recently_used_key_beyond_max_keys():
    registry = PolicyRegistry("static:ngram:2", DRAFTERS, max_keys=2)
    first = registry.get("a")
    registry.get("b")
    registry.get("a")
    registry.get("c")
    assert registry.keys() == ["a", "c"] and registry.get("a") is first


def test_registry_rejects_a_bad_spec_at_construction():
    with pytest.raises(ValueError, match="got spec='adaptiv'"):
        PolicyRegistry("adaptiv", DRAFTERS)
    with pytest.raises(ValueError, match="max_keys must be an integer >= 1, got max_keys=0"):
        PolicyRegistry("adaptive", DRAFTERS, max_keys=0)


def test_overrides_force_the_action_and_still_teach_the_shared_policy():
    registry = PolicyRegistry("adaptive", DRAFTERS)
    plain = registry.for_request("k", force_plain=True)
    assert isinstance(plain, OverridePolicy) and plain.decide() == Action("none", 0)
    plain.observe(StepOutcome("none", 0, 0, 0, 1, 0.0, 0.04))
    assert registry.get("k").costs.plain_s() == pytest.approx(0.04)
    assert registry.for_request("k", drafter="int8", k=3).decide() == Action("int8", 3)
    forced = registry.for_request("k", drafter="ngram").decide()  # k chosen by the key's policy
    assert forced.drafter == "ngram" and forced.k >= 1
    assert registry.for_request("k") is registry.get("k")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"force_plain": True, "drafter": "int8"}, "force_plain excludes drafter and k"),
        ({"k": 3}, "k can only be forced together with a drafter"),
        ({"drafter": "eagle", "k": 3}, "not among drafters"),
        ({"drafter": "int8", "k": -1}, "k must be an integer >= 0, got k=-1"),
    ],
)
def test_bad_overrides_raise_one_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PolicyRegistry("adaptive", DRAFTERS).for_request("k", **kwargs)


def test_forcing_a_drafter_without_k_needs_a_policy_that_chooses_k():
    with pytest.raises(ValueError, match="k must be given to force drafter='int8' on a static policy"):
        PolicyRegistry("static:ngram:2", DRAFTERS).for_request("k", drafter="int8")


def test_keys_get_different_but_reproducible_seeds():
    one, two = PolicyRegistry("adaptive", DRAFTERS, seed=5), PolicyRegistry("adaptive", DRAFTERS, seed=5)
    assert one.get("a").seed == two.get("a").seed != one.get("b").seed
