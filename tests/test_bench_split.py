"""`bench --split`: the corpus's fields are read, one split is run, a split that does not exist fails
before any model loads; with `hf-plain` beside `plain` the report carries the noise floor."""

import json

import pytest
from typer.testing import CliRunner

from adaptive_spec import models
from adaptive_spec.cli import app
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.prompts import load_prompts, select_split
from tiny import loaded, one_thread, tiny_llama

runner = CliRunner()
ROWS = [
    {"id": "d1", "prompt": "1 2 3 1 2 3 1 2", "kind": "copy", "split": "dev", "source": "here"},
    {"id": "t1", "prompt": "1 2 3 1 2 3", "kind": "copy", "split": "test", "source": "here"},
    {"id": "t2", "prompt": "4 5 6 7", "kind": "open", "split": "test", "source": "here"},
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_prompt_files_carry_split_and_source(corpus):
    prompts = load_prompts(corpus)
    assert [(p.split, p.source) for p in prompts] == [("dev", "here"), ("test", "here"), ("test", "here")]
    assert [p.id for p in select_split(prompts, "test")] == ["t1", "t2"]


def test_a_bad_split_field_names_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "prompt": "x", "split": 3}\n')
    with pytest.raises(InvalidParameterError, match="bad.jsonl:1.*'split' must be non-empty"):
        load_prompts(path)


def test_a_split_with_no_prompt_fails_before_any_model_loads(monkeypatch, corpus, tmp_path):
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    result = runner.invoke(app, ["bench", "--prompts", str(corpus), "--split", "tset", "--out", str(tmp_path / "o.json"),
                                 "--telemetry", "off", "--device", "cpu"])
    exc = result.exception
    assert isinstance(exc, InvalidParameterError) and exc.name == "split", (result.output, exc)
    assert "dev, test" in str(exc)


def test_bench_runs_one_split_and_reports_the_noise_floor(monkeypatch, corpus, tmp_path):
    out = tmp_path / "bench.json"
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded(tiny_llama(seed=0)))
    with one_thread():
        result = runner.invoke(app, ["bench", "--prompts", str(corpus), "--split", "test", "--configs", "plain,hf-plain",
                                     "--rounds", "2", "--max-new-tokens", "4", "--out", str(out), "--model", "tiny",
                                     "--telemetry", "off", "--device", "cpu", "--markdown"])
    assert result.exit_code == 0, (result.output, result.exception)
    data = json.loads(out.read_text())
    assert data["split"] == "test" and data["prompts_file"] == str(corpus)
    assert data["per_round"]["prompt_ids"] == ["t1", "t2"]
    floor = [c for c in data["paired"]["comparisons"] if c["role"] == "noise floor"]
    assert {c["kind"] for c in floor} == {"all", "copy", "open"} and all(c["units"] for c in floor)
    assert "noise floor: `plain` / `hf-plain`" in result.output  # the Markdown table
    assert all(all(row) for row in data["per_round"]["configs"]["hf-plain"]["equals_plain"])
