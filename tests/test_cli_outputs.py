"""Result files (issue 12, item 2): an output path that cannot be written fails before the run,
the table is printed before the file is written, and the file is written atomically; a write that
fails anyway leaves the results in a file the error names."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adaptive_spec import models
from adaptive_spec.cli import app
from adaptive_spec.errors import AdaptiveSpecError, InvalidParameterError
from tiny import loaded, one_thread, tiny_llama

runner = CliRunner()
PROMPTS = '{"id": "a", "prompt": "1 2 3 1 2 3 1 2", "kind": "copy"}\n{"id": "b", "prompt": "4 5 6 7", "kind": "open"}\n'


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model is the expensive step these checks must come before: here it is an error."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(models, "load_model", refuse)


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(PROMPTS)
    return path


@pytest.fixture
def not_a_folder(tmp_path):
    """A path whose parent is a regular file: unwritable whoever runs the test (root included)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    return blocker / "out.json"


@pytest.mark.parametrize("command", [
    ["bench", "--configs", "plain", "--telemetry", "off"],
    ["calibrate", "--drafters", "ngram"],
    ["validate-sim", "--drafters", "ngram", "--requests", "2"],
])
def test_an_unwritable_out_fails_before_any_model_loads(command, no_model, prompts_file, not_a_folder):
    result = runner.invoke(app, [*command, "--prompts", str(prompts_file), "--out", str(not_a_folder), "--device", "cpu"])
    assert isinstance(result.exception, InvalidParameterError), (result.output, result.exception)
    assert result.exception.name == "out" and result.exception.value == str(not_a_folder)
    assert "not a folder" in str(result.exception)


def test_a_folder_is_not_an_out_file(no_model, prompts_file, tmp_path):
    result = runner.invoke(app, ["bench", "--prompts", str(prompts_file), "--out", str(tmp_path), "--telemetry", "off"])
    assert isinstance(result.exception, InvalidParameterError) and result.exception.name == "out"


def test_bench_prints_its_table_and_keeps_its_results_when_the_write_fails(monkeypatch, prompts_file, tmp_path):
    out = tmp_path / "later" / "bench.json"  # writable when checked: the folder can be created

    def load_then_block(*args, **kwargs):
        (tmp_path / "later").write_text("")  # the folder's place is taken during the run
        return loaded(tiny_llama(seed=0))

    monkeypatch.setattr(models, "load_model", load_then_block)
    with one_thread():
        result = runner.invoke(app, ["bench", "--prompts", str(prompts_file), "--configs", "plain,static:ngram:4",
                                     "--max-new-tokens", "6", "--out", str(out), "--model", "tiny", "--telemetry", "off",
                                     "--device", "cpu"])
    exc = result.exception
    assert isinstance(exc, InvalidParameterError) and exc.name == "out", (result.output, exc)
    assert "static:ngram:4" in result.output and "= plain" in result.output  # the table came first
    saved = Path(str(exc).rsplit("saved to ", 1)[1])
    try:
        assert set(json.loads(saved.read_text())["configs"]) == {"plain", "static:ngram:4"}
    finally:
        saved.unlink()


def test_bench_writes_its_json(monkeypatch, prompts_file, tmp_path):
    out = tmp_path / "new" / "bench.json"
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded(tiny_llama(seed=0)))
    with one_thread():
        result = runner.invoke(app, ["bench", "--prompts", str(prompts_file), "--configs", "plain", "--max-new-tokens",
                                     "4", "--out", str(out), "--model", "tiny", "--telemetry", "off", "--device", "cpu"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert json.loads(out.read_text())["configs"]["plain"]["all_equal_plain"]
    assert os.listdir(out.parent) == ["bench.json"]  # no temporary left beside it


def test_a_failed_write_leaves_the_previous_file_whole_and_no_temporary(monkeypatch, tmp_path):
    from adaptive_spec import outputs

    out = tmp_path / "result.json"
    out.write_text('{"previous": true}')

    def replace_fails(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "replace", replace_fails)
    with pytest.raises(InvalidParameterError, match="No space left on device.*saved to") as caught:
        outputs.write_json_atomic(out, {"new": True}, "out")
    assert json.loads(out.read_text()) == {"previous": True}
    assert os.listdir(tmp_path) == ["result.json"]
    saved = Path(str(caught.value).rsplit("saved to ", 1)[1])
    assert json.loads(saved.read_text()) == {"new": True}
    saved.unlink()


def test_an_atomic_write_replaces_the_file_with_the_permissions_a_plain_write_gives(tmp_path):
    from adaptive_spec.outputs import write_json_atomic

    plain = tmp_path / "plain.json"
    plain.write_text("{}")
    out = write_json_atomic(tmp_path / "atomic.json", {"a": [1, 2]}, "out")
    assert json.loads(out.read_text()) == {"a": [1, 2]}
    assert out.stat().st_mode == plain.stat().st_mode


def test_bench_says_how_far_it_is_in_lines_when_stderr_is_not_a_terminal_and_brackets_are_text(monkeypatch, tmp_path):
    import threading

    from adaptive_spec import cli

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "prompt": "1 2 3 1 2"}\n{"id": "[/x]", "prompt": "4 5 6 7"}\n')
    printed = threading.Event()
    real_print = cli.err.print

    def note(*args, **kwargs):
        real_print(*args, **kwargs)
        printed.set()

    def generate_once_a_line_is_out(self, *args, **kwargs):  # each generation waits for a progress line
        assert printed.wait(30), "no progress line"
        printed.clear()
        return real_generate(self, *args, **kwargs)

    from adaptive_spec.decoder import SpeculativeDecoder

    real_generate = SpeculativeDecoder.generate
    monkeypatch.setattr(SpeculativeDecoder, "generate", generate_once_a_line_is_out)
    monkeypatch.setattr(cli.err, "print", note)
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded(tiny_llama(seed=0)))
    monkeypatch.setattr(cli, "PROGRESS_DELAY_S", 0.0)
    monkeypatch.setattr(cli, "PROGRESS_INTERVAL_S", 0.01)
    with one_thread():
        result = runner.invoke(app, ["bench", "--prompts", str(prompts), "--configs", "plain", "--max-new-tokens", "4",
                                     "--out", str(tmp_path / "bench.json"), "--model", "tiny", "--telemetry", "off",
                                     "--device", "cpu"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "loading tiny ..." in result.stderr
    assert "benchmarking [1/2] a · plain" in result.stderr and "benchmarking [2/2] [/x] · plain" in result.stderr


def test_a_model_name_with_brackets_is_named_in_an_error_not_read_as_markup():
    # no such model: resolving the name fails at once, inside the "loading" status that showed it
    result = runner.invoke(app, ["generate", "-p", "hi", "--model", "[/x]", "--device", "cpu", "--telemetry", "off"])
    assert isinstance(result.exception, AdaptiveSpecError), result.exception  # a line of its own, exit status 2
    assert "'[/x]'" in str(result.exception)
    assert result.stderr == ""  # it failed at once: no progress line before the error
