"""The What-if page: its table is the simulator's own output for the same scenario and seed."""

import json
import math

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import whatif
from dashboard_testkit import APP, query, record_store
from simulator import capacity, simulate
from simulator.entities import Request
from simulator.report import metric_rows
from simulator.scenario import SLO

# small enough to run in a second or two per policy
INPUTS = dict(rate=0.1, duration_s=900.0, shift_at_s=450.0, seed=3, policies=("none", "static:ngram:8"))


def whatif_page(monkeypatch, tmp_path) -> AppTest:
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(tmp_path / "none.sqlite"))  # not needed by this page
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/whatif.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def fill(at: AppTest, **values) -> AppTest:
    at.number_input(key="wi_rate").set_value(values["rate"])
    at.number_input(key="wi_duration").set_value(values["duration_s"])
    at.number_input(key="wi_shift_at").set_value(values["shift_at_s"])
    at.number_input(key="wi_seed").set_value(values["seed"])
    at.multiselect(key="wi_policies").set_value(list(values["policies"]))
    return at


def test_whatif_table_is_the_simulators_output_for_the_same_scenario_and_seed(monkeypatch, tmp_path):
    at = fill(whatif_page(monkeypatch, tmp_path), **INPUTS)
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    table = at.table[0].value.reset_index()
    inputs = whatif.WhatIf(**INPUTS, bin_s=max(60.0, INPUTS["duration_s"] / 24))
    scenario = whatif.build_scenario(inputs)
    assert scenario.seed == INPUTS["seed"] and scenario.workload.rate == INPUTS["rate"]
    for policy in INPUTS["policies"]:
        direct = dict(metric_rows(simulate(scenario, policy).summary))
        assert dict(zip(table["metric"], table[policy])) == direct
    assert [s.value for s in at.subheader] == ["Latency over time (by arrival time)", "SLO attainment over time",
                                               "Summary"]


def test_batching_replicas_show_speculation_by_batch_size_as_the_simulator_counts_it(monkeypatch, tmp_path):
    from simulator.metrics import DraftingByBatch

    base = whatif.SCENARIOS / "smollm2_cpu_batched_shift.yaml"  # a profile timed on batched forwards
    batched = {**INPUTS, "rate": 0.4, "policies": ("none", "adaptive")}  # enough at once to fill batches
    at = whatif_page(monkeypatch, tmp_path)
    at.selectbox(key="wi_base").set_value(base).run()
    at = fill(at, **batched)
    assert at.selectbox(key="wi_mode").value == "batching"  # the base's replicas
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert "Speculation by batch size" in [s.value for s in at.subheader]
    _, runs, _ = at.session_state["wi_runs"]
    shown = whatif.drafting_by_batch(runs)
    scenario = whatif.build_scenario(whatif.WhatIf(base=str(base), **batched, mode="batching",
                                                   bin_s=max(60.0, batched["duration_s"] / 24)))
    for policy in batched["policies"]:
        hook = DraftingByBatch()
        simulate(scenario, policy, extra_hooks=[hook])
        mine = shown[shown["policy"] == policy]
        assert dict(zip(mine["batch"], mine["steps"])) == {int(n): t for n, (_, t) in hook.by_batch().items()}
        assert list(mine["share"]) == [d / t for d, t in hook.by_batch().values()]
    assert shown["batch"].max() > 1  # batches formed
    assert (shown.loc[shown["policy"] == "none", "share"] == 0).all()  # plain decoding drafts nothing


def test_batching_on_a_profile_timed_one_sequence_at_a_time_is_one_clear_error(monkeypatch, tmp_path):
    at = fill(whatif_page(monkeypatch, tmp_path), **INPUTS)  # the default base: batch-1 samples only
    at.selectbox(key="wi_mode").set_value("batching")
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = at.error
    assert error.value.startswith("Cannot simulate the scenario: replicas.mode=batching (max_batch=8): the profile "
                                  "times forwards of one sequence only") and "--batch-sizes" in error.value
    # and serial replicas on a batching base: its batch settings dropped, not refused
    base = whatif.SCENARIOS / "smollm2_cpu_batched_shift.yaml"
    scenario = whatif.build_scenario(whatif.WhatIf(base=str(base), **INPUTS, mode="serial", bin_s=60.0))
    assert scenario.replicas.mode == "serial" and scenario.replicas.prefill_chunk is None


def test_a_mix_of_nothing_is_one_clear_error(monkeypatch, tmp_path):
    at = fill(whatif_page(monkeypatch, tmp_path), **INPUTS)
    for name in whatif.class_names(whatif.DEFAULT_BASE):
        at.number_input(key=f"wi_mix_{name}").set_value(0.0)
    at.button[0].click().run()
    (error,) = at.error
    assert error.value.startswith("Cannot build the scenario: workload.mix")
    assert not at.table


def test_too_large_a_run_is_refused_before_it_starts():
    with pytest.raises(ValueError, match="requests per policy"):
        whatif.build_scenario(whatif.WhatIf(rate=50.0, duration_s=86400.0))


def test_latency_over_time_bins_by_arrival_and_counts_unfinished_as_misses():
    def request(i, arrival, first, finish):
        return Request(i, "copy", 10, 11, arrival, first_token_s=first, finish_s=finish)

    requests = [request(0, 1.0, 1.5, 3.0), request(1, 2.0, 2.5, 9.0),  # bin 0: E2E 2 s and 7 s
                request(2, 12.0, 12.5, math.nan)]  # bin 1: never finished
    table = whatif.latency_over_time(requests, "p", 10.0, SLO(e2e_s=5.0))
    rows = {(r.t_s, r.metric): r.value for r in table.itertuples()}
    assert rows[(0.0, "SLO attainment")] == 0.5 and rows[(10.0, "SLO attainment")] == 0.0
    assert rows[(0.0, "E2E p50")] == pytest.approx(4.5)
    assert (10.0, "E2E p50") not in rows  # nothing finished: no latency, not NaN


def test_capacity_curve_is_the_simulators_capacity_search(monkeypatch, tmp_path):
    inputs = {**INPUTS, "policies": ("static:ngram:8",)}
    at = fill(whatif_page(monkeypatch, tmp_path), **inputs)
    at.text_input(key="wi_capacity_rates").set_value("0.4, 0.1")
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    curve = at.dataframe[0].value
    scenario = whatif.build_scenario(whatif.WhatIf(**inputs, bin_s=max(60.0, inputs["duration_s"] / 24)))
    direct = [capacity(scenario, rate=rate, policy="static:ngram:8").replicas for rate in (0.1, 0.4)]
    assert list(curve["rate"]) == [0.1, 0.4]
    assert list(curve["replicas"]) == [d if d is not None else "not met" for d in direct]


def test_an_uploaded_profile_is_the_one_simulated(monkeypatch, tmp_path):
    shipped = json.loads((whatif.SCENARIOS.parent / "profiles" / "smollm2_cpu.json").read_text())
    slower = {**shipped, "verify": [{**row, "seconds": 2 * row["seconds"]} for row in shipped["verify"]]}
    inputs = {**INPUTS, "policies": ("static:ngram:8",)}
    at = fill(whatif_page(monkeypatch, tmp_path), **inputs)
    at.file_uploader(key="wi_profile").set_value(("slower.json", json.dumps(slower).encode(), "application/json"))
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    table = at.table[0].value.reset_index()
    scenario = whatif.build_scenario(whatif.WhatIf(**inputs, bin_s=max(60.0, inputs["duration_s"] / 24), profile=slower))
    assert dict(zip(table["metric"], table["static:ngram:8"])) == dict(metric_rows(simulate(scenario, "static:ngram:8").summary))
    shipped_run = whatif.build_scenario(whatif.WhatIf(**inputs, bin_s=max(60.0, inputs["duration_s"] / 24)))
    assert dict(zip(table["metric"], table["static:ngram:8"])) != dict(metric_rows(simulate(shipped_run, "static:ngram:8").summary))


def test_an_uploaded_file_that_is_not_json_is_one_clear_error(monkeypatch, tmp_path):
    at = fill(whatif_page(monkeypatch, tmp_path), **INPUTS)
    at.file_uploader(key="wi_profile").set_value(("notes.json", b"not json at all", "application/json"))
    at.button[0].click().run()
    (error,) = at.error
    assert error.value.startswith("Cannot build the scenario: profile: notes.json is not a JSON file")
    assert not at.table


def test_replay_my_traffic_simulates_the_requests_the_store_recorded(monkeypatch, tmp_path):
    recorded = record_store(tmp_path)
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(recorded.final))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/whatif.py").run()
    at.radio(key="wi_workload").set_value("replay my traffic").run()
    at.selectbox(key="wi_class_chat").set_value("open")
    at.selectbox(key="wi_class_copy").set_value("copy")
    at.multiselect(key="wi_policies").set_value(["none", "static:ngram:8"])
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    table = at.table[0].value.reset_index()
    stored = query(recorded.final, "SELECT start_time, key, prompt_tokens, new_tokens FROM requests "
                                   "WHERE error IS NULL ORDER BY start_time")
    rows = tuple({"arrival_s": t, "class": {"chat": "open", "copy": "copy"}[key], "prompt_tokens": p, "output_tokens": n}
                 for t, key, p, n in stored)
    span = rows[-1]["arrival_s"] - rows[0]["arrival_s"]
    scenario = whatif.build_scenario(whatif.WhatIf(replay=rows, policies=("none", "static:ngram:8"),
                                                   bin_s=max(1.0, span / 24)))
    assert scenario.workload.rows == rows
    assert table.loc[0, "none"] == f"{len(rows)} / {len(rows)}"  # requests completed / arrived
    for policy in ("none", "static:ngram:8"):
        assert dict(zip(table["metric"], table[policy])) == dict(metric_rows(simulate(scenario, policy).summary))
