"""A replayed trace sent by a client with a concurrency limit (``workload.concurrency``): a closed
loop, as ``loadgen --max-concurrency`` at rate inf runs, where each request goes once a slot frees
and its latency counts from then."""

import pytest

from simulator import scenario_from_dict, simulate
from simulator_testkit import cpu_like_profile


def _scenario(limit=None, n=6):
    rows = [{"arrival_s": 0.0, "class": "chat", "prompt_tokens": 40, "output_tokens": 20} for _ in range(n)]
    return scenario_from_dict({
        "name": "client", "profile": cpu_like_profile(), "policy": "plain",
        "classes": {"chat": {"prompt_tokens": 40, "output_tokens": 20}},
        "workload": {"replay": rows, **({"concurrency": limit} if limit is not None else {})},
    })


def test_a_client_limit_of_one_sends_each_request_when_the_last_is_done():
    open_loop = simulate(_scenario(), with_timeseries=False).summary
    closed = simulate(_scenario(limit=1), with_timeseries=False).summary
    # all due at 0 on one serial replica: open loop, the sixth waits for five; closed loop, none waits
    assert closed["e2e_s"]["p95"] == pytest.approx(closed["e2e_s"]["p50"], rel=1e-9)
    assert open_loop["e2e_s"]["p95"] > 4 * closed["e2e_s"]["p95"]
    assert closed["ttft_s"]["p95"] < open_loop["ttft_s"]["p95"]


def test_a_client_limit_must_be_a_positive_integer():
    for bad in (0, 1.5, "2"):
        with pytest.raises(ValueError, match="workload.concurrency must be"):
            _scenario(limit=bad)


def test_a_client_limit_runs_until_every_request_is_done():
    raw = {"name": "client", "profile": cpu_like_profile(), "policy": "plain", "drain_s": 5.0,
           "classes": {"chat": {"prompt_tokens": 40, "output_tokens": 20}},
           "workload": {"replay": [{"arrival_s": 0.0, "class": "chat", "prompt_tokens": 40, "output_tokens": 20}],
                        "concurrency": 1}}
    with pytest.raises(ValueError, match="drain_s=5.0: a replay with a client concurrency limit"):
        scenario_from_dict(raw)
