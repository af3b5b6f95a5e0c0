"""`bench --rounds`: every round kept, the order rotated, paired intervals; each (config, prompt)
still summarized by its median round for the readers of ``configs``."""

import json

import numpy as np
import pytest

from adaptive_spec.bench import Prompt, markdown_paired, render_paired, run_bench
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.paired import paired_report, speeds
from tiny import loaded, tiny_llama

CONFIGS = ["plain", "static:ngram:4", "adaptive"]


@pytest.fixture(scope="module")
def result():
    target = loaded(tiny_llama(seed=0))
    prompts = [Prompt("a", "1 2 3 1 2 3 1 2", "copy"), Prompt("b", "4 5 6 7", "open"), Prompt("c", "5 6 5 6 5", "copy")]
    return run_bench(target, prompts, CONFIGS, 12, rounds=3)


def test_rounds_report_each_prompt_s_median_round_and_check_every_round_s_tokens(result):
    assert result["rounds"] == 3
    for name, config in result["configs"].items():
        for row in config["prompts"]:
            assert len(row["round_seconds"]) == 3
            assert row["seconds"] == sorted(row["round_seconds"])[1]  # the median round
            assert row["equals_plain"] and row["rounds_agree"]
        total = sum(r["new_tokens"] for r in config["prompts"]) / sum(r["seconds"] for r in config["prompts"])
        assert config["tokens_per_s"] == pytest.approx(total)


def test_every_round_s_figures_are_kept_per_prompt(result):
    block = result["per_round"]
    assert block["prompt_ids"] == ["a", "b", "c"] and block["kinds"] == ["copy", "open", "copy"]
    for name in CONFIGS:
        runs = block["configs"][name]
        for field in ("seconds", "new_tokens", "equals_plain", "position"):
            assert np.shape(runs[field]) == (3, 3), field  # [prompt][round]
        assert all(all(row) for row in runs["equals_plain"])
        by_prompt = {r["id"]: r for r in result["configs"][name]["prompts"]}
        for pid, seconds in zip(block["prompt_ids"], runs["seconds"]):
            assert seconds == by_prompt[pid]["round_seconds"]  # the same rounds the summary picked from


def test_the_order_is_rotated_so_each_config_runs_first_middle_and_last_once_per_prompt(result):
    for i in range(3):
        positions = [[result["per_round"]["configs"][n]["position"][i][r] for n in CONFIGS] for r in range(3)]
        for r, order in enumerate(positions):
            assert sorted(order) == [0, 1, 2]
        for n in range(3):  # 3 rounds, 3 configs: every position once
            assert sorted(positions[r][n] for r in range(3)) == [0, 1, 2]
    assert result["positions"] == {n: [3, 3, 3] for n in CONFIGS}


def test_paired_intervals_are_recomputed_from_the_json_alone(result):
    data = json.loads(json.dumps(result))  # what a reader of the file has
    assert paired_report(data["per_round"]) == data["paired"]
    comparisons = data["paired"]["comparisons"]
    vs_plain = next(c for c in comparisons if c["config"] == "adaptive" and c["role"] == "plain" and c["kind"] == "all")
    ratios = speeds(data["per_round"], "adaptive") / speeds(data["per_round"], "plain")
    assert vs_plain["units"] == 9 and vs_plain["median"] == pytest.approx(float(np.median(ratios)))
    assert vs_plain["low"] <= vs_plain["median"] <= vs_plain["high"]
    kinds = {c["kind"] for c in comparisons if c["config"] == "adaptive"}
    assert kinds == {"all", "copy", "open"}
    assert not any(c["role"] == "noise floor" for c in comparisons)  # no hf-plain in this run


def test_the_paired_tables_label_every_comparison(result):
    text = markdown_paired(result)
    rows = [line for line in text.splitlines()[2:]]
    assert len(rows) == len(CONFIGS) * 3  # config x (all, copy, open)
    for row in rows:
        assert any(word in row for word in ("faster", "slower", "no difference detected")), row
    assert render_paired(result).row_count == len(rows)


def test_rounds_must_be_a_positive_integer():
    with pytest.raises(InvalidParameterError, match="rounds"):
        run_bench(loaded(tiny_llama(seed=0)), [Prompt("a", "1 2 3")], ["plain"], 4, rounds=0)


def test_results_md_renders_a_new_bench_file_s_intervals(result):
    from benchmarks import bench_sections

    data = json.loads(json.dumps(result))
    assert bench_sections.per_round_of(data) is data["per_round"]
    text = bench_sections.paired_table(data, data["per_round"])
    assert text.splitlines()[0] == "| config | all | copy | open |"
    assert [line.split(" |")[0] for line in text.splitlines()[2:]] == ["| `static:ngram:4`", "| `adaptive`"]
    assert "| `adaptive` |" in bench_sections.bench_table(data)


def test_a_prompt_that_does_not_fit_is_refused_by_id_before_any_prompt_runs():
    target = loaded(tiny_llama(seed=0))  # a context of 256 tokens
    prompts = [Prompt("a", "1 2 3 1 2 3 1 2", "copy"), Prompt("long", " ".join(["5"] * 250), "open")]
    started = []
    with pytest.raises(InvalidParameterError, match="prompt 'long': prompt \\(250 tokens\\)") as info:
        run_bench(target, prompts, ["plain", "static:ngram:4"], 8, progress=started.append)
    assert info.value.name == "max_new_tokens" and started == []
