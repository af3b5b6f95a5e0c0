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
