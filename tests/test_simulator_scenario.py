"""Scenario files: bad input is rejected with one error naming the field; the CLI reports it."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simulator import load_profile, load_scenario, profile_from_dict, scenario_from_dict, simulate, with_traffic
from simulator.cli import app
from simulator.scenario import ReplayWorkload
from simulator_testkit import DELETE, cpu_like_profile, scenario_dict

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("overrides, message", [
    ({"workload__arrival": {"process": "poisson", "rate": -2}}, r"workload\.arrival\.rate must be > 0, got -2"),
    ({"workload__arrival": {"process": "poisson"}}, r"workload\.arrival\.rate is required"),
    ({"workload__mix": DELETE}, r"workload\.mix is required"),
    ({"workload__duration_s": DELETE}, r"workload\.duration_s is required"),
    ({"profile": DELETE}, r"^profile is required"),
    ({"classes__copy__output_tokens": DELETE}, r"classes\.copy\.output_tokens is required"),
    ({"policy": "magic:7"}, r"policy='magic:7'"),
    ({"policy": "static:int8:4"}, r"policy='static:int8:4'.*int8"),
    ({"workload__mix": {"nope": 1.0}}, r"workload\.mix\.nope is not a class"),
    ({"workload__shifts": [{"at_s": 300, "rate": -1}]}, r"workload\.shifts\[0\]\.rate must be > 0, got -1"),
    ({"workload__shifts": [{"at_s": 300}, {"at_s": 100}]}, r"workload\.shifts\[1\]\.at_s must be after"),
    ({"workload__arrival": {"process": "poison", "rate": 1}}, r"workload\.arrival: process must be one of"),
    ({"workload__arrival": {"process": "gamma", "rate": 1, "cv": -1}}, r"workload\.arrival: cv must be > 0"),
    ({"replicas": {"count": 0}}, r"replicas\.count must be > 0, got 0"),
    ({"replicas": {"mode": "turbo"}}, r"replicas\.mode must be one of serial, batching, got 'turbo'"),
    ({"replicas": {"cuont": 2}}, r"replicas\.cuont is not a known field"),
    ({"slo": {"e2e_s": 0}}, r"slo\.e2e_s must be > 0, got 0"),
    ({"classes__chat__acceptance": {"ngram": {"rate": 1.5}}}, r"classes\.chat\.acceptance\.ngram\.rate must be"),
    ({"classes__chat__prompt_tokens": {"dist": "uniform", "low": 9, "high": 3}}, r"classes\.chat\.prompt_tokens"),
    ({"policy_scope": "global"}, r"policy_scope must be one of replica, key, got 'global'"),
    ({"compare": {"policies": ["none", "bogus"]}}, r"compare\.policies\[1\]='bogus'"),
    ({"colour": "blue"}, r"colour is not a known field"),
    ({"workload": {"replay": [{"arrival_s": 0, "class": "copy", "prompt_tokens": 0, "output_tokens": 5}]}},
     r"workload\.replay: trace row 0: prompt_tokens must be an integer >= 1, got 0"),
    ({"workload": {"replay": [{"arrival_s": 0, "class": "nope", "prompt_tokens": 9, "output_tokens": 5}]}},
     r"workload\.replay: trace row 0: class='nope' is not a scenario class"),
    ({"workload": {"replay": ["not a row"]}}, r"workload\.replay\[0\] must be a mapping"),
])
def test_bad_scenario_is_rejected_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        scenario_from_dict(scenario_dict(**overrides))


def test_bad_profile_sample_is_named_with_its_index():
    raw = scenario_dict()
    raw["profile"]["verify"][2]["seconds"] = -0.1
    with pytest.raises(ValueError, match=r"profile: verify\[2\]\.seconds must be > 0, got -0\.1"):
        scenario_from_dict(raw)


def test_shipped_examples_load(tmp_path):
    scenario = load_scenario(REPO / "simulator/scenarios/example_shift.yaml")
    assert scenario.drafters == ["int8", "ngram"]
    assert len(scenario.compare_policies) >= 2
    for name in ("example_cpu.json", "example_gpu_synthetic.json"):
        assert load_profile(REPO / "simulator/profiles" / name).metadata.get("illustrative") is True


def _write(tmp_path, raw, name="s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw) if name.endswith(".yaml") else json.dumps(raw))
    return path


def test_cli_rejects_a_bad_file_with_exit_code_2_and_the_field(tmp_path):
    path = _write(tmp_path, scenario_dict(workload__arrival={"process": "poisson", "rate": -1}))
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 2
    assert "workload.arrival.rate must be > 0, got -1" in result.output


def test_cli_run_prints_a_table_and_writes_json(tmp_path):
    path = _write(tmp_path, scenario_dict(workload__duration_s=200, workload__shifts=[]), "s.json")
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["run", str(path), "--no-timeseries", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "TPOT p50 / p95 / p99" in result.output
    data = json.loads(out.read_text())
    assert data["policy"] == "static:ngram:4" and data["summary"]["requests"]["completed"] > 0


def test_cli_compare_and_capacity(tmp_path):
    path = _write(tmp_path, scenario_dict(workload__duration_s=400))
    result = CliRunner().invoke(app, ["compare", str(path), "--policy", "none", "--policy", "static:ngram:4"])
    assert result.exit_code == 0, result.output
    assert "static:ngram:4" in result.output and "per phase" in result.output
    # each policy's run as it ends: progress before the table
    assert "compare: 1 of 2 done (none)" in result.output and "compare: 2 of 2 done (static:ngram:4)" in result.output
    result = CliRunner().invoke(app, ["sweep", str(path), "--rate", "0.3", "--rate", "0.6", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "sweep: 1 of 2 done (rate=0.3)" in result.output and "sweep: 2 of 2 done (rate=0.6)" in result.output
    result = CliRunner().invoke(app, ["capacity", str(path), "--rate", "0.5", "--json", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output
    answer = json.loads((tmp_path / "c.json").read_text())["replicas"]
    assert answer >= 1
    said = "1 replica meets" if answer == 1 else f"{answer} replicas meet"
    assert f"capacity: {said} the SLO" in result.output  # each run's verdict as it ends: progress


TRACE = [{"arrival_s": 5.0 + 2 * i, "class": "copy" if i % 2 else "chat", "prompt_tokens": 60, "output_tokens": 30}
         for i in range(10)]


def test_a_trace_and_a_profile_in_memory_feed_the_simulator_without_files():
    raw = scenario_dict(workload={"replay": TRACE, "time_scale": 2.0})
    raw["profile"] = profile_from_dict(cpu_like_profile())  # a Profile object, already loaded
    scenario = scenario_from_dict(raw)
    assert isinstance(scenario.workload, ReplayWorkload) and scenario.workload.duration_s == 9.0  # 18 s at 2x
    result = simulate(scenario, with_timeseries=False)
    assert result.summary["requests"]["completed"] == len(TRACE)


def test_with_traffic_overrides_rate_and_mix_of_a_synthetic_workload_only():
    scenario = scenario_from_dict(scenario_dict())
    changed = with_traffic(scenario, rate=0.5, mix={"chat": 1.0})
    assert (changed.workload.rate, changed.workload.mix) == (0.5, {"chat": 1.0})
    assert with_traffic(scenario) is scenario
    with pytest.raises(ValueError, match="mix.nope is not a class"):
        with_traffic(scenario, mix={"nope": 1.0})
    with pytest.raises(ValueError, match="replayed trace"):
        with_traffic(scenario_from_dict(scenario_dict(workload={"replay": TRACE})), rate=1.0)


def test_a_shipped_scenario_loads_by_name_from_anywhere(tmp_path, monkeypatch):
    from simulator.cli import _SHIPPED
    from simulator.scenario import load_scenario, shipped_scenarios

    monkeypatch.chdir(tmp_path)  # no checkout here: the name resolves to the installed file
    assert "smollm2_cpu_shift" in shipped_scenarios() and _SHIPPED == shipped_scenarios()
    scenario = load_scenario("smollm2_cpu_shift")
    assert scenario.name == "smollm2-cpu-copy-to-open" and scenario.profile.metadata.get("model")
    assert load_scenario("smollm2_cpu_shift.yaml").name == scenario.name
    with pytest.raises(ValueError, match="shipped scenarios, by name: example_shift, smollm2_cpu_batched_shift, smollm2_cpu_code_template, "
                                         "smollm2_cpu_shift"):
        load_scenario("no_such_scenario")


def test_the_code_template_scenario_drafts_from_the_measured_suffix_acceptance():
    # calibrate measured the suffix drafter on the repetitive code workload: its acceptance (with the
    # match kinds the gate prices by) is in the profile, and the simulator drafts with it
    scenario = load_scenario("smollm2_cpu_code_template")
    assert scenario.profile.metadata.get("illustrative") is False
    assert {"ngram", "int8", "suffix"} <= set(scenario.drafters)
    runs = {spec: simulate(with_traffic(scenario, rate=0.02), spec).summary for spec in ("none", "static:suffix:8")}
    assert runs["none"]["acceptance"]["tokens_per_step"] == 1.0
    # tokens per step is acceptance: a suffix profile that accepted nothing would leave it at 1
    assert runs["static:suffix:8"]["acceptance"]["tokens_per_step"] > 2.0
    assert runs["static:suffix:8"]["e2e_s"]["p50"] < runs["none"]["e2e_s"]["p50"]


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("overrides, message", [
    ({"workload__arrival": {"process": "poisson", "rate": NAN}}, r"workload\.arrival\.rate must be a finite number"),
    ({"workload__arrival": {"process": "poisson", "rate": INF}}, r"workload\.arrival\.rate must be a finite number"),
    ({"workload__duration_s": INF}, r"workload\.duration_s must be a finite number, got inf"),
    ({"workload__shifts": [{"at_s": NAN}]}, r"workload\.shifts\[0\]\.at_s must be a finite number"),
    ({"workload__mix": {"copy": INF}}, r"workload\.mix\.copy must be a finite number"),
    ({"workload__arrival": {"process": "gamma", "rate": 1, "cv": NAN}}, r"workload\.arrival: cv must be finite"),
    ({"slo": {"e2e_s": NAN}}, r"slo\.e2e_s must be a finite number"),
    ({"metrics": {"bin_s": INF}}, r"metrics\.bin_s must be a finite number"),
    ({"drain_s": NAN}, r"drain_s must be a finite number"),
    ({"speed": [{"at_s": 0, "factor": NAN}]}, r"speed\[0\]\.factor must be a finite number"),
    ({"prefill_speed": INF}, r"prefill_speed must be a finite number"),
    ({"profile__verify__0__seconds": NAN}, r"profile: verify\[0\]\.seconds must be a finite number"),
    ({"profile__draft__ngram__per_token_s": INF}, r"profile: draft\.ngram\.per_token_s must be a finite number"),
    ({"profile__acceptance": "x"}, r"profile: acceptance must be an object, got 'x'"),
    ({"profile__draft": ["ngram"]}, r"profile: draft must be an object"),
    ({"workload": {"replay": [{"arrival_s": NAN, "class": "copy", "prompt_tokens": 9, "output_tokens": 5}]}},
     r"workload\.replay: trace row 0: arrival_s must be a finite number, got nan"),
    ({"workload": {"replay": []}}, r"workload\.replay has no requests"),
    ({"metrics": {"warmup_s": 600}}, r"metrics\.warmup_s must be below the last arrival .* got 600"),
])
def test_non_finite_empty_or_unmeasurable_input_is_rejected_naming_the_field(overrides, message):
    raw = scenario_dict()
    for dotted, value in overrides.items():  # scenario_dict's paths, with list indices
        node, (*parents, leaf) = raw, dotted.split("__")
        for name in parents:
            node = node[int(name)] if isinstance(node, list) else node[name]
        node[int(leaf) if isinstance(node, list) else leaf] = value
    with pytest.raises(ValueError, match=message):
        scenario_from_dict(raw)


def test_a_scenario_file_without_a_name_is_named_after_its_file(tmp_path):
    raw = scenario_dict()
    del raw["name"]
    assert load_scenario(_write(tmp_path, raw, "night_shift.yaml")).name == "night_shift"


@pytest.mark.parametrize("args, message", [
    (["run", "{dir}"], "scenario file '{dir}' is a folder"),
    (["run", "{scenario}", "--rate", "inf"], "rate must be a finite number > 0, got rate=inf"),
    (["run", "{scenario}", "--json", "{dir}"], "invalid json='{dir}': is a folder"),
    (["capacity", "{scenario}", "--json", "{dir}"], "invalid json='{dir}': is a folder"),
    (["run", "{profile_dir}"], "profile: file '{dir}' is a folder"),
    (["run", "{empty_trace}"], "trace file '{dir}/empty.jsonl' has no requests"),
])
def test_cli_answers_bad_paths_and_numbers_with_one_line_before_running(tmp_path, args, message):
    scenario = _write(tmp_path, scenario_dict(workload__duration_s=100, workload__shifts=[]))
    profile_dir = _write(tmp_path, {**scenario_dict(), "profile": str(tmp_path)}, "p.yaml")
    (tmp_path / "empty.jsonl").write_text("\n")
    empty_trace = _write(tmp_path, {**scenario_dict(), "workload": {"replay": "empty.jsonl"}}, "e.yaml")
    paths = dict(dir=tmp_path, scenario=scenario, profile_dir=profile_dir, empty_trace=empty_trace)
    result = CliRunner().invoke(app, [a.format(**paths) for a in args])
    assert result.exit_code == 2 and not isinstance(result.exception, (OSError, OverflowError)), result.output
    assert message.format(**paths) in " ".join(result.output.split())
    assert "requests completed" not in result.output  # refused before the run, not after it


def test_write_json_leaves_the_previous_file_whole_when_the_write_fails(tmp_path, monkeypatch):
    import os
    import tempfile

    from simulator.report import write_json

    (tmp_path / "out").mkdir(), (tmp_path / "saved").mkdir()
    out = tmp_path / "out" / "out.json"
    out.write_text('{"previous": true}\n')

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "saved"))  # where the results are saved instead
    with pytest.raises(ValueError, match=r"json=.*could not write it \(No space left on device\)"):
        write_json({"new": [1, 2, 3]}, out)
    assert json.loads(out.read_text()) == {"previous": True}
    assert [p.name for p in out.parent.iterdir()] == ["out.json"]  # no temporary file left behind
    [saved] = (tmp_path / "saved").iterdir()  # and the results are not lost
    assert json.loads(saved.read_text()) == {"new": [1, 2, 3]}
