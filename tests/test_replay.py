"""benchmarks/replay.py replays greedy outputs through policies: on a static config it must take
exactly the steps the engine took."""

import importlib.util
from pathlib import Path

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from policies.static import StaticPolicy
from tiny import loaded, tiny_llama

_spec = importlib.util.spec_from_file_location("replay", Path(__file__).resolve().parents[1] / "benchmarks" / "replay.py")
replay_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_tool)

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
