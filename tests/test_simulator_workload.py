"""Arrival processes, class mixes and shifts, trace replay, lengths and acceptance draws."""

import random

import numpy as np
import pytest

from simulator.acceptance import AcceptanceProfile, expected_accepted, sample_num_accepted
from simulator.arrivals import ArrivalProcess
from simulator.entities import RequestClass
from simulator.lengths import LengthDist
from simulator.replay import read_trace_jsonl, requests_from_rows, write_trace_jsonl
from simulator.workload import Shift, Workload

CLASSES = {name: RequestClass(name, LengthDist("fixed", value=10), LengthDist("uniform", low=5, high=9))
           for name in ("a", "b")}


def _gaps(process: ArrivalProcess, rate=2.0, duration=20_000.0) -> np.ndarray:
    return np.diff(process.times(np.random.default_rng(1), 0.0, duration, rate))


@pytest.mark.parametrize("process", [ArrivalProcess("poisson"), ArrivalProcess("gamma", cv=3.0),
                                     ArrivalProcess("mmpp"), ArrivalProcess("diurnal", period_s=1000.0)])
def test_every_process_keeps_the_mean_rate(process):
    gaps = _gaps(process)
    assert 1 / gaps.mean() == pytest.approx(2.0, rel=0.06)


def test_gamma_and_mmpp_are_burstier_than_poisson():
    cv = lambda g: g.std() / g.mean()  # noqa: E731
    assert cv(_gaps(ArrivalProcess("poisson"))) == pytest.approx(1.0, abs=0.05)
    assert cv(_gaps(ArrivalProcess("gamma", cv=3.0))) == pytest.approx(3.0, rel=0.1)
    assert cv(_gaps(ArrivalProcess("mmpp", levels=(0.2, 5.0), mean_dwell_s=(100.0, 20.0)))) > 1.5


def test_diurnal_rate_follows_the_sine():
    times = ArrivalProcess("diurnal", amplitude=0.8, period_s=100.0).times(np.random.default_rng(2), 0, 10_000, 5.0)
    phase = (times % 100.0) / 100.0
    peak, trough = np.sum((phase > 0.15) & (phase < 0.35)), np.sum((phase > 0.65) & (phase < 0.85))
    assert peak / trough == pytest.approx(1.8 / 0.2, rel=0.25)


def test_step_shift_changes_rate_and_mix_at_the_boundary():
    workload = Workload(ArrivalProcess(), rate=1.0, mix={"a": 1.0}, duration_s=2000,
                        shifts=(Shift(at_s=1000, rate=3.0, mix={"b": 1.0}),))
    requests = workload.generate(CLASSES, np.random.default_rng(0))
    before = [r for r in requests if r.arrival_s < 1000]
    after = [r for r in requests if r.arrival_s >= 1000]
    assert {r.klass for r in before} == {"a"} and {r.klass for r in after} == {"b"}
    assert len(after) / len(before) == pytest.approx(3.0, rel=0.15)
    assert [r.id for r in requests] == list(range(len(requests)))
    assert all(5 <= r.output_tokens <= 9 and r.prompt_tokens == 10 for r in requests)


def test_mix_weights_split_the_traffic():
    workload = Workload(ArrivalProcess(), rate=10.0, mix={"a": 3.0, "b": 1.0}, duration_s=1000)
    requests = workload.generate(CLASSES, np.random.default_rng(0))
    share_a = sum(r.klass == "a" for r in requests) / len(requests)
    assert share_a == pytest.approx(0.75, abs=0.02)


def test_replay_round_trips_through_jsonl_and_moves_origin_to_zero(tmp_path):
    rows = [{"arrival_time": 1_700_000_010.0, "class": "b", "prompt_tokens": 7, "output_tokens": 3},
            {"arrival_s": 1_700_000_000.0, "class": "a", "prompt_tokens": 5, "output_tokens": 2}]
    requests = requests_from_rows(rows, CLASSES, time_scale=2.0)
    assert [(r.arrival_s, r.klass) for r in requests] == [(0.0, "a"), (5.0, "b")]
    path = tmp_path / "trace.jsonl"
    write_trace_jsonl(requests, path)
    again = requests_from_rows(read_trace_jsonl(path), CLASSES)
    rows_again = [(r.arrival_s, r.klass, r.prompt_tokens, r.output_tokens) for r in again]
    assert rows_again == [(0.0, "a", 5, 2), (5.0, "b", 7, 3)]


def test_replay_rejects_a_row_naming_the_field():
    with pytest.raises(ValueError, match=r"trace row 0: output_tokens must be an integer >= 1, got 0"):
        requests_from_rows([{"arrival_s": 0, "class": "a", "prompt_tokens": 5, "output_tokens": 0}], CLASSES)
    with pytest.raises(ValueError, match=r"trace row 0: class='zzz' is not a scenario class"):
        requests_from_rows([{"arrival_s": 0, "class": "zzz", "prompt_tokens": 5, "output_tokens": 1}], CLASSES)


@pytest.mark.parametrize("dist", [LengthDist("lognormal", mean=200, sigma=0.6), LengthDist("geometric", mean=50),
                                  LengthDist("uniform", low=10, high=30), LengthDist("empirical", values=(4, 8, 12))])
def test_length_distributions_have_their_documented_mean(dist):
    draws = dist.sample(np.random.default_rng(0), 50_000)
    assert draws.min() >= 1 and draws.mean() == pytest.approx(dist.expected(), rel=0.03)


def test_sampled_acceptance_matches_the_profile_expectation():
    profile = AcceptanceProfile((0.8, 0.5))
    rand = random.Random(0).random
    draws = [sample_num_accepted(profile.padded(3), 3, rand) for _ in range(40_000)]
    assert np.mean(draws) == pytest.approx(expected_accepted((0.8, 0.5), 3), rel=0.02)
    assert np.mean(np.array(draws) == 0) == pytest.approx(0.2, abs=0.01)


def test_geometric_profile_expected_tokens_per_step():
    # 1 + a + a^2 + ... + a^k, scaled by the hit rate
    assert AcceptanceProfile.geometric(0.5).expected_tokens_per_step(3) == pytest.approx(1.875)
    assert AcceptanceProfile.geometric(0.5, hit_rate=0.5).expected_tokens_per_step(3) == pytest.approx(1.4375)


def test_rows_from_a_store_replay_through_a_scenario():
    """Telemetry-store rows (dicts) drive a simulation with no file in between."""
    from simulator import scenario_from_dict, simulate
    from simulator.scenario import ReplayWorkload
    from simulator_testkit import scenario_dict

    scenario = scenario_from_dict(scenario_dict(workload__duration_s=50, workload__shifts=[]))
    rows = [{"arrival_s": 10.0 + i, "class": "copy", "prompt_tokens": 20, "output_tokens": 5} for i in range(30)]
    replayed = scenario.with_(workload=ReplayWorkload.from_rows(rows, scenario.classes))
    summary = simulate(replayed).summary
    assert summary["requests"]["completed"] == 30
    assert summary["littles_law"]["lambda_rps"] == pytest.approx(30 / summary["last_finish_s"])
