"""benchmarks/serve_shift.py's own arithmetic: the phase plan, the plain steps' cost read from
/metrics, and the profile scaled to a run's measured speed."""

import pytest

from benchmarks.serve_shift import at_speed, phase_plan, plain_step_totals
from simulator.cost_model import fit_cost_model
from simulator.profile import load_profile

PROFILE = "simulator/profiles/smollm2_cpu.json"
LABELS = 'gen_ai_request_model="smollm2",otel_scope_name="adaptive_spec"'
EXPOSITION = f"""# HELP adaptive_spec_decode_duration_seconds_total Draft + verify seconds of decode steps
# TYPE adaptive_spec_decode_duration_seconds_total counter
adaptive_spec_decode_duration_seconds_total{{adaptive_spec_drafter="none",{LABELS}}} 6.5
adaptive_spec_decode_duration_seconds_total{{adaptive_spec_drafter="ngram",{LABELS}}} 40.0
# HELP adaptive_spec_decode_output_tokens_total Tokens emitted by decode steps
# TYPE adaptive_spec_decode_output_tokens_total counter
adaptive_spec_decode_output_tokens_total{{adaptive_spec_drafter="none",{LABELS}}} 100.0
adaptive_spec_decode_output_tokens_total{{adaptive_spec_drafter="ngram",{LABELS}}} 900.0
"""


def test_plain_steps_are_read_from_the_drafter_none_counters_only():
    assert plain_step_totals(EXPOSITION) == (6.5, 100.0)
    assert plain_step_totals("") == (0.0, 0.0)


def test_a_profile_at_speed_prices_its_plain_step_as_measured_and_every_cost_alike():
    base = load_profile(PROFILE)
    scaled, factor = at_speed(PROFILE, 0.05, 100)
    before, after = fit_cost_model(base), fit_cost_model(scaled)
    assert after.verify_s(1, 100) == pytest.approx(0.05)
    assert factor == pytest.approx(0.05 / before.verify_s(1, 100))
    for tokens, context in ((5, 60), (9, 200)):
        assert after.verify_s(tokens, context) == pytest.approx(factor * before.verify_s(tokens, context))
    assert after.prefill_s(80) == pytest.approx(factor * before.prefill_s(80))
    for drafter in base.draft:
        assert after.draft_s(drafter, 4) == pytest.approx(factor * before.draft_s(drafter, 4))
    assert scaled.acceptance == base.acceptance


def test_phases_take_their_own_lengths_or_the_default():
    assert phase_plan("copy,open", 100) == [("copy", 100.0), ("open", 100.0)]
    assert phase_plan("copy:300,open:150,copy", 60) == [("copy", 300.0), ("open", 150.0), ("copy", 60.0)]
    for bad in ("copy:0", "copy:x", ":10"):
        with pytest.raises(ValueError, match="KIND or KIND:SECONDS"):
            phase_plan(bad, 100)


def test_a_run_slowed_mid_way_is_predicted_at_its_speed_window_by_window():
    from benchmarks.serve_shift import predict

    trace = [{"arrival_s": 20.0 * i, "id": f"p{i}", "class": "open", "prompt_tokens": 60, "output_tokens": 40,
              "ok": True, "status": "ok", "ttft_ms": 200.0, "e2el_ms": 3000.0} for i in range(10)]
    run = {"config": "plain", "round": 0, "trace": trace, "e2el_s": {"p50": 3.0, "p95": 4.0},
           "speed_timeline": [(0.0, 1.0), (100.0, 2.0)]}  # twice as slow from 100 s on
    out = predict(run, PROFILE)
    calibrated, timeline = out["simulated_e2e_s"], out["simulated_e2e_s_timeline"]
    # the five requests after 100 s take twice as long: the p95 doubles, the p50 sits between
    assert timeline["p95"] == pytest.approx(2 * calibrated["p95"], rel=0.05)
    assert calibrated["p50"] < timeline["p50"] <= 2 * calibrated["p50"] * 1.05
    assert out["simulator_error_timeline"]["p95"] == pytest.approx(timeline["p95"] / 4.0 - 1)


def test_a_runs_timeline_is_read_from_the_servers_step_store(tmp_path, monkeypatch):
    import time

    import benchmarks.serve_shift as serve_shift
    from adaptive_spec.telemetry.store import connect, write_batch

    monkeypatch.setattr(serve_shift, "STORE_FLUSH_S", 0.0)
    cost = fit_cost_model(load_profile(PROFILE))
    plain = cost.verify_s(1, 100)
    origin = time.time() - 100
    store = tmp_path / "steps.sqlite"
    conn = connect(store)
    write_batch(conn, [("steps", ("run", i, origin + i, "smollm2", "k", "none", 0, 0, 0, 1, 0.0,
                                  plain * (1.0 if i < 60 else 1.25), 100)) for i in range(90)])
    conn.close()
    points = serve_shift.run_timeline(store, origin, cost)
    assert [t for t, _ in points] == [0.0, 30.0, 60.0]
    assert [f for _, f in points] == pytest.approx([1.0, 1.0, 1.25])


def test_a_prediction_over_several_seeds_is_the_median_of_its_replays():
    import statistics

    from benchmarks.serve_shift import predict

    trace = [{"arrival_s": 4.0 * i, "id": f"p{i}", "class": "copy" if i % 2 else "open", "prompt_tokens": 60,
              "output_tokens": 40, "ok": True, "status": "ok", "ttft_ms": 200.0, "e2el_ms": 3000.0} for i in range(12)]
    run = {"config": "adaptive", "round": 0, "trace": trace, "e2el_s": {"p50": 2.0, "p95": 4.0}}
    one = predict(run, PROFILE)
    assert "simulated_e2e_s_seeds" not in one  # one replay: nothing to spread
    many = predict(run, PROFILE, seeds=5)
    draws = many["simulated_e2e_s_seeds"]
    assert len(draws) == 5 and draws[0] == one["simulated_e2e_s"]  # seed 0 of round 0 is the one replay's
    assert len({d["p50"] for d in draws}) > 1  # acceptance is drawn: the replays differ
    for q in ("p50", "p95"):
        assert many["simulated_e2e_s"][q] == statistics.median(d[q] for d in draws)
        assert many["simulator_error"][q] == pytest.approx(many["simulated_e2e_s"][q] / run["e2el_s"][q] - 1)


def test_the_serving_overhead_is_measured_on_the_probes_alone(tmp_path):
    import time

    from benchmarks.serve_shift import PROBE_KEY, measure_overhead
    from adaptive_spec.telemetry.store import connect, write_batch

    cost = fit_cost_model(load_profile(PROFILE))
    plain, prefill = cost.verify_s(1, 60), cost.prefill_s(40)
    now = time.time()
    rows, probes = [], []
    for i, key in enumerate([PROBE_KEY, "a-run", PROBE_KEY]):
        start = now + 100 * i
        t = start + 0.01 + prefill  # each: 10 ms of setup, 1 ms a step, 30 ms outside the engine
        for _ in range(10):
            t += 0.001 + plain
            rows.append(("steps", ("run", i, t, "smollm2", key, "none", 0, 0, 0, 1, 0.0, plain, 60)))
        slow = 5.0 if key == "a-run" else 0.0  # a request of the run itself, slower: not measured
        rows.append(("requests", ("run", i, "smollm2", key, "off", start, t + slow, 40, 11, 48, 0.0, "length", None,
                                  prefill + slow, t - start - prefill, 0.0, 10, 0, 0, 0, "", "none")))
        if key == PROBE_KEY:
            probes.append((start - 0.015, t + 0.015))
    # a request of another key inside the first probe's window (as if served beside it), done first
    rows.append(("requests", ("run", 99, "smollm2", "a-run", "off", now + 0.001, now + 0.002, 40, 1, 48, 0.0,
                              "length", None, 0.0005, 0.0, 0.0, 0, 0, 0, 0, "", "none")))
    conn = connect(tmp_path / "steps.sqlite")
    write_batch(conn, rows)
    conn.close()
    measured = measure_overhead(tmp_path / "steps.sqlite", probes, cost)
    assert measured["requests"] == 2 and measured["steps"] == 18  # each probe's gaps after its first step
    assert measured["request_s"] == pytest.approx(0.01, abs=1e-6)
    assert measured["step_s"] == pytest.approx(0.001, abs=1e-6)
    assert measured["client_s"] == pytest.approx(0.03, abs=1e-6)


def test_the_measured_overhead_is_priced_along_the_timeline_only():
    from benchmarks.serve_shift import predict

    trace = [{"arrival_s": 20.0 * i, "id": f"p{i}", "class": "open", "prompt_tokens": 60, "output_tokens": 40,
              "ok": True, "status": "ok", "ttft_ms": 200.0, "e2el_ms": 3000.0} for i in range(10)]
    run = {"config": "plain", "round": 0, "trace": trace, "e2el_s": {"p50": 3.0, "p95": 4.0},
           "speed_timeline": [(0.0, 1.0)]}
    bare = predict(run, PROFILE)
    served = predict({**run, "serving_overhead": {"request_s": 0.02, "step_s": 0.001, "client_s": 0.03,
                                                  "requests": 6, "steps": 280}}, PROFILE)
    assert served["simulated_e2e_s"] == bare["simulated_e2e_s"]  # as calibrated: the forwards alone
    for q in ("p50", "p95"):  # no request waits for another: each is later by its own overhead
        assert served["simulated_e2e_s_timeline"][q] == pytest.approx(bare["simulated_e2e_s_timeline"][q] + 0.02 + 39 * 0.001 + 0.03)


def test_a_run_served_before_overheads_were_measured_borrows_the_median_of_those_that_were(tmp_path):
    import json

    from benchmarks.serve_shift import main

    trace = [{"arrival_s": 20.0 * i, "id": f"p{i}", "class": "open", "prompt_tokens": 60, "output_tokens": 40,
              "ok": True, "status": "ok", "ttft_ms": 200.0, "e2el_ms": 3000.0} for i in range(6)]
    old = {"config": "plain", "round": 0, "trace": trace, "e2el_s": {"p50": 3.0, "p95": 4.0},
           "speed_timeline": [(0.0, 1.0)]}
    measured = [{"request_s": r, "step_s": s, "client_s": c, "requests": 6, "steps": 280}
                for r, s, c in [(0.01, 0.001, 0.03), (0.03, 0.002, 0.02), (0.02, 0.004, 0.04)]]
    result = {"max_tokens": 64, "runs": [old, *({**old, "round": 1, "serving_overhead": m} for m in measured)]}
    source = tmp_path / "shift.json"
    source.write_text(json.dumps(result))
    out = tmp_path / "out.json"
    main(["--resimulate", str(source), "--overhead-from", str(source), "--sim-seeds", "1", "--profile", PROFILE,
          "--out", str(out)])
    runs = json.loads(out.read_text())["runs"]
    borrowed = runs[0]["serving_overhead"]
    assert {k: borrowed[k] for k in ("request_s", "step_s", "client_s")} == pytest.approx(
        {"request_s": 0.02, "step_s": 0.002, "client_s": 0.03})  # field by field
    assert "3 measured runs in " in borrowed["from"]
    assert [r["serving_overhead"] for r in runs[1:]] == measured  # a run's own measurement stays
    assert runs[0]["simulated_e2e_s_timeline"]["p50"] > runs[0]["simulated_e2e_s"]["p50"]
    with pytest.raises(SystemExit):
        main(["--overhead-from", str(source), "--out", str(out)])  # nothing to resimulate


def test_borrowing_from_a_file_without_measured_overheads_is_refused_naming_it(tmp_path, capsys):
    import json

    from benchmarks.serve_shift import main

    source = tmp_path / "shift.json"
    source.write_text(json.dumps({"runs": [{"config": "plain"}]}))
    with pytest.raises(SystemExit):
        main(["--resimulate", str(source), "--overhead-from", str(source), "--out", str(tmp_path / "o.json")])
    assert "overhead_from=" in capsys.readouterr().err
