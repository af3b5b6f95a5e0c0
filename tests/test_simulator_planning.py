"""Policies under a traffic shift, capacity search, and sweeps over configurations."""

import json
import sys

import numpy as np
import pytest
import simpy

from simulator import build_simulation, capacity, compare, grid, scenario_from_dict, simulate, sweep
from simulator_testkit import scenario_dict

SHIFT_AT = 300  # scenario_dict: copy-heavy traffic until 300 s, then chat (ngram acceptance ~0.1, hit 0.3)


def _phase_tpot(result, phase: int) -> float:
    return result.phases[phase]["tpot_s"]["p50"]


def test_static_speculation_helps_before_the_shift_and_hurts_after_it():
    plain, ngram = compare(scenario_from_dict(scenario_dict()), ["none", "static:ngram:4"])
    assert [p["start_s"] for p in ngram.phases] == [0.0, SHIFT_AT]
    assert ngram.phases[0]["acceptance"]["tokens_per_step"] > 2.5
    assert ngram.phases[1]["acceptance"]["tokens_per_step"] < 1.3
    assert _phase_tpot(ngram, 0) < 0.7 * _phase_tpot(plain, 0)  # speculation pays on copy-heavy traffic
    assert _phase_tpot(ngram, 1) > 1.1 * _phase_tpot(plain, 1)  # and costs after the collapse


def test_timeseries_shows_acceptance_collapse_at_the_shift():
    result = simulate(scenario_from_dict(scenario_dict()))
    ts = result.timeseries
    before = [a for t, a in zip(ts["t_s"], ts["acceptance_rate"]) if t + 60 <= SHIFT_AT and a is not None]
    after = [a for t, a in zip(ts["t_s"], ts["acceptance_rate"]) if t >= SHIFT_AT + 60 and a is not None]
    assert min(before) > 0.5 and max(after) < 0.2
    assert all(s == 1.0 for s in ts["spec_fraction"] if s is not None)  # a static policy never switches off


def test_adaptive_policy_turns_speculation_off_after_acceptance_collapses():
    plain, adaptive = compare(scenario_from_dict(scenario_dict(workload__duration_s=900)), ["none", "adaptive"])
    ts = adaptive.timeseries
    on_before = [s for t, s in zip(ts["t_s"], ts["spec_fraction"]) if t + 60 <= SHIFT_AT and s is not None]
    on_after = [s for t, s in zip(ts["t_s"], ts["spec_fraction"]) if t >= SHIFT_AT + 120 and s is not None]
    assert np.mean(on_before) > 0.8
    assert np.mean(on_after) < 0.2
    assert _phase_tpot(adaptive, 0) < 0.7 * _phase_tpot(plain, 0)
    assert _phase_tpot(adaptive, 1) < 1.1 * _phase_tpot(plain, 1)  # never much slower than plain


def test_key_scope_gives_each_traffic_key_its_own_policy():
    raw = scenario_dict(policy_scope="key", workload__duration_s=400)
    sim = build_simulation(env := simpy.Environment(), scenario_from_dict(raw))
    env.run()
    assert sorted(sim.replicas[0].policies.by_key) == ["chat", "copy"]


def test_capacity_finds_the_fewest_replicas_meeting_the_slo():
    scenario = scenario_from_dict(scenario_dict(workload__shifts=[], slo={"e2e_s": 5.0, "percentile": 95}))
    result = capacity(scenario, rate=2.0)
    assert result.replicas is not None and result.replicas > 1
    by_count = {row["replicas"]: row["ok"] for row in result.tried}
    assert by_count[result.replicas] is True
    assert by_count[result.replicas - 1] is False
    assert all(ok is False for n, ok in by_count.items() if n < result.replicas)


def test_capacity_reports_none_when_the_limit_is_too_low():
    scenario = scenario_from_dict(scenario_dict(workload__shifts=[], slo={"e2e_s": 5.0}))
    result = capacity(scenario, rate=4.0, max_replicas=2)
    assert result.replicas is None and [r["replicas"] for r in result.tried] == [1, 2]


def test_capacity_needs_an_slo_target():
    with pytest.raises(ValueError, match="slo"):
        capacity(scenario_from_dict(scenario_dict(slo={})))


def test_sweep_in_processes_matches_sweep_in_process():
    scenario = scenario_from_dict(scenario_dict(workload__duration_s=300, workload__shifts=[]))
    configs = grid(policy=["none", "static:ngram:4"], replicas=[1, 2])
    assert len(configs) == 4
    heard = {1: [], 2: []}  # each run as it ends, in whatever order the workers finish them
    local = sweep(scenario, configs, workers=1, on_done=lambda i, r: heard[1].append((i, r.summary["config"])))
    parallel = sweep(scenario, configs, workers=2, on_done=lambda i, r: heard[2].append((i, r.summary["config"])))
    dump = lambda rs: json.dumps([r.summary for r in rs], sort_keys=True)  # noqa: E731
    assert dump(local) == dump(parallel)
    assert [r.summary["config"] for r in parallel] == configs
    assert heard[1] == list(enumerate(configs))
    assert sorted(heard[2]) == list(enumerate(configs))  # each once, named by its index


def test_sweep_rejects_an_unknown_axis_before_running():
    with pytest.raises(ValueError, match="sweep axis 'replica'"):
        grid(replica=[1, 2])


def test_ray_address_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed: its import fails
    scenario = scenario_from_dict(scenario_dict(workload__duration_s=100))
    with pytest.raises(ValueError, match="pip install"):
        sweep(scenario, [{}], ray_address="auto")


def test_sweep_on_a_local_ray_instance_matches_local_processes():
    """Ray tasks on a fresh local instance give the very summaries the local processes give."""
    import ray

    scenario = scenario_from_dict(scenario_dict(workload__duration_s=300, workload__shifts=[]))
    configs = grid(policy=["none", "static:ngram:4"], replicas=[1, 2])
    try:
        on_ray = sweep(scenario, configs, ray_address="local")
    finally:
        ray.shutdown()
    local = sweep(scenario, configs, workers=1)
    dump = lambda rs: json.dumps([r.summary for r in rs], sort_keys=True)  # noqa: E731
    assert dump(on_ray) == dump(local)
    assert [r.summary["config"] for r in on_ray] == configs


def test_capacity_refuses_traffic_that_releases_no_request_instead_of_searching_to_the_limit():
    # 1e-6 req/s for 10 s: no arrival, so no replica count could "meet" or "miss" the SLO
    scenario = scenario_from_dict(scenario_dict(workload__shifts=[], workload__duration_s=10,
                                                workload__arrival={"process": "poisson", "rate": 1e-6}))
    with pytest.raises(ValueError, match=r"capacity: the workload released no request"):
        capacity(scenario)
