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
