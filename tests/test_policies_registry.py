"""The policy spec grammar, make_policy, one policy per traffic key, request overrides."""

import pytest

from adaptive_spec.bench import ADAPTIVE_DRAFTERS, parse_config
from adaptive_spec.errors import InvalidParameterError
from policies.adaptive import AdaptivePolicy
from policies.heuristic import HeuristicPolicy
from policies.outcome import Action, StepOutcome
from policies.registry import OverridePolicy, PolicyRegistry, PolicySpec, make_policy, parse_spec
from policies.static import StaticPolicy
from policies.with_early_stop import WithEarlyStop
from simulator.policy_factory import policy_builder

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
         "spec must be one of 'plain', 'static:<drafter>:<k>', 'heuristic:<drafter>' or 'adaptive', each "
         "optionally followed by '+<option>=<value>', got spec='greedy'"),
        ("adaptive:ngram", {}, "got spec='adaptive:ngram'"),
        ("static:ngram", {}, "a static spec must be 'static:<drafter>:<k>', got spec='static:ngram'"),
        ("static:ngram:four", {}, "k in a static spec must be an integer >= 0, got k='four'"),
        ("static:ngram:-1", {}, "k in a static spec must be an integer >= 0, got k='-1' in spec='static:ngram:-1'"),
        ("static:eagle:2", {}, "spec names drafter 'eagle', which is not among drafters="),
        ("heuristic:", {}, "spec must name a drafter"),
        ("heuristic:none", {}, "drafter must name a drafter other than 'none'"),
        ("heuristic:int8", {"start": 3}, "unknown heuristic policy parameter(s) ['start']"),
        ("static:int8:2", {"max_k": 3}, "a static policy takes no parameters"),
        ("adaptive", {"max_k": -2}, "max_k must be an integer in [1, 256], got max_k=-2, in spec='adaptive'"),
        ("adaptive+max_k=4", {"max_k": 8}, "max_k is given both in the spec and as a parameter"),
        ("static:int8:8+early_stop=sometimes", {}, "mode must be one of ('learned', 'threshold')"),
        ("static:int8:8+max_k=3", {}, "a static policy takes no parameters but early_stop=learned|threshold"),
        ("plain+max_k=3", {}, "plain decoding takes no parameters, got ['max_k'], in spec='plain+max_k=3'"),
        ("adaptive+guard=3", {}, "guard options are set field by field"),
        ("adaptive+maxk=3", {}, "unknown adaptive policy parameter maxk=3"),
    ],
)
def test_bad_specs_and_parameters_raise_one_clear_error(spec, kwargs, message):
    with pytest.raises(ValueError) as error:
        make_policy(spec, DRAFTERS, **kwargs)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "spec, parsed",
    [
        ("plain", PolicySpec("plain", "none", 0)),
        ("static:none:0", PolicySpec("plain", "none", 0)),
        (" static:int8:8 ", PolicySpec("static", "int8", 8)),
        ("static:model:/models/smol:5", PolicySpec("static", "model:/models/smol", 5)),
        ("static:int8:8+early_stop=learned", PolicySpec("static", "int8", 8, {"early_stop": "learned"})),
        ("heuristic:ngram", PolicySpec("heuristic", "ngram")),
        ("heuristic:model:/models/smol+start_k=2+max_k=16",
         PolicySpec("heuristic", "model:/models/smol", None, {"start_k": 2, "max_k": 16})),
        ("adaptive", PolicySpec("adaptive")),
        ("adaptive+max_k=8+early_stop=threshold",
         PolicySpec("adaptive", options={"max_k": 8, "early_stop": "threshold"})),
        ("adaptive:early_stop=threshold+max_k=8",  # the old bench form, an alias
         PolicySpec("adaptive", options={"early_stop": "threshold", "max_k": 8})),
        ("adaptive:match_gate=false", PolicySpec("adaptive", options={"match_gate": False})),
        ("adaptive+match_gate=TRUE+match_lift_weight=1e12+name=x",
         PolicySpec("adaptive", options={"match_gate": True, "match_lift_weight": 1e12, "name": "x"})),
    ],
)
def test_the_grammar_parses_every_form_with_typed_options(spec, parsed):
    assert parse_spec(spec) == parsed


BAD_SPECS = [
    ("", "spec must be one of"),
    ("greedy", "spec must be one of"),
    ("plain:ngram", "spec must be one of"),
    ("adaptive:", "spec must be one of"),
    ("adaptive:ngram", "spec must be one of"),
    ("static:ngram", "a static spec must be 'static:<drafter>:<k>'"),
    ("static::4", "a static spec must be 'static:<drafter>:<k>'"),
    ("static:ngram:4:", "k in a static spec must be an integer >= 0, got k=''"),
    ("static:ngram:-1", "k in a static spec must be an integer >= 0, got k='-1'"),
    ("static:ngram:\u00b2", "k in a static spec must be an integer >= 0, got k='\u00b2'"),
    ("static:ngram:\u0663", "k in a static spec must be an integer >= 0, got k='\u0663'"),
    ("heuristic:", "a heuristic spec must name a drafter"),
    ("heuristic:+start_k=2", "a heuristic spec must name a drafter"),
    ("adaptive+", "each option must be '<name>=<value>', got ''"),
    ("adaptive+max_k", "each option must be '<name>=<value>', got 'max_k'"),
    ("adaptive+max_k=", "each option must be '<name>=<value>', got 'max_k='"),
    ("adaptive+=8", "each option must be '<name>=<value>', got '=8'"),
    ("adaptive+max_k=8+max_k=4", "option 'max_k' is given twice"),
]


@pytest.mark.parametrize("spec, message", BAD_SPECS)
def test_a_malformed_spec_raises_one_error_that_names_it(spec, message):
    with pytest.raises(ValueError) as error:
        parse_spec(spec)
    assert message in str(error.value) and f"spec={spec!r}" in str(error.value)


def test_parse_spec_rejects_what_is_not_a_string():
    with pytest.raises(ValueError, match="spec must be a string"):
        parse_spec(None)


def test_options_in_the_spec_reach_the_policy():
    early = make_policy("static:ngram:8+early_stop=threshold", DRAFTERS)
    assert isinstance(early, WithEarlyStop) and early.mode == "threshold" and early.decide() == Action("ngram", 8)
    assert make_policy("static:ngram:8", DRAFTERS, early_stop="learned").mode == "learned"
    heuristic = make_policy("heuristic:model:/models/smol+start_k=2+max_k=16", DRAFTERS)
    assert heuristic.decide() == Action("model:/models/smol", 2)
    adaptive = make_policy("adaptive+max_k=8+early_stop=threshold+match_gate=false", DRAFTERS)
    assert (adaptive.config.max_k, adaptive.config.early_stop, adaptive.config.match_gate) == (8, "threshold", False)
    assert make_policy("adaptive:max_k=8", DRAFTERS).config.max_k == 8  # the old bench form
    assert make_policy("adaptive+max_k=8", DRAFTERS, max_k=8).config.max_k == 8  # the same value twice is fine


def test_plain_is_static_none_0():
    for spec in ("plain", "static:none:0"):
        policy = make_policy(spec, DRAFTERS)
        assert isinstance(policy, StaticPolicy) and policy.decide() == Action("none", 0)


SHARED_SPECS = ["plain", "static:none:0", "static:ngram:4", "static:int8:8+early_stop=learned", "heuristic:ngram",
                "heuristic:int8+start_k=2", "adaptive", "adaptive+max_k=8", "adaptive:early_stop=threshold+max_k=8"]


@pytest.mark.parametrize("spec", SHARED_SPECS)
def test_bench_and_simulator_accept_the_same_specs(spec):
    config = parse_config(spec)
    expected = make_policy(spec, list(ADAPTIVE_DRAFTERS))
    assert type(config.make_policy()) is type(expected)
    assert type(policy_builder(spec, list(ADAPTIVE_DRAFTERS))(0)) is type(expected)
    assert config.drafters == {"plain": (), "adaptive": ADAPTIVE_DRAFTERS}.get(parse_spec(spec).kind,
                                                                              (parse_spec(spec).drafter,))


@pytest.mark.parametrize("spec", [s for s, _ in BAD_SPECS if s] + ["adaptive+max_k=0", "adaptive+maxk=3",
                                                                  "static:int8:8+early_stop=sometimes",
                                                                  "heuristic:none", "plain+max_k=3"])
def test_bench_and_simulator_reject_the_same_bad_specs(spec):
    with pytest.raises(InvalidParameterError, match="configs"):
        parse_config(spec)
    with pytest.raises(ValueError, match="policy="):
        policy_builder(spec, list(ADAPTIVE_DRAFTERS))


def test_bench_keeps_its_transformers_peers_and_adaptive_drafters():
    assert parse_config("hf-assisted-int8").peer == "hf-assisted-int8"
    assert parse_config("adaptive+max_k=8").make_policy().drafters == list(ADAPTIVE_DRAFTERS)
    with pytest.raises(InvalidParameterError, match="or a transformers peer, one of hf-"):
        parse_config("greedy")


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
