"""`bench --rounds`: every (config, prompt) is reported by its median round."""

import pytest

from adaptive_spec.bench import Prompt, run_bench
from adaptive_spec.errors import InvalidParameterError
from tiny import loaded, tiny_llama


def test_rounds_report_each_prompt_s_median_round_and_check_every_round_s_tokens():
    target = loaded(tiny_llama(seed=0))
    prompts = [Prompt("a", "1 2 3 1 2 3 1 2", "copy"), Prompt("b", "4 5 6 7", "open")]
    result = run_bench(target, prompts, ["plain", "static:ngram:4", "adaptive"], 12, rounds=3)
    assert result["rounds"] == 3
    for name, config in result["configs"].items():
        for row in config["prompts"]:
            assert len(row["round_seconds"]) == 3
            assert row["seconds"] == sorted(row["round_seconds"])[1]  # the median round
            assert row["equals_plain"] and row["rounds_agree"]
        total = sum(r["new_tokens"] for r in config["prompts"]) / sum(r["seconds"] for r in config["prompts"])
        assert config["tokens_per_s"] == pytest.approx(total)


def test_rounds_must_be_a_positive_integer():
    with pytest.raises(InvalidParameterError, match="rounds"):
        run_bench(loaded(tiny_llama(seed=0)), [Prompt("a", "1 2 3")], ["plain"], 4, rounds=0)
