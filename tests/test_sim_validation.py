"""The simulator side of the real-engine validation: a recorded trace replayed on a profile, in memory."""

import pytest

from benchmarks.sim_validation import compare, simulate_trace, summarize_real
from simulator import load_profile

PROFILE = "simulator/profiles/example_cpu.json"


def trace(rate_gap: float):
    return [{"arrival_s": i * rate_gap, "class": "copy_heavy" if i % 2 else "open_ended", "prompt_tokens": 80,
             "output_tokens": 64} for i in range(30)]


def test_light_load_latency_is_service_time_and_heavy_load_queues():
    light = simulate_trace(trace(100.0), PROFILE, "static:ngram:4", seed=0)
    heavy = simulate_trace(trace(0.1), PROFILE, "static:ngram:4", seed=0)
    assert light["e2e_s"]["p50"] < 10  # no queue: one request's service time
    assert heavy["e2e_s"]["p95"] > 5 * light["e2e_s"]["p95"]  # arrivals 0.1 s apart pile up
    assert heavy["throughput_tokens_s"] > light["throughput_tokens_s"]


def test_a_loaded_profile_predicts_what_its_file_does():
    assert simulate_trace(trace(2.0), load_profile(PROFILE), "static:ngram:4", 0) == \
        simulate_trace(trace(2.0), PROFILE, "static:ngram:4", 0)


def test_comparison_reports_relative_errors():
    served = [{"e2e_s": e, "ttft_s": 0.1, "finish_s": f, "output_tokens": 64} for e, f in ((1.0, 1.0), (2.0, 3.0), (3.0, 6.0))]
    measured = summarize_real(served)
    assert measured["throughput_rps"] == pytest.approx(0.5)
    rows = {r["metric"]: r for r in compare(measured, {**measured, "throughput_rps": 0.55})}
    assert rows["throughput (req/s)"]["error"] == pytest.approx(0.1)
    assert rows["e2e p50 (s)"]["error"] == 0
