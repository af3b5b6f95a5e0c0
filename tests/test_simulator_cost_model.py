"""The cost model's fit, and speculation's gain shrinking at large batch because of it."""

import pytest

from simulator import fit_cost_model, profile_from_dict, scenario_from_dict, simulate
from simulator.cost_model import FittedCostModel, fit_prefill, fit_verify
from simulator.profile import PrefillSample, VerifySample
from simulator_testkit import cpu_like_profile, gpu_like_profile, scenario_dict


def test_fit_recovers_the_roofline_knee_and_slopes():
    fit = fit_verify(profile_from_dict(gpu_like_profile()).verify)
    assert fit.knee == 256
    assert fit.weights["excess_tokens"] == pytest.approx(8e-5, rel=0.01)
    assert fit.weights["batch_tokens"] == pytest.approx(1e-5, rel=0.05)
    assert fit.max_rel_error < 0.01


def test_fit_captures_the_cpu_jump_from_one_to_several_tokens():
    model = fit_cost_model(profile_from_dict(cpu_like_profile()))
    one, five = model.verify_s(1, 256), model.verify_s(5, 256)
    assert one == pytest.approx(0.035 + 2e-6 * 256, rel=0.05)
    assert five / one == pytest.approx(2.0, rel=0.1)


def test_batch_one_widths_the_profile_measured_cost_what_they_measured():
    """A machine whose 2- and 3-token forwards are slow (small matrix-matrix kernels, as on this
    project's CPU): the line through all widths would price them like the 5- and 9-token ones, and
    the plain step below its measurement; the measured widths keep their own costs."""
    slow = {1: 0.057, 2: 0.091, 3: 0.115, 5: 0.076, 9: 0.087, 17: 0.098}
    per_context = {1: 1e-5, 2: 2e-5, 3: 2e-5, 5: 4e-5, 9: 6e-5, 17: 8e-5}  # wider forwards read the cache more
    samples = [VerifySample(t, c, s + per_context[t] * c) for t, s in slow.items() for c in (64, 512)]
    model = fit_cost_model(profile_from_dict({**cpu_like_profile(), "verify": [vars(x) for x in samples]}))
    for t, s in slow.items():
        for c in (64, 300, 512):
            assert model.verify_s(t, c) == pytest.approx(s + per_context[t] * c, rel=1e-9), (t, c)
    # between measured widths: linear; beyond the widest: the fitted line's slope, from the last measurement
    assert model.verify_s(4, 64) == pytest.approx((model.verify_s(3, 64) + model.verify_s(5, 64)) / 2, rel=1e-9)
    line = FittedCostModel(model.verify, model.prefill)  # the fit alone, no measured widths
    assert model.verify_s(20, 64) - model.verify_s(17, 64) == pytest.approx(
        line.verify_s(20, 64) - line.verify_s(17, 64), abs=1e-12)


def test_prefill_fit_is_linear_and_nonnegative():
    samples = [PrefillSample(n, 0.01 + 0.002 * n) for n in (16, 64, 256, 1024)]
    intercept, per_token, per_token_sq = fit_prefill(samples)
    assert per_token == pytest.approx(0.002, rel=0.01)
    assert intercept >= 0 and per_token_sq >= 0


def test_costs_never_fall_with_more_work():
    samples = [VerifySample(t, 100, 0.05 - 0.001 * t) for t in (1, 2, 4, 8)]  # noisy data trending down
    fit = fit_verify(samples)
    assert all(w >= 0 for w in fit.weights.values())


def test_batch_one_profile_refuses_to_extrapolate_to_batches():
    model = fit_cost_model(profile_from_dict(cpu_like_profile()))
    with pytest.raises(ValueError, match="batch=8.*batch > 1"):
        model.verify_s(5, 256, batch=8)


def test_speculation_gain_per_forward_shrinks_with_batch_under_the_fitted_model():
    model = fit_cost_model(profile_from_dict(gpu_like_profile()))
    tokens_per_step = 1 + 0.9 + 0.9 * 0.85 + 0.9 * 0.85 * 0.8 + 0.9 * 0.85 * 0.8 * 0.75  # copy class, k = 4
    gains = [tokens_per_step * model.verify_s(1, 512, b) / model.verify_s(5, 512, b) for b in (1, 16, 64, 256)]
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > 3.0 and gains[-1] < 1.0


def _throughput(policy: str, max_batch: int) -> float:
    raw = scenario_dict(profile=gpu_like_profile(), policy=policy,
                        workload={"arrival": {"process": "poisson", "rate": 1000.0}, "mix": {"copy": 1.0},
                                  "duration_s": 1.0},
                        classes__copy__output_tokens=64, classes__copy__prompt_tokens=32,
                        replicas={"count": 1, "mode": "batching", "max_batch": max_batch})
    return simulate(scenario_from_dict(raw), with_timeseries=False).summary["throughput_tokens_s"]


def test_simulated_speculation_pays_at_small_batch_and_stops_paying_at_large_batch():
    """~1000 requests queued at once, so every replica runs full batches for the whole run."""
    gain_small = _throughput("static:ngram:4", 4) / _throughput("none", 4)
    gain_large = _throughput("static:ngram:4", 256) / _throughput("none", 256)
    assert gain_small > 2.0
    assert gain_large < 1.0


def test_simulated_controllers_start_from_the_fitted_costs_as_the_engine_starts_them():
    import simpy

    from simulator import build_simulation

    scenario = scenario_from_dict(scenario_dict(policy="adaptive"))
    sim = build_simulation(simpy.Environment(), scenario)
    model = fit_cost_model(scenario.profile)
    policy = sim.replicas[0].policies.get("copy")
    assert policy.steps == 0 and policy._warm_started
    assert policy.costs.plain_s() == pytest.approx(model.verify_s(1, 64))
    verify = policy.costs.verify_s_by_k(4)
    assert verify[4] == pytest.approx(model.verify_s(5, 64))  # a measured length, not the prior line


def _attention_machine(widths, slots, packed):
    """A CPU-like forward: per call, per scored token, the jump to multi-token, per query-key pair."""
    from policies.batch_layout import attention_pairs, scored

    tokens = scored(widths, packed)
    return 0.08 + 1.8e-3 * tokens + 7e-3 * (tokens > len(widths)) + 1.5e-6 * attention_pairs(widths, slots)


def test_packed_and_padded_forwards_are_priced_by_the_attention_each_computes():
    """Calibrate's padded and packed samples at 64-512 slots teach the fit what a forward's attention
    costs beside its tokens; it then prices forwards at slots it never saw, in the form the engine
    takes for them (policies.batch_layout): a packed forward's tokens are its rows' own, its
    attention the padded grid's."""
    from policies.batch_layout import packs
    from simulator.cost_model import forward_verify_s

    samples = [{"tokens": t, "context_len": c, "seconds": _attention_machine([t], c, False)}
               for t in (1, 2, 3, 5, 9) for c in (64, 256, 512)]
    for batch in (2, 4, 8):
        for context in (64, 256, 512):
            for tokens in (1, 2, 3, 5, 9):
                samples.append({"tokens": tokens, "context_len": context, "batch": batch,
                                "seconds": _attention_machine([tokens] * batch, context, False)})
            for tokens, drafting in ((9, 1), (3, 1), (9, batch // 2)):
                if 0 < drafting < batch:
                    widths = [tokens] * drafting + [1] * (batch - drafting)
                    samples.append({"tokens": tokens, "context_len": context, "batch": batch, "packed": drafting,
                                    "seconds": _attention_machine(widths, context, True)})
    raw = {**cpu_like_profile(), "verify": samples,
           "metadata": {"batched_forward": "padded"}}
    model = fit_cost_model(profile_from_dict(raw))
    assert model.verify.weights["attention_pairs"] > 0
    for widths in ([9, 1, 1, 1, 1, 1, 1, 1], [9, 9, 9, 9, 1, 1, 1, 1], [5, 1], [9, 9, 9, 9, 9, 9, 9, 9]):
        for slots in (100, 700, 1000):
            truth = _attention_machine(widths, slots, packs(widths))
            assert forward_verify_s(model, widths, [slots] * len(widths)) == pytest.approx(truth, rel=0.05), (widths, slots)
    # packed prices below padded for the same unequal rows, at every context: its tokens are fewer
    for slots in (100, 4000):
        widths = [9] + [1] * 7
        assert forward_verify_s(model, widths, [slots] * 8) < model.verify_s(9, slots, 8)


def test_a_packed_sample_must_leave_some_rows_one_token_wide():
    bad = {**cpu_like_profile(), "verify": [{"tokens": 9, "context_len": 64, "batch": 2, "packed": 2, "seconds": 0.1}]}
    with pytest.raises(ValueError, match=r"verify\[0\]\.packed"):
        profile_from_dict(bad)
