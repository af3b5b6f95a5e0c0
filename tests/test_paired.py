"""adaptive_spec.paired: paired ratios, their bootstrap intervals, labels and the run order, on synthetic data."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_spec.paired import (NO_DIFFERENCE, TOO_FEW, best_other, bootstrap_median, compare, paired_report,
                                  position_counts, ratio_cell, schedule, verdict)


def synthetic(true_ratio: float, prompts: int, rounds: int, rng: np.random.Generator, kinds=("copy", "open"),
              prompt_sd=0.05, round_sd=0.02, noise_sd=0.05, machine_sd=0.25) -> dict:
    """A bench ``per_round`` block for configs ``a`` and ``plain``: a's log speed ratio over plain's is
    log(true_ratio) + a prompt effect + a round effect + unit noise (all symmetric, so the population
    median ratio is true_ratio); a machine-speed factor per unit, shared by both configs, cancels."""
    machine = np.exp(rng.normal(0, machine_sd, (prompts, rounds)))  # the same slow moment hits both
    base = 20.0 * machine
    log_ratio = (np.log(true_ratio) + rng.normal(0, prompt_sd, (prompts, 1)) + rng.normal(0, round_sd, (1, rounds))
                 + rng.normal(0, noise_sd, (prompts, rounds)))
    tokens = np.full((prompts, rounds), 96)
    kind_of = [kinds[i % len(kinds)] for i in range(prompts)]
    return {"prompt_ids": [f"p{i}" for i in range(prompts)], "kinds": kind_of,
            "configs": {"plain": {"seconds": (tokens / base).tolist(), "new_tokens": tokens.tolist()},
                        "a": {"seconds": (tokens / (base * np.exp(log_ratio))).tolist(), "new_tokens": tokens.tolist()}}}


@pytest.mark.parametrize("true_ratio", [0.8, 1.0, 1.3])
def test_a_known_ratio_is_recovered_inside_a_narrow_interval(true_ratio):
    data = synthetic(true_ratio, prompts=40, rounds=5, rng=np.random.default_rng(1))
    result = compare(data, "a", "plain", "plain")
    assert result.units == 200
    assert result.median == pytest.approx(true_ratio, rel=0.03)
    assert result.low <= true_ratio <= result.high
    assert result.high - result.low < 0.15 * true_ratio


def test_the_interval_covers_the_truth_at_about_the_stated_rate():
    """200 simulated experiments (20 prompts, 5 rounds, 1000 resamples each): the 95% interval covers
    the true median ratio in at least 90% of them (at a true 95% the count falls below 180 with
    probability < 0.1%; the pigeonhole bootstrap tends to err wide, not narrow)."""
    rng = np.random.default_rng(2026)
    covered = 0
    for seed in range(200):
        data = synthetic(1.1, prompts=20, rounds=5, rng=rng)
        result = compare(data, "a", "plain", "plain", resamples=1000, seed=seed)
        covered += result.low <= 1.1 <= result.high
    assert covered >= 180, f"covered the truth in {covered}/200"


def test_an_interval_that_spans_one_is_labelled_no_difference_not_a_win_or_a_loss():
    data = synthetic(1.02, prompts=8, rounds=3, rng=np.random.default_rng(3), noise_sd=0.2)
    result = compare(data, "a", "plain", "plain")
    assert result.low < 1.0 < result.high
    assert result.verdict == NO_DIFFERENCE
    assert verdict(1.01, 1.2) == "faster" and verdict(0.8, 0.99) == "slower" and verdict(1.0, 1.0) == NO_DIFFERENCE


def test_same_data_and_seed_give_the_same_interval_and_another_seed_a_close_one():
    data = synthetic(1.1, prompts=20, rounds=5, rng=np.random.default_rng(4))
    first, again = compare(data, "a", "plain", "plain"), compare(data, "a", "plain", "plain")
    other = compare(data, "a", "plain", "plain", seed=1)
    assert first == again
    assert other.low == pytest.approx(first.low, abs=0.02) and other.high == pytest.approx(first.high, abs=0.02)


def test_stratified_resamples_keep_each_kind_s_prompts():
    # a kind of prompt with ratio 2 and one with ratio 1, in equal numbers: a resample that lost a
    # kind's prompts would move the median to 1 or 2; kept strata keep it in between
    ratios = np.array([[2.0] * 3] * 4 + [[1.0] * 3] * 4)
    median, low, high = bootstrap_median(ratios, ["fast"] * 4 + ["slow"] * 4, resamples=500)
    assert (median, low, high) == (1.5, 1.5, 1.5)
    _, low, high = bootstrap_median(ratios, None, resamples=500)
    assert low == 1.0 and high == 2.0


def test_report_compares_every_config_with_plain_and_its_best_rival_and_gives_the_noise_floor():
    rng = np.random.default_rng(5)
    data = synthetic(1.5, prompts=6, rounds=3, rng=rng)
    same = synthetic(1.0, prompts=6, rounds=3, rng=rng)["configs"]["a"]
    data["configs"]["hf-plain"] = {"seconds": same["seconds"], "new_tokens": same["new_tokens"]}
    report = paired_report(data, resamples=200)
    got = {(c["config"], c["against"], c["role"], c["kind"]) for c in report["comparisons"]}
    assert ("a", "plain", "plain", "all") in got and ("a", "plain", "plain", "copy") in got
    assert best_other(data, "plain") == "a" and ("plain", "a", "best other", "open") in got
    assert {("plain", "hf-plain", "noise floor", k) for k in ("all", "copy", "open")} <= got
    assert "bootstrap" in report["method"] and report["level"] == 0.95


@pytest.mark.parametrize("configs,rounds,prompts", [(3, 3, 4), (5, 5, 7), (4, 2, 8), (7, 5, 42)])
def test_the_schedule_puts_every_config_first_middle_and_last_equally_often(configs, rounds, prompts):
    names = [f"c{i}" for i in range(configs)]
    positions = {n: [0] * configs for n in names}
    for r in range(rounds):
        for i in range(prompts):
            order = schedule(names, r, i)
            assert sorted(order) == names
            for position, name in enumerate(order):
                positions[name][position] += 1
    for counts in positions.values():
        assert max(counts) - min(counts) <= min(rounds % configs, prompts % configs)
        if rounds % configs == 0 or prompts % configs == 0:
            assert len(set(counts)) == 1
    per_round = {"configs": {n: {"position": [[schedule(names, r, i).index(n) for r in range(rounds)]
                                              for i in range(prompts)]} for n in names}}
    assert position_counts(per_round) == positions


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="prompts, rounds"):
        bootstrap_median(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="kind 'nope'"):
        compare(synthetic(1.0, 4, 2, np.random.default_rng(0)), "a", "plain", "plain", kind="nope")


def test_docstring_examples_run():
    import doctest

    import adaptive_spec.paired as paired

    result = doctest.testmod(paired)
    assert result.failed == 0 and result.attempted > 0  # a module whose examples vanished passes no test


def test_a_single_unit_gets_no_interval_and_no_verdict():
    data = synthetic(2.0, prompts=1, rounds=1, rng=np.random.default_rng(6), kinds=("only",))
    result = compare(data, "a", "plain", "plain")
    assert (result.units, result.low, result.high, result.verdict) == (1, None, None, TOO_FEW)
    assert ratio_cell(result.to_dict()).startswith(TOO_FEW)
