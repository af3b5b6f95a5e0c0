"""Bad input is one clear error naming the option and the value, before any model loads
(issue 12, items 3, 6 and 8)."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from adaptive_spec import models
from adaptive_spec.bench import Prompt, run_bench
from adaptive_spec.cli import app
from adaptive_spec.config import GenerationConfig
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.errors import InvalidParameterError
from tiny import loaded, one_thread, tiny_llama

runner = CliRunner()


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(models, "load_model", refuse)


def invoke_error(args) -> InvalidParameterError:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, InvalidParameterError), (args, result.output, result.exception)
    return result.exception


def write_lines(tmp_path, *lines, raw: bytes | None = None):
    path = tmp_path / "prompts.jsonl"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("\n".join(lines) + "\n")
    return path


# -- item 3: duplicate prompt ids -------------------------------------------------------------------

def test_a_repeated_prompt_id_is_refused_naming_the_id_and_both_lines(no_model, tmp_path):
    path = write_lines(tmp_path, '{"id": "a", "prompt": "1 2"}', '', '{"id": "b", "prompt": "3 4"}',
                       '{"id": "a", "prompt": "5 6"}')
    exc = invoke_error(["bench", "--prompts", str(path), "--configs", "plain", "--telemetry", "off"])
    assert exc.name == "prompts" and exc.value == f"{path}:4"
    assert "duplicate id 'a' (lines 1 and 4)" in str(exc)


def test_an_integer_id_and_its_text_are_the_same_id(no_model, tmp_path):
    path = write_lines(tmp_path, '{"id": 7, "prompt": "1 2"}', '{"id": "7", "prompt": "3 4"}')
    exc = invoke_error(["calibrate", "--prompts", str(path), "--drafters", "ngram"])
    assert exc.name == "prompts" and "duplicate id '7' (lines 1 and 2)" in str(exc)


def test_run_bench_refuses_repeated_ids_instead_of_calling_plain_unequal_to_itself():
    with pytest.raises(InvalidParameterError, match="duplicate ids") as caught:
        run_bench(loaded(tiny_llama(seed=0)), [Prompt("a", "1 2 3"), Prompt("a", "4 5 6")], ["plain"], 4)
    assert caught.value.name == "prompts" and caught.value.value == ["a"]


# -- item 6: seeds, text, prompt files, the cache, one error line ----------------------------------

@pytest.mark.parametrize("seed", [str(2**64), str(-(2**63) - 1)])
def test_a_seed_outside_64_bits_is_refused_before_loading(no_model, seed):
    exc = invoke_error(["generate", "--prompt", "hi", "--temperature", "1", "--seed", seed, "--telemetry", "off"])
    assert exc.name == "seed" and str(exc.value) == seed and "[-2**63, 2**64 - 1]" in str(exc)


def test_validate_sim_refuses_a_negative_seed_before_the_real_run(no_model):
    exc = invoke_error(["validate-sim", "--seed", "-1", "--drafters", "ngram"])
    assert exc.name == "seed" and "[0, 2**64 - 1]" in str(exc)


@pytest.mark.parametrize("seed", [2**64 - 1, -(2**63)])
def test_the_widest_64_bit_seeds_sample(seed):
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)))
    cfg = GenerationConfig(max_new_tokens=3, do_sample=True, seed=seed)
    with one_thread():
        assert decoder.generate("1 2 3", cfg).token_ids == decoder.generate("1 2 3", cfg).token_ids


def test_a_prompt_that_is_not_utf8_is_rejected_not_replaced(no_model):
    # invalid bytes on a command line reach Python as lone surrogates (surrogateescape)
    exc = invoke_error(["generate", "--prompt", "caf\udce9 au lait", "--telemetry", "off"])
    assert exc.name == "prompt" and "U+DCE9 at character 3" in str(exc) and "rejected, not replaced" in str(exc)


def test_the_python_api_rejects_a_lone_surrogate_too():
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)))
    with pytest.raises(InvalidParameterError, match="U\\+D800") as caught:
        decoder.generate("1 2 \ud800", max_new_tokens=2)
    assert caught.value.name == "prompt"


@pytest.mark.parametrize("content, found", [
    (b'{"id": "a", "prompt": "1 2"}\n{"id": "b", "prompt": "caf\xe9"}\n', "line 2: byte 0xe9 is not valid UTF-8"),
    (b'{"id": "a", "prompt": "1 \\ud800 2"}\n', "line 1: lone surrogate U+D800"),
    (b'{"id": "a", "prompt": 5}\n', "line 1: 'prompt' must be text, not int 5"),
    (b'{"id": "a", "prompt": ["1", "2"]}\n', "line 1: 'prompt' must be text, not list"),
    (b'{"id": "a", "prompt": "  "}\n', "line 1: 'prompt' must be non-empty text"),
    (b'{"id": null, "prompt": "1 2"}\n', "line 1: 'id' must be non-empty text or an integer"),
    (b'{"id": "a", "prompt": "1", "kind": 3}\n', "line 1: 'kind' must be non-empty text"),
    (b'["a", "1 2"]\n', "line 1: each line needs a JSON object"),
])
def test_a_bad_prompt_file_line_is_one_error_naming_file_and_line(no_model, tmp_path, content, found):
    path = write_lines(tmp_path, raw=content)
    exc = invoke_error(["bench", "--prompts", str(path), "--configs", "plain", "--telemetry", "off"])
    line = found.split(":")[0].removeprefix("line ")
    assert exc.name == "prompts" and exc.value == f"{path}:{line}"
    assert found.split(": ", 1)[1] in str(exc)


def test_a_prompt_file_may_start_with_a_byte_order_mark(tmp_path):
    from adaptive_spec.prompts import load_prompts

    path = write_lines(tmp_path, raw='\ufeff{"id": "a", "prompt": "é"}\n'.encode())
    assert load_prompts(path) == [Prompt("a", "é")]


def test_an_unwritable_model_cache_is_one_error_naming_it(monkeypatch, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("ADAPTIVE_SPEC_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(models, "convert_gguf", lambda *a: pytest.fail("converted into an unwritable cache"))
    exc = invoke_error(["generate", "--prompt", "hi", "--telemetry", "off", "--device", "cpu"])
    assert exc.name == "ADAPTIVE_SPEC_CACHE" and exc.value == str(blocker / "cache")
    assert "not converted yet" in str(exc)


@pytest.mark.parametrize("args, start", [
    # invalid UTF-8 in argv: our error, longer than 80 columns, raised before torch is imported
    (["--prompt", b"a long prompt, longer than eighty columns when quoted in the error line \xff"],
     "error: invalid prompt="),
    # a value click refuses: typer's boxed panel before
    (["--prompt", "hi", "--seed", "not-a-number-" * 6], "error: Invalid value for '--seed'"),
])
def test_an_error_is_one_line_when_stderr_is_not_a_terminal(args, start, tmp_path):
    # a model folder that is none: a CLI that let the bad input through stops there, loading nothing
    run = subprocess.run([sys.executable, "-c", "from adaptive_spec.cli import main; main()", "generate", *args,
                          "--model", str(tmp_path), "--telemetry", "off"],
                         capture_output=True, env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
                         timeout=120)
    lines = run.stderr.decode().splitlines()
    assert run.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith(start) and len(lines[0]) > 80


# -- item 8: drafters, context overflow -------------------------------------------------------------

@pytest.mark.parametrize("args, name, value", [
    (["generate", "--prompt", "hi", "--drafter", "model:/nonexistent/drafter"], "drafter", "model:/nonexistent/drafter"),
    (["generate", "--prompt", "hi", "--drafter", "ngram,bogus"], "drafter", "bogus"),
    (["generate", "--prompt", "hi", "--policy", "static:model:/nonexistent:4"], "drafter", "model:/nonexistent"),
    (["calibrate", "--drafters", "model:/nonexistent"], "drafters", "model:/nonexistent"),
    (["validate-sim", "--drafters", "model:/nonexistent"], "drafters", "model:/nonexistent"),
    (["bench", "--prompts", "benchmarks/engine.jsonl", "--configs", "plain,static:model:/nonexistent:4"], "configs",
     "static:model:/nonexistent:4"),
])
def test_a_drafter_that_is_not_there_is_named_as_given_before_loading(no_model, args, name, value):
    exc = invoke_error([*args, "--device", "cpu", *(["--telemetry", "off"] if args[0] in ("generate", "bench") else [])])
    assert (exc.name, exc.value) == (name, value)


def test_a_drafter_model_that_fails_to_load_is_named_by_the_drafter_option(monkeypatch, tmp_path):
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))  # a folder, but no model in it
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded(tiny_llama(seed=0)))  # the target only
    exc = invoke_error(["generate", "--prompt", "1 2", "--drafter", f"model:{folder}", "--model", "tiny", "--telemetry", "off",
                        "--device", "cpu"])
    assert (exc.name, exc.value) == ("drafter", f"model:{folder}")


def test_a_prompt_that_alone_fills_the_context_is_named_as_the_prompt():
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)))  # context: 256 positions
    with pytest.raises(InvalidParameterError, match="prompt alone fills the model's context of 256") as caught:
        decoder.generate(" ".join(["1"] * 256), max_new_tokens=1)
    assert caught.value.name == "prompt"
    with pytest.raises(InvalidParameterError, match="at most 56 fit after this prompt") as caught:
        decoder.generate(" ".join(["1"] * 200), max_new_tokens=57)
    assert caught.value.name == "max_new_tokens"


@pytest.mark.parametrize("profile, found", [
    ("simulator/profiles/example_cpu.json", "cannot replay this workload"),  # no acceptance for these classes
    ("README.md", "not valid JSON"),
])
def test_validate_sim_refuses_a_profile_the_simulator_cannot_use_before_the_real_run(no_model, profile, found):
    exc = invoke_error(["validate-sim", "--profile", profile, "--drafters", "ngram", "--device", "cpu"])
    assert (exc.name, exc.value) == ("profile", profile) and found in str(exc)


def test_calibrate_per_prompt_refuses_an_id_that_is_also_a_kind_before_loading(no_model, tmp_path):
    path = write_lines(tmp_path, '{"id": "copy", "prompt": "1 2", "kind": "open"}',
                       '{"id": "b", "prompt": "3 4", "kind": "copy"}')
    exc = invoke_error(["calibrate", "--prompts", str(path), "--drafters", "ngram", "--per-prompt",
                        "--out", str(tmp_path / "p.json")])
    assert exc.name == "per_prompt" and "prompt id 'copy'" in str(exc)
