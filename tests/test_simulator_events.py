"""Event order, determinism and queueing laws of the SimPy processes."""

import json

import numpy as np
import pytest
import simpy

from simulator import build_simulation, scenario_from_dict, simulate
from simulator_testkit import EventLog, ExponentialService, FixedCost, scenario_dict


@pytest.fixture
def env():
    return simpy.Environment()


@pytest.fixture
def log():
    return []


def _two_requests(tmp_path, mode: str, **replicas):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"arrival_s": 100.0, "class": "copy", "prompt_tokens": 8, "output_tokens": 3}\n'
                     '{"arrival_s": 100.1, "class": "copy", "prompt_tokens": 8, "output_tokens": 3}\n')
    raw = scenario_dict(workload={"replay": str(trace)}, policy="none",
                        replicas={"count": 1, "mode": mode, "max_batch": 2, **replicas})
    return scenario_from_dict(raw)


def test_serial_replica_serves_fifo_prefill_then_steps(env, log, tmp_path):
    build_simulation(env, _two_requests(tmp_path, "serial"), cost=FixedCost(), extra_hooks=[EventLog(log)])
    env.run()
    assert log == [
        (0.0, "arrive", 0), (0.0, "start", 0), (0.1, "arrive", 1),
        (1.0, "first_token", 0), (1.5, "step", 1), (2.0, "step", 1), (2.0, "finish", 0),
        (2.0, "start", 1), (3.0, "first_token", 1), (3.5, "step", 1), (4.0, "step", 1), (4.0, "finish", 1),
    ]


def test_batching_replica_admits_waiting_request_into_the_running_batch(env, log, tmp_path):
    """Its prompt rides in the running sequence's forward: FixedCost's prefill is all fixed part
    (1 s whatever the tokens), which a prompt riding in a forward does not pay again."""
    build_simulation(env, _two_requests(tmp_path, "batching"), cost=FixedCost(), extra_hooks=[EventLog(log)])
    env.run()
    assert log == [
        (0.0, "arrive", 0), (0.0, "start", 0), (0.1, "arrive", 1),
        (1.0, "first_token", 0), (1.5, "step", 1),  # request 1 waits for the next iteration boundary
        (1.5, "start", 1), (2.0, "step", 1),  # its prompt rides in request 0's forward
        (2.0, "finish", 0), (2.0, "first_token", 1),  # and it joins after that forward
        (2.5, "step", 1), (3.0, "step", 1), (3.0, "finish", 1),
    ]


def test_batching_replica_without_riders_prefills_first_and_stalls_the_batch(env, log, tmp_path):
    build_simulation(env, _two_requests(tmp_path, "batching", prefill_rides=False), cost=FixedCost(),
                     extra_hooks=[EventLog(log)])
    env.run()
    assert log == [
        (0.0, "arrive", 0), (0.0, "start", 0), (0.1, "arrive", 1),
        (1.0, "first_token", 0), (1.5, "step", 1),  # request 1 waits for the next iteration boundary
        (1.5, "start", 1), (2.5, "first_token", 1),  # its prefill stalls request 0's decoding
        (3.0, "step", 2), (3.0, "finish", 0), (3.0, "step", 2),  # one forward serves both
        (3.5, "step", 1), (3.5, "finish", 1),
    ]


def test_same_seed_same_result_and_another_seed_differs():
    scenario = scenario_from_dict(scenario_dict())
    first, again, other = simulate(scenario), simulate(scenario), simulate(scenario, seed=4)
    dump = lambda r: json.dumps([r.summary, r.phases, r.timeseries], sort_keys=True)  # noqa: E731
    assert dump(first) == dump(again)
    assert dump(first) != dump(other)


def test_policies_compared_on_one_seed_see_identical_traffic(env):
    scenario = scenario_from_dict(scenario_dict())
    plain = build_simulation(simpy.Environment(), scenario, policy="none")
    spec = build_simulation(env, scenario, policy="static:ngram:4")
    for sim in (plain, spec):
        sim.env.run()
    fields = lambda table: [table.arrival_s.tolist(), [table.class_names[k] for k in table.klass],  # noqa: E731
                            table.prompt_tokens.tolist(), table.output_tokens.tolist()]
    assert fields(plain.metrics.table()) == fields(spec.metrics.table())


def test_littles_law_holds_against_a_probe_of_the_live_system(env):
    """L measured by sampling the replicas every 0.5 s equals lambda * W from the request records."""
    raw = scenario_dict(workload__arrival={"process": "poisson", "rate": 0.5}, workload__duration_s=2000,
                        workload__shifts=[], replicas={"count": 2}, policy="static:ngram:3")
    sim = build_simulation(env, scenario_from_dict(raw))
    samples = []

    def probe(env):
        while True:
            samples.append(sum(r.outstanding for r in sim.replicas))
            yield env.timeout(0.5)

    env.process(probe(env))
    horizon = 2200.0
    env.run(until=horizon)
    table = sim.metrics.table()
    assert table.done.all()
    lam = len(table) / horizon
    w = np.mean(table.e2e_s)
    assert np.mean(samples) == pytest.approx(lam * w, rel=0.05)
    assert np.mean(samples) > 0.3  # the system was genuinely loaded, not trivially empty


def test_mm1_mean_wait_matches_the_analytic_formula():
    """Exponential service (mean 1 s) at rate 0.5: Wq = rho / (mu - lambda) = 1 s, W = 2 s."""
    raw = scenario_dict(workload__arrival={"process": "poisson", "rate": 0.5}, workload__duration_s=40_000,
                        workload__shifts=[], policy="none",
                        classes__copy__output_tokens=1, classes__chat__output_tokens=1)
    result = simulate(scenario_from_dict(raw), cost=ExponentialService(1.0, seed=11), with_timeseries=False)
    summary = result.summary
    assert summary["requests"]["completed"] > 19_000
    ttft_mean = summary["ttft_s"]["mean"]  # wait + service for one-token outputs
    assert ttft_mean == pytest.approx(2.0, rel=0.08)
    assert summary["queue"]["mean"] == pytest.approx(0.5 * 1.0, rel=0.1)  # Lq = lambda * Wq
