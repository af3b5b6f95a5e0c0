"""`bench --checkpoint`: a run stopped part-way resumes where it stopped, with its controllers and
suffix histories as they were, and a checkpoint of another command is refused."""

import gzip
import pickle

import pytest

from adaptive_spec import bench_checkpoint
from adaptive_spec.bench import Prompt, run_bench
from adaptive_spec.errors import InvalidParameterError
from tiny import loaded, one_thread, tiny_llama

CONFIGS = ["plain", "static:ngram:4", "adaptive"]
PROMPTS = [Prompt("a", "1 2 3 1 2 3 1 2", "copy"), Prompt("b", "4 5 6 7", "open"), Prompt("c", "5 6 5 6 5", "copy")]


class Stop(Exception):
    pass


def stop_at(where: str):
    """A progress callback that stops the run when it is about to start ``where``."""
    def progress(message: str) -> None:
        if where in message:
            raise Stop(message)
    return progress


def saved(path) -> bench_checkpoint.BenchState:
    with gzip.open(path, "rb") as f:
        return pickle.load(f)["state"]


def test_a_stopped_run_resumes_where_it_stopped_with_its_controllers(tmp_path):
    target = loaded(tiny_llama(seed=0))
    path = tmp_path / "run.ckpt"
    with pytest.raises(Stop):  # stopped as round 2's second prompt begins
        run_bench(target, PROMPTS, CONFIGS, 12, rounds=3, checkpoint=path, progress=stop_at("round 2/3 · [2/3]"))
    before = saved(path)
    assert (before.next_round, before.next_prompt) == (1, 1)
    assert all(len(before.runs[(name, 0)]) == 2 and len(before.runs[(name, 1)]) == 1 for name in CONFIGS)
    steps_before = before.policies["adaptive"].steps
    assert steps_before > 0

    started = []
    result = run_bench(target, PROMPTS, CONFIGS, 12, rounds=3, checkpoint=path, progress=started.append)
    # the remaining work only: round 2 from its second prompt, then round 3
    assert len(started) == (2 + 3) * len(CONFIGS)
    assert started[0].startswith("round 2/3 · [2/3]")
    block = result["per_round"]["configs"]
    for name in CONFIGS:
        assert all(len(row) == 3 for row in block[name]["seconds"])
        assert all(all(row) for row in block[name]["equals_plain"])
    assert [(s["from_round"], s["from_prompt"]) for s in result["sessions"]] == [(0, 0), (1, 1)]
    # the controller went on learning from where it was: every measured step of every round taught it once
    after = saved(path)
    assert after.done
    measured_steps = sum(r["steps"] for i in range(len(PROMPTS)) for r in after.runs[("adaptive", i)])
    assert after.policies["adaptive"].steps == measured_steps > steps_before


def test_a_complete_checkpoint_only_summarizes(tmp_path):
    target = loaded(tiny_llama(seed=0))
    path = tmp_path / "run.ckpt"
    first = run_bench(target, PROMPTS, CONFIGS, 12, rounds=2, checkpoint=path)
    started = []
    again = run_bench(target, PROMPTS, CONFIGS, 12, rounds=2, checkpoint=path, progress=started.append)
    assert started == []
    assert again["per_round"]["configs"]["adaptive"]["seconds"] == first["per_round"]["configs"]["adaptive"]["seconds"]
    assert len(again["sessions"]) == 2


def test_a_resumed_suffix_config_drafts_from_the_history_it_had(tmp_path):
    target = loaded(tiny_llama(seed=3))
    text = "5 9 13"
    # the same text twice: the second is drafted from the first's answer, as long as the history survives
    prompts = [Prompt("first", text, "repeat"), Prompt("again", text, "repeat")]
    configs = ["plain", "static:suffix:8"]
    path = tmp_path / "suffix.ckpt"
    with one_thread():
        whole = run_bench(target, prompts, configs, 24, rounds=2)
        with pytest.raises(Stop):
            run_bench(target, prompts, configs, 24, rounds=2, checkpoint=path, progress=stop_at("round 2/2 · [2/2]"))
        resumed = run_bench(target, prompts, configs, 24, rounds=2, checkpoint=path)
    accepted = resumed["per_round"]["configs"]["static:suffix:8"]["accepted_tokens"]
    assert accepted == whole["per_round"]["configs"]["static:suffix:8"]["accepted_tokens"]
    assert all(a >= 16 for a in accepted[1])  # round 2's second prompt drafted from the restored history


def test_a_checkpoint_of_another_command_or_not_a_checkpoint_is_refused(tmp_path):
    target = loaded(tiny_llama(seed=0))
    path = tmp_path / "run.ckpt"
    with pytest.raises(Stop):
        run_bench(target, PROMPTS, CONFIGS, 12, rounds=2, checkpoint=path, progress=stop_at("[2/3]"))
    for change in ({"max_new_tokens": 8}, {"rounds": 3}, {"config_names": ["plain", "adaptive"]},
                   {"prompts": PROMPTS[:2]}):
        kwargs = {"prompts": PROMPTS, "config_names": CONFIGS, "max_new_tokens": 12, "rounds": 2, **change}
        with pytest.raises(InvalidParameterError) as err:
            run_bench(target, checkpoint=path, **kwargs)
        assert err.value.name == "checkpoint" and "another command" in str(err.value)
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a pickle")
    with pytest.raises(InvalidParameterError) as err:
        run_bench(target, PROMPTS, CONFIGS, 12, checkpoint=garbage)
    assert err.value.name == "checkpoint" and "not a bench checkpoint" in str(err.value)


def test_the_cli_refuses_a_checkpoint_it_cannot_write_before_loading_a_model(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from adaptive_spec import models
    from adaptive_spec.cli import app

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(models, "load_model", refuse)
    result = CliRunner().invoke(app, ["bench", "--prompts", "benchmarks/engine.jsonl", "--configs", "plain",
                                      "--telemetry", "off", "--checkpoint", str(tmp_path)])
    assert isinstance(result.exception, InvalidParameterError) and result.exception.name == "checkpoint"


@pytest.mark.parametrize("written", ["garbage", "another command"])
def test_the_cli_refuses_a_checkpoint_it_cannot_resume_before_loading_a_model(monkeypatch, tmp_path, written):
    from typer.testing import CliRunner

    from adaptive_spec import models
    from adaptive_spec.cli import app

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    path = tmp_path / "run.ckpt"
    if written == "garbage":
        path.write_bytes(b"not a pickle")
    else:  # the same command but for its token budget
        from adaptive_spec.prompts import load_prompts

        state = bench_checkpoint.BenchState(bench_checkpoint.signature(
            "smollm2", load_prompts("benchmarks/engine.jsonl"), ["plain"], 8, 1, False))
        bench_checkpoint.save(path, state)
    monkeypatch.setattr(models, "load_model", refuse)
    result = CliRunner().invoke(app, ["bench", "--prompts", "benchmarks/engine.jsonl", "--configs", "plain",
                                      "--telemetry", "off", "--max-new-tokens", "16", "--checkpoint", str(path),
                                      "--out", str(tmp_path / "bench.json")])
    assert isinstance(result.exception, InvalidParameterError) and result.exception.name == "checkpoint"


def test_a_config_named_twice_is_refused_before_loading_a_model(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from adaptive_spec import models
    from adaptive_spec.cli import app

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    result = CliRunner().invoke(app, ["bench", "--prompts", "benchmarks/engine.jsonl", "--configs",
                                      "plain,static:ngram:8,static:ngram:8", "--telemetry", "off",
                                      "--out", str(tmp_path / "bench.json")])
    assert isinstance(result.exception, InvalidParameterError)
    assert (result.exception.name, result.exception.value) == ("configs", "static:ngram:8")
    assert "given twice" in str(result.exception)
