"""The CLI: every command is mounted, and bad input fails before any model loads, naming the parameter."""

import sys
import types

import pytest
from typer.testing import CliRunner

from adaptive_spec.cli import app
from adaptive_spec.errors import InvalidParameterError

runner = CliRunner()


def test_every_command_is_mounted():
    out = runner.invoke(app, ["--help"]).output
    for command in ("generate", "bench", "demo", "calibrate", "validate-sim", "replay", "telemetry", "alerts",
                    "simulate", "serve", "loadgen"):
        assert command in out, command


@pytest.mark.parametrize("args, name", [
    (["generate", "--prompt", "hi", "--temperature", "-1"], "temperature"),
    (["generate", "--prompt", "hi", "--k", "99"], "k"),
    (["generate", "--prompt", "hi", "--policy", "greedy-ish"], "policy"),
    (["generate", "--prompt", "hi", "--policy", "adaptive+max_k=0"], "policy"),
    (["generate", "--prompt", "hi", "--policy", "static:ngram:4+early_stop=sometimes"], "policy"),
    (["generate", "--prompt", "hi", "--telemetry", "bogus"], "telemetry"),
    (["bench", "--prompts", "nope.jsonl"], "prompts"),
    (["bench", "--prompts", "benchmarks/engine.jsonl", "--configs", "static:ngram:x"], "configs"),
    (["bench", "--prompts", "benchmarks/engine.jsonl", "--max-new-tokens", "0"], "max_new_tokens"),
    (["bench", "--prompts", "benchmarks/engine.jsonl", "--rounds", "0"], "rounds"),
    (["calibrate", "--prompts", "nope.jsonl"], "prompts"),
    (["calibrate", "--repeats", "0"], "repeats"),
    (["calibrate", "--split", "test"], "split"),  # the default prompts have no split
    (["calibrate", "--batch-sizes", "1,4"], "batch_sizes"),
    (["calibrate", "--batch-sizes", "four"], "batch_sizes"),
    (["calibrate", "--streams-only", "--out", "no_such_profile.json"], "out"),
    (["calibrate", "--streams-only", "--batch-sizes", "2,4"], "batch_sizes"),  # would be ignored: refused  # adds to a profile: there is none
    (["calibrate", "--prompts", "benchmarks/shift.jsonl", "--streams-only", "--out",
      "simulator/profiles/smollm2_cpu.json"], "out"),  # no class per prompt id to give a stream
    (["calibrate", "--model", "gemma3", "--streams-only", "--out", "simulator/profiles/smollm2_cpu.json"],
     "model"),  # another model's profile: its streams would hold this tokenizer's ids
    (["validate-sim", "--requests", "0"], "requests"),
    (["validate-sim", "--rate", "-1"], "rate"),
    (["validate-sim", "--policy", "bogus"], "policy"),
    (["serve", "--host", "0.0.0.0"], "host"),  # other machines need an API key, or an explicit opt-out
    (["serve", "--host", "0.0.0.0", "--api-key", ""], "api_key"),  # "Authorization: Bearer" alone would match it
    (["serve", "--policy", "static:ngram"], "policy"),
    (["serve", "--max-queue", "0"], "max_queue"),
    (["serve", "--max-batch", "0"], "max_batch"),
    (["serve", "--max-batch", "4", "--drafters", "ngram,int8"], "drafters"),  # batched rows draft by lookup only
    (["serve", "--max-batch", "4", "--prefill-chunk", "0"], "prefill_chunk"),
    (["serve", "--max-batch", "4", "--plain-slowdown", "-0.1"], "plain_slowdown"),
    (["serve", "--max-batch", "4", "--plain-slowdown", "fast"], "plain_slowdown"),
    (["serve", "--max-batch", "4", "--batch-objective", "latency"], "batch_objective"),
    (["serve", "--max-batch", "4", "--batch-cut", "each"], "batch_cut"),
    (["serve", "--prefill-chunk", "64"], "prefill_chunk"),  # batch 1: no rows decode while a prompt prefills
    (["serve", "--profile", "simulator/profiles/smollm2_cpu_batched.json"], "profile"),  # batch 1: no batch cap
    (["serve", "--max-batch", "4", "--profile", "nope.json"], "profile"),
    (["serve", "--max-batch", "4", "--profile", "simulator/profiles/smollm2_cpu.json"], "profile"),  # batch-1 steps only
    (["serve", "--max-batch", "4", "--model", "gemma3", "--profile", "simulator/profiles/smollm2_cpu_batched.json"],
     "profile"),  # another model's costs
    (["serve", "--max-batch", "4", "--profile", "simulator/profiles/example_gpu_synthetic.json"], "profile"),  # not measured
    (["serve", "--drafters", "ngram,suffix", "--suffix-max-tokens", "0"], "suffix_max_tokens"),
    (["serve", "--drafters", "ngram", "--suffix-persist"], "suffix_persist"),  # would do nothing without suffix
    (["serve", "--suffix-shared"], "suffix_shared"),
])
def test_bad_input_is_one_error_naming_the_parameter(args, name):
    result = runner.invoke(app, args)
    assert isinstance(result.exception, InvalidParameterError), (args, result.output, result.exception)
    assert result.exception.name == name


def test_replay_hands_every_argument_to_the_script(monkeypatch):
    seen = []
    script = types.ModuleType("benchmarks.replay")
    script.main = lambda argv=None: seen.append(argv)
    monkeypatch.setitem(sys.modules, "benchmarks.replay", script)
    result = runner.invoke(app, ["replay", "result.json", "prompts.jsonl", "--draws", "3", "--help"])
    assert result.exit_code == 0, result.output
    assert seen == [["result.json", "prompts.jsonl", "--draws", "3", "--help"]]


def test_generate_takes_a_shorthand_or_a_full_spec():
    from adaptive_spec.cli import _make_policy, _spec_drafter

    assert _make_policy("static", ["int8", "ngram"], 3).decide() == _make_policy("static:int8:3", ["int8"], 8).decide()
    assert _make_policy("heuristic", ["ngram"], 8).decide().drafter == "ngram"
    assert _make_policy("adaptive+max_k=6", ["ngram"], 8).config.max_k == 6
    assert _make_policy("plain", ["ngram"], 8).decide().k == 0
    assert _make_policy("static:int8:8+early_stop=learned", ["int8"], 8).name == "static+early_stop=learned"
    # a spec naming its drafter loads that drafter when --drafter is not given
    assert [_spec_drafter(p) for p in ("static", "adaptive+max_k=4", "heuristic:model:/m", "static:int8:2")] == \
        [None, None, "model:/m", "int8"]
