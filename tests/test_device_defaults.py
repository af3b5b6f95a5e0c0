"""Default drafters follow the device: on CUDA no int8 (CPU-only kernels), and int8 asked for on CUDA
is one error naming the option, the drafter and the device, raised before any model loads.
The CUDA machine is faked: ``torch.cuda.is_available`` says yes and the model loader is replaced."""

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import adaptive_spec.cli as cli
from adaptive_spec.drafters import default_drafters, runs_on
from adaptive_spec.errors import InvalidParameterError

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.mark.parametrize("device_type, given, expected", [
    ("cpu", None, ["ngram", "int8"]),
    ("cuda", None, ["ngram"]),
    ("cuda", ["ngram", "model:some/draft"], ["ngram", "model:some/draft"]),
    ("cuda", ["none"], ["none"]),
    ("cpu", ["int8"], ["int8"]),
])
def test_default_drafters_are_what_the_device_runs(device_type, given, expected):
    assert default_drafters(device_type, given) == expected


def test_int8_on_cuda_is_one_error_naming_the_option_drafter_and_device():
    assert runs_on("int8", "cpu") and not runs_on("int8", "cuda") and runs_on("ngram", "cuda")
    with pytest.raises(InvalidParameterError) as err:
        default_drafters("cuda", ["ngram", "int8"], name="drafters")
    assert err.value.name == "drafters" and err.value.value == "int8"
    assert "cuda" in str(err.value) and "CPU only" in str(err.value)


class Loaded(Exception):
    """Raised by the fake loader: the command got as far as loading a model."""


@pytest.fixture
def loads(monkeypatch):
    """Records the (drafters, device) each command would load a model with, instead of loading it."""
    calls = []

    def fake_load_decoder(model, drafters, torch_device, torch_dtype, chat_template, observers=None):
        calls.append((list(drafters), torch_device.type))
        raise Loaded

    monkeypatch.setattr(cli, "_load_decoder", fake_load_decoder)
    return calls


@pytest.fixture
def cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


GENERATE = ["generate", "--prompt", "hi", "--telemetry", "off"]
CALIBRATE = ["calibrate", "--prompts", str(REPO / "benchmarks/workloads.jsonl")]
VALIDATE = ["validate-sim", "--prompts", str(REPO / "benchmarks/workloads.jsonl"),
            "--profile", str(REPO / "simulator/profiles/smollm2_cpu.json")]  # covers the workload classes


@pytest.mark.parametrize("args", [GENERATE, CALIBRATE, VALIDATE], ids=["generate", "calibrate", "validate-sim"])
def test_auto_device_on_cuda_loads_the_default_set_without_int8(args, cuda, loads):
    result = runner.invoke(cli.app, args)
    assert isinstance(result.exception, Loaded), (result.output, result.exception)
    assert loads == [(["ngram"], "cuda")]


@pytest.mark.parametrize("args", [GENERATE, CALIBRATE, VALIDATE], ids=["generate", "calibrate", "validate-sim"])
def test_on_cpu_the_default_set_is_unchanged(args, monkeypatch, loads):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(cli.app, args)
    assert isinstance(result.exception, Loaded), (result.output, result.exception)
    assert loads == [(["ngram", "int8"], "cpu")]


@pytest.mark.parametrize("args, name", [
    ([*GENERATE, "--drafter", "ngram,int8"], "drafter"),
    ([*GENERATE, "--drafter", "int8", "--policy", "static"], "drafter"),
    ([*CALIBRATE, "--drafters", "int8"], "drafters"),
    ([*VALIDATE, "--drafters", "int8,ngram"], "drafters"),
])
def test_explicit_int8_on_cuda_fails_before_loading(args, name, cuda, loads):
    result = runner.invoke(cli.app, args)
    assert isinstance(result.exception, InvalidParameterError), (result.output, result.exception)
    assert result.exception.name == name and result.exception.value == "int8" and "cuda" in str(result.exception)
    assert loads == []


def test_explicit_int8_on_cuda_prints_one_line_and_exits_2(cuda, loads, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["adaptive-spec", *GENERATE, "--drafter", "int8"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "drafter='int8'" in lines[0] and "cuda" in lines[0], lines
    assert loads == []


def test_a_policy_naming_int8_on_cuda_is_refused_before_loading(cuda, loads):
    result = runner.invoke(cli.app, [*VALIDATE, "--policy", "static:int8:4"])
    assert isinstance(result.exception, InvalidParameterError) and result.exception.name == "policy"
    assert loads == []
