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
                    "simulate"):
        assert command in out, command


@pytest.mark.parametrize("args, name", [
    (["generate", "--prompt", "hi", "--temperature", "-1"], "temperature"),
    (["generate", "--prompt", "hi", "--k", "99"], "k"),
    (["generate", "--prompt", "hi", "--policy", "greedy-ish"], "policy"),
    (["generate", "--prompt", "hi", "--telemetry", "bogus"], "telemetry"),
    (["bench", "--prompts", "nope.jsonl"], "prompts"),
    (["bench", "--prompts", "benchmarks/engine.jsonl", "--configs", "static:ngram:x"], "configs"),
    (["bench", "--prompts", "benchmarks/engine.jsonl", "--max-new-tokens", "0"], "max_new_tokens"),
    (["bench", "--prompts", "benchmarks/engine.jsonl", "--rounds", "0"], "rounds"),
    (["calibrate", "--prompts", "nope.jsonl"], "prompts"),
    (["calibrate", "--repeats", "0"], "repeats"),
    (["validate-sim", "--requests", "0"], "requests"),
    (["validate-sim", "--rate", "-1"], "rate"),
    (["validate-sim", "--policy", "bogus"], "policy"),
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
