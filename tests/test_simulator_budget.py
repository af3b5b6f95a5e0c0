"""Large runs: requests drawn lazily, a row of numbers per request, sized and refused before they start."""

import io
import json

import numpy as np
import pytest
import simpy
from typer.testing import CliRunner

import simulator.arrivals
import simulator.workload
from simulator import build_simulation, scenario_from_dict, simulate
from simulator.arrivals import ArrivalProcess
from simulator.budget import Estimate, TooLarge, check
from simulator.cli import app
from simulator.entities import Request, RequestClass
from simulator.lengths import LengthDist
from simulator.progress import Progress
from simulator.workload import Shift, Workload
from simulator_testkit import FixedCost, scenario_dict

CLASSES = {name: RequestClass(name, LengthDist("fixed", value=10), LengthDist("uniform", low=5, high=9))
           for name in ("a", "b")}
HUGE = dict(workload__arrival={"process": "poisson", "rate": 1e6}, workload__duration_s=1e6, workload__shifts=[])


def test_a_scenario_of_a_trillion_requests_starts_at_once_because_arrivals_are_drawn_lazily():
    sim = build_simulation(simpy.Environment(), scenario_from_dict(scenario_dict(**HUGE)), cost=FixedCost())
    sim.env.run(until=0.002)  # about 2,000 arrivals into a queue; the rest are never drawn
    table = sim.metrics.table()
    assert 1_000 < len(table) < 3_000
    assert np.all(np.diff(table.arrival_s) >= 0) and table.arrival_s[-1] < 0.002


@pytest.mark.parametrize("process", [ArrivalProcess("poisson"), ArrivalProcess("gamma", cv=2.0),
                                     ArrivalProcess("mmpp", mean_dwell_s=(30.0, 10.0)),
                                     ArrivalProcess("diurnal", period_s=500.0)])
def test_a_workload_drawn_in_many_small_blocks_keeps_its_rate_order_ids_and_mix(monkeypatch, process):
    monkeypatch.setattr(simulator.arrivals, "BLOCK", 64)
    monkeypatch.setattr(simulator.workload, "BLOCK", 64)
    workload = Workload(process, rate=10.0, mix={"a": 3.0, "b": 1.0}, duration_s=2000,
                        shifts=(Shift(at_s=1000, rate=20.0),))
    requests = list(workload.stream(CLASSES, np.random.default_rng(5)))
    times = np.array([r.arrival_s for r in requests])
    assert [r.id for r in requests] == list(range(len(requests)))
    assert np.all(np.diff(times) >= 0) and times[-1] < 2000
    before, after = np.sum(times < 1000), np.sum(times >= 1000)
    assert before == pytest.approx(10_000, rel=0.15) and after == pytest.approx(20_000, rel=0.15)
    assert sum(r.klass == "a" for r in requests) / len(requests) == pytest.approx(0.75, abs=0.02)


def test_max_requests_stops_the_stream_without_drawing_the_rest():
    workload = Workload(ArrivalProcess(), rate=1e6, mix={"a": 1.0}, duration_s=1e9, max_requests=5)
    assert [r.id for r in workload.stream(CLASSES, np.random.default_rng(0))] == [0, 1, 2, 3, 4]


def test_metrics_keep_a_row_of_numbers_per_request_not_the_request_objects():
    scenario = scenario_from_dict(scenario_dict())
    sim = build_simulation(simpy.Environment(), scenario)
    sim.env.run()
    table = sim.metrics.table()
    assert len(table) > 50 and bool(table.done.all())
    assert not sim.metrics._open  # every finished Request object has been let go
    assert table.nbytes / len(table) <= 11 * 8  # ten numbers and a class index


def test_on_arrival_sees_every_request_and_progress_prints_a_line(tmp_path):
    seen = []
    result = simulate(scenario_from_dict(scenario_dict()), on_arrival=seen.append)
    assert len(seen) == result.summary["requests"]["arrived"] > 0
    out = io.StringIO()
    progress = Progress(duration_s=100.0, expected_requests=1000, stream=out, interval_s=0.0, delay_s=0.0)
    for i in range(512):
        progress(Request(i, "a", 10, 5, i / 10))
    progress.close()
    assert "simulate: 51% (512 of ~1,000 requests arrived, 51 of 100 simulated s)" in out.getvalue()


def _write(tmp_path, raw):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(raw))
    return path


def test_cli_refuses_a_run_too_large_for_memory_with_the_estimate_and_the_overrides(tmp_path):
    result = CliRunner().invoke(app, ["run", str(_write(tmp_path, scenario_dict(**HUGE)))])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: scenario 'test' would simulate about "
                                                   "1,000,000,000,000 requests")
    assert "of memory available" in lines[0] and "--max-requests N" in lines[0] and "--force" in lines[0]


def test_cli_refuses_a_run_over_the_time_limit_and_max_requests_makes_it_fit(tmp_path, monkeypatch):
    monkeypatch.setattr("simulator.budget.time_pilot", lambda *args, **kwargs: 0.01)  # 10 ms a request
    raw = scenario_dict(workload__arrival={"process": "poisson", "rate": 50.0}, workload__duration_s=600,
                        workload__shifts=[])  # 30,000 requests expected: 300 s at that pace
    path = _write(tmp_path, raw)
    result = CliRunner().invoke(app, ["run", str(path), "--time-limit", "60"])
    assert result.exit_code == 2, result.output
    assert "about 5 min of wall time" in result.output and "time limit of 60 s (--time-limit)" in result.output
    assert "at most about 6,000 requests fit" in result.output
    result = CliRunner().invoke(app, ["run", str(path), "--time-limit", "60", "--max-requests", "40",
                                      "--no-timeseries", "--json", str(tmp_path / "out.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out.json").read_text())["summary"]["requests"]["arrived"] == 40


def test_force_overrides_the_check():
    size = Estimate("s", requests=10**12, memory_bytes=4 * 10**14, available_bytes=8 << 30, seconds_per_request=1.0)
    with pytest.raises(TooLarge, match="more than 80% of the 8.59 GB of memory available"):
        check(size)
    check(size, force=True)

