"""`adaptive-spec replay` (benchmarks/replay.py) replays greedy outputs through policies: on a static config it must take
exactly the steps the engine took."""

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from policies.static import StaticPolicy
from tiny import loaded, tiny_llama

from benchmarks import replay as replay_tool

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3], [9, 8, 7, 6, 9, 8, 7, 6, 9, 8]]


def test_replay_of_a_static_config_takes_the_engine_s_steps():
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()])
    requests, engine_steps = [], []
    for i, prompt in enumerate(PROMPTS):
        plain = decoder.generate(prompt, max_new_tokens=30, policy=StaticPolicy("none", 0))
        spec = decoder.generate(prompt, max_new_tokens=30, policy=StaticPolicy("ngram", 3))
        assert spec.token_ids == plain.token_ids
        requests.append((f"p{i}", "copy", prompt, plain.token_ids, 0.0))
        engine_steps.append(len(spec.steps))
    costs = [0.03, 0.032, 0.034, 0.036]
    rows = replay_tool.replay(StaticPolicy("ngram", 3), requests, costs, 30)
    assert [r["steps"] for r in rows] == engine_steps
    assert [r["new_tokens"] for r in rows] == [len(r[3]) for r in requests]
    plain_rows = replay_tool.replay(StaticPolicy("none", 0), requests, costs, 30)
    assert [r["steps"] for r in plain_rows] == [len(r[3]) - 1 for r in requests]  # the first token is prefill's
    assert [r["seconds"] for r in plain_rows] == pytest.approx([(len(req[3]) - 1) * costs[0] for req in requests])


def test_replay_drives_the_adaptive_policy_with_its_gate_over_the_same_outputs():
    requests = [("p0", "copy", PROMPTS[0], [4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5], 0.0)]
    costs = [0.03, 0.032, 0.034, 0.036, 0.05, 0.05, 0.05, 0.05, 0.06]
    policy = replay_tool.make_replay_policy("adaptive")
    rows = replay_tool.replay(policy, requests, costs, 30)
    assert rows[0]["new_tokens"] == 18
    assert rows[0]["steps"] < 17  # the copy run is drafted, not decoded token by token
    assert policy._warm_started and policy.draft_gate("ngram").profiles  # warm costs, gate learned


def test_cost_draws_slow_each_request_alike_under_every_config():
    samples, slowdowns = [[0.030, 0.032], [0.040]], [0.9, 1.0, 1.3]
    one, other = replay_tool.CostDraws(samples, slowdowns, seed=3), replay_tool.CostDraws(samples, slowdowns, seed=3)
    seen = set()
    for steps in range(6):
        one.new_request()
        other.new_request()
        for _ in range(steps):  # the configs take different numbers of steps per request
            one(0)
        assert one.factor == other.factor
        assert one(1) == pytest.approx(0.040 * one.factor)
        assert one(0) / one.factor in (pytest.approx(0.030), pytest.approx(0.032))
        seen.add(one.factor)
    assert seen <= set(slowdowns) and len(seen) > 1


def test_request_slowdowns_compare_each_request_s_plain_steps_with_the_run_s():
    def prompt(plain_s):
        return {"step_records": [["none", 0, 0, 0, 1, 0.0, plain_s]] * 8 + [["ngram", 4, 4, 4, 5, 0.0003, 0.2]]}
    result = {"step_record_fields": ["drafter", "k", "proposed", "accepted", "emitted", "draft_s", "verify_s"],
              "configs": {"plain": {"prompts": [prompt(0.030), prompt(0.036)]},
                          "static:ngram:4": {"prompts": [prompt(0.036), {"step_records": []}]}}}
    assert replay_tool.request_slowdowns(result) == pytest.approx([30 / 36, 1.0, 1.0])
    result["configs"] = {"plain": {"prompts": [{"step_records": []}]}}  # nothing to judge spells by
    assert replay_tool.request_slowdowns(result) == [1.0]
