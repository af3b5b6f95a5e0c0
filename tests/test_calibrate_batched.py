"""calibrate --batch-sizes: the batched engine's step timed at several row counts, written so the
simulator's batching replica can price this engine's padded forwards."""

import types

import pytest

from adaptive_spec.calibrate import BATCH_CONTEXT_LENGTHS, BATCH_VERIFY_TOKENS, calibrate
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.prompts import Prompt
from policies.batch_layout import SlotAxis
from simulator.batching import BatchingReplica
from simulator.cost_model import fit_cost_model
from simulator.profile import profile_from_dict
from simulator_testkit import gpu_like_profile
from tiny import loaded, one_thread, tiny_llama

PROMPTS = [Prompt("a", "".join(f"<{i}>" for i in [5, 6, 7, 8] * 6), kind="copy"),
           Prompt("b", "".join(f"<{i}>" for i in range(10, 34)), kind="chat")]


@pytest.fixture(scope="module")
def profile():
    with one_thread():
        decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0, vocab=256)), [NgramDrafter()])
        return calibrate(decoder, PROMPTS, repeats=1, max_new_tokens=8, batch_sizes=[2, 4])


def test_every_row_count_width_context_and_layout_is_timed_and_marked(profile):
    batched = {(v["batch"], v["tokens"], v["context_len"]) for v in profile["verify"] if v["batch"] > 1}
    assert batched == {(b, t, c) for b in (2, 4) for t in BATCH_VERIFY_TOKENS for c in BATCH_CONTEXT_LENGTHS}
    # and packed: one row drafting 8 or 2 beside one-token rows, and half the rows drafting 8
    packed = {(v["batch"], v["tokens"], v["context_len"], v["packed"]) for v in profile["verify"] if v.get("packed")}
    assert packed == {(b, t, c, d) for b in (2, 4) for t, d in ((9, 1), (3, 1), (9, b // 2)) for c in BATCH_CONTEXT_LENGTHS}
    assert all(v["seconds"] > 0 for v in profile["verify"])
    assert profile["metadata"]["batched_forward"] == "padded"
    cost = fit_cost_model(profile_from_dict(profile, "calibrated"))
    assert cost.verify.batch_fitted and cost.padded
    assert cost.verify_s(5, 100, batch=4) > 0  # a batched forward is priced, not refused


def test_a_batch_1_profile_stays_as_it_was():
    with one_thread():
        decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0, vocab=256)), [NgramDrafter()])
        plain = calibrate(decoder, PROMPTS[:1], repeats=1, max_new_tokens=4)
    assert {v["batch"] for v in plain["verify"]} == {1} and "batched_forward" not in plain["metadata"]
    assert not fit_cost_model(profile_from_dict(plain, "calibrated")).padded


@pytest.mark.parametrize("padded", [False, True])
def test_the_batching_replica_prices_unequal_drafts_as_the_engine_runs_them(padded):
    raw = gpu_like_profile()
    if padded:
        raw["metadata"]["batched_forward"] = "padded"
    cost = fit_cost_model(profile_from_dict(raw, "roofline"))
    seen = []
    replica = types.SimpleNamespace(axis=SlotAxis(), cost=types.SimpleNamespace(
        padded=cost.padded, draft_s=lambda *a: 0.0,
        verify_s=lambda tokens, context, batch, scored, contexts, *attention: seen.append((tokens, batch, scored)) or 1.0))
    draft = lambda proposed: (None, types.SimpleNamespace(proposed=proposed))  # noqa: E731
    BatchingReplica.iteration_s(replica, [[None, None, 100]] * 3, [draft(8), draft(0), draft(2)], {})
    BatchingReplica.iteration_s(replica, [[None, None, 100]] * 3, [draft(8), draft(8), draft(8)], {})
    # widths 9, 1 and 3 differ, so the engine packs (each row its own, priced at their mean width);
    # widths 9, 9 and 9 are one form or the other alike (every row 9). A ragged profile: each its own
    if padded:
        assert seen == [(13 / 3, 3, 13), (9, 3, 27)]
    else:
        assert seen == [(9, 3, 13), (9, 3, 27)]


def test_prompt_chunks_riding_in_batched_steps_are_timed_with_and_without_and_price_the_replicas_riders(profile):
    from adaptive_spec.calibrate import RIDE_TOKENS
    from simulator.batching import chunk_prefill_s

    assert {(r["batch"], r["prompt_tokens"]) for r in profile["ride"]} == {(b, n) for b in (2, 4) for n in RIDE_TOKENS}
    assert all(r["seconds"] > 0 and r["alone_s"] > 0 for r in profile["ride"])
    cost = fit_cost_model(profile_from_dict(profile, "calibrated"))
    assert cost.ride is not None and cost.ride[1] >= 0
    assert chunk_prefill_s(cost, 0, 64, rides=True) == cost.ride_s(0, 64)  # the measured price, not the prefill fit's
    assert cost.ride_s(128, 64) >= cost.ride_s(0, 64)  # a later chunk attends over the earlier ones too


def test_without_ride_samples_a_riding_chunk_is_priced_from_the_prefill_fit():
    from simulator.batching import chunk_prefill_s

    cost = fit_cost_model(profile_from_dict(gpu_like_profile(), "profile"))
    assert cost.ride is None and cost.ride_s(0, 64) is None
    assert chunk_prefill_s(cost, 0, 64, rides=True) == cost.prefill_s(64) - cost.prefill_s(0)


def test_a_ride_sample_needs_both_timings_and_a_known_shape():
    for bad, field in (({"prompt_tokens": 16, "batch": 4, "seconds": 0.1}, "alone_s"),
                       ({"prompt_tokens": 0, "batch": 4, "seconds": 0.1, "alone_s": 0.05}, "prompt_tokens"),
                       ({"prompt_tokens": 16, "batch": 4, "seconds": -0.1, "alone_s": 0.05}, "seconds"),
                       ({"prompt_tokens": 16, "batch": 4, "seconds": 0.1, "alone_s": 0.05, "rows": 4}, "rows")):
        with pytest.raises(ValueError, match=f"ride\\[0\\].{field}"):
            profile_from_dict({**gpu_like_profile(), "ride": [bad]}, "p")


def test_a_speed_timeline_scales_a_riding_chunk_as_it_scales_the_decode_forwards(profile):
    from simulator.speed import SpeedTimeline, TimedCost

    cost = fit_cost_model(profile_from_dict(profile, "calibrated"))
    timed = TimedCost(cost, SpeedTimeline([(0.0, 1.5)]), lambda: 1.0, prefill_factor=0.5)
    assert timed.ride_s(0, 64) == pytest.approx(1.5 * cost.ride_s(0, 64))
    bare = TimedCost(fit_cost_model(profile_from_dict(gpu_like_profile(), "p")), SpeedTimeline([]), lambda: 0.0)
    assert bare.ride_s(0, 64) is None  # no ride fit: the replica falls back on the prefill fit


def test_a_slow_spell_of_the_machine_lands_on_interleaved_shapes_at_random(monkeypatch):
    """The machine's speed swings within seconds. Timed back to back, every repeat of a shape shares
    one spell, so a slow spell doubles a whole block of shapes' medians, and a fit over the shapes
    reads that as their cost. Interleaved passes spread it: each shape gets a repeat or two of it,
    and its median stays at its cost."""
    import adaptive_spec.calibrate as calibration

    cost = {key: 0.01 * (1 + key) for key in range(8)}
    clock = {"now": 0.0, "calls": 0}
    monkeypatch.setattr(calibration, "time", types.SimpleNamespace(perf_counter=lambda: clock["now"]))

    def shape(key):
        def run():
            clock["calls"] += 1
            slow = 12 <= clock["calls"] < 25  # a third of the timed calls, in one stretch
            clock["now"] += cost[key] * (2.0 if slow else 1.0)
        return run

    runs = [(key, shape(key)) for key in cost]
    clock["calls"] = len(runs)  # the spell is placed among the timed calls, after the warm-ups
    blocked = {key: calibration._median_time(fn, 5) for key, fn in runs}
    assert max(blocked[key] / cost[key] for key in cost) == pytest.approx(2.0)  # the spell took a block whole
    clock["calls"] = 0
    timed = calibration._interleaved_medians(runs, 5)
    assert clock["calls"] == 8 * 6  # one warm-up and 5 repeats each
    assert timed == pytest.approx(cost)


def test_interleaved_passes_visit_every_shape_once_each_in_a_fresh_order():
    import adaptive_spec.calibrate as calibration

    calls = []
    runs = [(key, lambda key=key: calls.append(key)) for key in "abcdef"]
    calibration._interleaved_medians(runs, 4, seed=1)
    warm, passes = calls[:6], [calls[6 + 6 * i: 12 + 6 * i] for i in range(4)]
    assert warm == list("abcdef") and len(calls) == 30
    assert all(sorted(p) == list("abcdef") for p in passes)
    assert len({tuple(p) for p in passes}) > 1  # not one fixed order: a periodic swing would favour its shapes


def test_every_kind_of_step_is_timed_in_the_same_passes(monkeypatch):
    """A spell that fell on one kind's phase (all the prefills, say) set that kind's level against the
    others; timed in the same passes, no kind has a phase of its own."""
    import adaptive_spec.calibrate as calibration

    calls = []
    real = calibration._interleaved_medians
    monkeypatch.setattr(calibration, "_interleaved_medians", lambda runs, repeats: calls.append(runs) or real(runs, repeats))
    with one_thread():
        decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0, vocab=256)), [NgramDrafter()])
        profile = calibration.calibrate(decoder, PROMPTS[:1], repeats=1, max_new_tokens=4, batch_sizes=[2])
    assert len(calls) == 1
    assert {key[0] for key, _ in calls[0]} == {"prefill", "verify", "batched", "ride"}
    assert len(calls[0]) == len(profile["prefill"]) + len(profile["verify"]) + len(profile["ride"]) + 1  # + the ride's step alone
