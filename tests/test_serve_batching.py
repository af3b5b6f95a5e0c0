"""benchmarks/serve_batching.py's prediction: each run replayed on the simulator's batching replica,
requests arriving when the client sent them, failed ones left out."""

import pytest

from benchmarks.serve_batching import (draft_break_even, drafting_by_rows, main, pooled_by_rows, predict,
                                       server_options)
from benchmarks.sim_validation import simulate_trace
from simulator.cost_model import forward_verify_s
from simulator_testkit import cpu_like_profile


def _profile(tmp_path):
    import json

    raw = cpu_like_profile()
    # batched samples, as calibrate --batch-sizes writes them: a padded forward of batch x tokens
    raw["verify"] += [{"tokens": t, "context_len": c, "batch": b, "seconds": 0.03 + 0.004 * b * t + 1e-6 * b * c}
                      for b in (2, 4, 8) for t in (1, 3, 5) for c in (64, 512)]
    raw["metadata"]["batched_forward"] = "padded"
    raw["acceptance"] = {"p-copy": raw["acceptance"]["copy"], "p-chat": raw["acceptance"]["chat"]}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(raw))
    return str(path)


def _row(i, prompt, sent, ok=True):
    return {"arrival_s": 0.0, "sent_s": sent, "id": prompt, "class": "copy", "prompt_tokens": 40,
            "output_tokens": 30, "ok": ok, "status": "ok" if ok else "error", "ttft_ms": 100.0, "e2el_ms": 2000.0}


def test_a_run_is_replayed_on_the_batching_replica_from_its_send_times(tmp_path):
    profile = _profile(tmp_path)
    trace = [_row(i, "p-copy" if i % 2 else "p-chat", 0.0) for i in range(4)]
    trace.append(_row(9, "unknown-prompt", 0.0, ok=False))  # a failed request: not replayed (its class is unknown)
    run = {"config": "static:ngram:8", "concurrency": 4, "trace": trace, "e2el_s": {"p50": 2.0, "p95": 3.0}}
    out = predict(run, profile, max_batch=8, prefill_chunk=128)
    predicted = out["simulated_e2e_s"]
    assert out["simulator_error"] == pytest.approx({"p50": predicted["p50"] / 2.0 - 1, "p95": predicted["p95"] / 3.0 - 1})
    rows = [{**r, "class": r["id"]} for r in trace[:4]]
    serial = simulate_trace(rows, profile, "static:ngram:8", 4)["e2e_s"]
    assert predicted["p95"] < serial["p95"]  # the four decode together, not one after another
    # sent one after another (a concurrency-1 client): each waits for none, so the p95 is one request's
    spaced = [_row(i, r["id"], 10.0 * i) for i, r in enumerate(trace[:4])]
    alone = predict({**run, "concurrency": 1, "trace": spaced}, profile, max_batch=8, prefill_chunk=128)
    assert alone["simulated_e2e_s"]["p95"] < predicted["p95"]


def test_a_run_is_also_replayed_at_the_speed_its_batched_steps_ran(tmp_path):
    profile = _profile(tmp_path)
    trace = [_row(i, "p-copy" if i % 2 else "p-chat", 0.0) for i in range(4)]
    run = {"config": "plain", "concurrency": 4, "trace": trace, "e2el_s": {"p50": 2.0, "p95": 3.0},
           "speed_timeline": [(0.0, 2.0)]}  # the machine twice as slow as calibrated all along
    out = predict(run, profile, max_batch=8, prefill_chunk=128)
    calibrated, timeline = out["simulated_e2e_s"], out["simulated_e2e_s_timeline"]
    assert timeline["p50"] == pytest.approx(2 * calibrated["p50"], rel=1e-6)
    assert out["simulator_error_timeline"]["p95"] == pytest.approx(timeline["p95"] / 3.0 - 1)


def test_the_timeline_replay_holds_the_replica_for_the_time_the_runs_steps_spent_between_forwards(tmp_path):
    profile = _profile(tmp_path)
    trace = [_row(i, "p-copy" if i % 2 else "p-chat", 0.0) for i in range(4)]
    run = {"config": "plain", "concurrency": 4, "trace": trace, "e2el_s": {"p50": 2.0, "p95": 3.0},
           "speed_timeline": [(0.0, 1.0)]}
    without = predict(run, profile, max_batch=8, prefill_chunk=128)

    def held(step_s, request_s):  # what the overhead adds to the timeline replay's p50
        out = predict({**run, "serving_overhead": {"step_s": step_s, "request_s": request_s, "gaps": 40, "left": 3}},
                      profile, max_batch=8, prefill_chunk=128)
        assert out["simulated_e2e_s"] == without["simulated_e2e_s"]  # as calibrated: the profile's forwards alone
        # the same replay without it, beside it
        assert out["simulated_e2e_s_timeline_without_overhead"] == without["simulated_e2e_s_timeline"]
        return out["simulated_e2e_s_timeline"]["p50"] - without["simulated_e2e_s_timeline"]["p50"]

    # the four decode together: a step's overhead holds them all once per batched step (about one
    # per token of their 30), and each request's setup holds the replica once before the prefill
    steps = round(held(0.01, 0.0) / 0.01)
    assert held(0.01, 0.0) == pytest.approx(steps * 0.01) and 28 <= steps <= 32
    assert held(0.0, 0.05) == pytest.approx(4 * 0.05)
    assert held(0.01, 0.05) == pytest.approx(held(0.01, 0.0) + 4 * 0.05)
    assert "simulated_e2e_s_timeline_without_overhead" not in without  # nothing recorded: one replay


def test_each_replay_says_how_much_of_it_drafted_as_the_run_counts_its_own(tmp_path):
    profile = _profile(tmp_path)
    trace = [_row(i, "p-copy" if i % 2 else "p-chat", 0.0) for i in range(4)]
    run = {"concurrency": 4, "trace": trace, "e2el_s": {"p50": 2.0, "p95": 3.0}, "speed_timeline": [(0.0, 1.0)]}
    plain = predict({**run, "config": "plain"}, profile, max_batch=8, prefill_chunk=128)
    static = predict({**run, "config": "static:ngram:8"}, profile, max_batch=8, prefill_chunk=128)
    assert plain["simulated_drafting"] == plain["simulated_drafting_timeline"] == 0.0
    # the copying prompts' lookups find drafts on some steps, the others' on fewer: a share, not all or none
    assert 0.0 < static["simulated_drafting_timeline"] < 1.0
    # by sequences in the iteration: the same steps, four requests sent together filling then draining the batch
    by_rows = static["simulated_drafting_by_rows_timeline"]
    drafted, steps = (sum(v[i] for v in by_rows.values()) for i in (0, 1))
    assert drafted / steps == static["simulated_drafting_timeline"] and set(by_rows) <= {"1", "2", "3", "4"}
    assert "4" in by_rows and all(0 <= d <= t for d, t in by_rows.values())
    assert plain["simulated_drafting_by_rows_timeline"] and all(d == 0 for d, _ in plain["simulated_drafting_by_rows_timeline"].values())
    runs = [{**run, "config": "adaptive", "drafting_by_rows": {}, "simulated_drafting_by_rows_timeline": by_rows}] * 2
    assert pooled_by_rows(runs, "adaptive", "simulated_drafting_by_rows_timeline") == {
        int(n): [2 * d, 2 * t, None] for n, (d, t) in by_rows.items()}  # no accepted tokens in a replay


def test_with_plain_probes_the_timeline_replay_prefills_at_their_speed(tmp_path):
    """The timeline is read from batched decode forwards; prefill follows the one-request probes."""
    from benchmarks.serve_shift import at_speed
    from simulator.cost_model import fit_cost_model
    from simulator.profile import load_profile

    profile = _profile(tmp_path)
    trace = [_row(i, "p-copy" if i % 2 else "p-chat", 0.0) for i in range(4)]
    plain_step = 1.5 * fit_cost_model(load_profile(profile)).verify_s(1, 55)  # probes: 1.5x slower than calibrated
    base = {"config": "plain", "concurrency": 4, "trace": trace, "e2el_s": {"p50": 2.0, "p95": 3.0},
            "speed_timeline": [(0.0, 2.0)], "plain_step": {"mean_s": plain_step, "count": 10}}
    out = predict(base, profile, max_batch=8, prefill_chunk=128)
    _, factor = at_speed(profile, plain_step, 55)
    assert out["speed_factor"] == pytest.approx(factor)
    rows = [{**r, "class": r["id"]} for r in trace]
    both = simulate_trace(rows, profile, "none", 4, {"mode": "batching", "max_batch": 8, "prefill_chunk": 128},
                          speed=[(0.0, 2.0)], concurrency=4, prefill_speed=factor)["e2e_s"]
    timeline_only = simulate_trace(rows, profile, "none", 4, {"mode": "batching", "max_batch": 8, "prefill_chunk": 128},
                                   speed=[(0.0, 2.0)], concurrency=4)["e2e_s"]
    assert out["simulated_e2e_s_timeline"] == pytest.approx(both)
    assert both["p95"] < timeline_only["p95"]  # prefill at 1.5x, not the decode forwards' 2x


def test_adaptive_is_compared_round_by_round_with_a_verdict_only_where_every_round_agrees():
    from benchmarks.rounds import agreement, compare_rounds

    def run(config, round_, tok_s, p95):
        return {"config": config, "concurrency": 4, "round": round_, "output_tokens_per_s": tok_s,
                "e2el_s": {"p50": 1.0, "p95": p95}}

    runs = [run("adaptive", 0, 30.0, 4.0), run("plain", 0, 20.0, 5.0), run("adaptive", 1, 33.0, 6.0),
            run("plain", 1, 30.0, 5.0), run("adaptive", 2, 28.0, 4.0)]  # round 3's plain run is missing
    c = compare_rounds(runs, "plain", 4)
    assert c["rounds"] == 2
    assert c["throughput"]["ratios"] == pytest.approx([1.5, 1.1]) and c["throughput"]["verdict"] == "ahead in every round"
    # p95 the other way round: above 1 is adaptive lower
    assert c["e2el_p95"]["ratios"] == pytest.approx([1.25, 5 / 6]) and c["e2el_p95"]["verdict"] == "no consistent difference"
    assert compare_rounds(runs, "plain", 8) is None
    assert agreement([0.9, 0.8]) == "behind in every round" and agreement([1.2]) == "one round: no spread"


def test_where_every_run_was_priced_adaptive_is_also_compared_at_the_profiles_prices():
    from benchmarks.rounds import compare_rounds

    def run(config, round_, tok_s, priced=None):
        return {"config": config, "concurrency": 4, "round": round_, "output_tokens_per_s": tok_s,
                "e2el_s": {"p50": 1.0, "p95": 5.0}, **({"priced_tokens_per_s": priced} if priced else {})}

    # the wall clock says adaptive won round 1 and lost round 2 (the machine's swings); at the profile's
    # prices its forwards cost more per token in both
    runs = [run("adaptive", 0, 33.0, 24.0), run("static:ngram:8", 0, 30.0, 25.0),
            run("adaptive", 1, 27.0, 23.0), run("static:ngram:8", 1, 30.0, 25.5)]
    c = compare_rounds(runs, "static:ngram:8", 4)
    assert c["throughput"]["verdict"] == "no consistent difference"
    assert c["priced_throughput"]["ratios"] == pytest.approx([24 / 25, 23 / 25.5])
    assert c["priced_throughput"]["verdict"] == "behind in every round"
    # one run without its price (a result recorded before runs were priced): no priced comparison at all
    assert "priced_throughput" not in compare_rounds([*runs[:3], run("static:ngram:8", 1, 30.0)], "static:ngram:8", 4)


def test_a_runs_forwards_are_priced_as_the_engine_laid_them_out_whatever_the_machines_speed(tmp_path):
    from simulator.speed import priced_seconds
    from simulator.cost_model import fit_cost_model
    from simulator.profile import load_profile

    cost = fit_cost_model(load_profile(_profile(tmp_path)))

    def step(t, request, proposed, context, verify_s):
        return {"time": t, "request_id": request, "proposed": proposed, "context_len": context, "draft_s": 0.0,
                "verify_s": verify_s}

    # two rows join (one drafts 4), both decode plainly, then the second is alone
    steps = [step(0.0, 1, 4, 101, 0.1), step(0.0, 2, 0, 51, 0.1), step(0.2, 1, 0, 103, 0.08),
             step(0.2, 2, 0, 52, 0.08), step(0.4, 2, 0, 53, 0.05)]
    expected = (forward_verify_s(cost, [5, 1], [101, 51], 100) + forward_verify_s(cost, [1, 1], [103, 52], 105)
                + forward_verify_s(cost, [1], [53], 52))
    assert priced_seconds(steps, cost) == pytest.approx(expected)
    # the draft is priced: the same forwards without it cost less
    assert priced_seconds([{**s, "proposed": 0} for s in steps], cost) < expected
    # the machine ran three times slower: the records' seconds change, the price does not
    assert priced_seconds([{**s, "verify_s": 3 * s["verify_s"]} for s in steps], cost) == pytest.approx(expected)


def test_adaptive_is_compared_with_each_rounds_best_fixed_config_by_throughput():
    from benchmarks.rounds import compare_best_fixed

    def run(config, round_, tok_s, p95):
        return {"config": config, "concurrency": 4, "round": round_, "output_tokens_per_s": tok_s,
                "e2el_s": {"p50": 1.0, "p95": p95}}

    runs = [run("adaptive", 0, 30.0, 5.0), run("plain", 0, 20.0, 4.0), run("static:ngram:8", 0, 25.0, 6.0),
            run("adaptive", 1, 30.0, 5.0), run("plain", 1, 27.0, 4.5), run("static:ngram:8", 1, 24.0, 7.0)]
    c = compare_best_fixed(runs, 4)
    # round 1's best fixed config is static (25 tok/s), round 2's plain (27): each round against its own
    assert c["config"] == "best fixed" and c["rounds"] == 2
    assert c["throughput"]["ratios"] == pytest.approx([30 / 25, 30 / 27])
    assert c["e2el_p95"]["ratios"] == pytest.approx([6 / 5, 4.5 / 5])
    assert compare_best_fixed(runs, 8) is None


def test_the_requests_that_arrived_while_the_slowest_ran_are_counted():
    from benchmarks.serve_batching import arrivals_seen

    def request(sent, e2e_s, ok=True):
        return {"sent_s": sent, "e2el_ms": e2e_s * 1e3, "ok": ok}

    # the slowest quarter of 4 is the first request (0-10 s): three others were sent while it ran
    # (one of them failed: it was still sent, but only completed requests count)
    trace = [request(0.0, 10.0), request(1.0, 2.0), request(3.0, 2.0), request(5.0, 1.0, ok=False), request(12.0, 1.0)]
    assert arrivals_seen({"trace": trace}) == 2
    assert arrivals_seen({"trace": trace}, share=0.5) == pytest.approx((2 + 0) / 2)
    assert arrivals_seen({"trace": [request(0.0, 1.0, ok=False)]}) is None  # nothing completed: nothing to count


def test_resimulate_predicts_a_recorded_result_again_with_another_profile(tmp_path):
    import json


    profile = _profile(tmp_path)
    run = {"config": "static:ngram:8", "concurrency": 2, "round": 0, "e2el_s": {"p50": 2.0, "p95": 3.0},
           "trace": [_row(i, "p-copy" if i % 2 else "p-chat", 0.5 * i) for i in range(6)]}
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps({"max_batch": 4, "prefill_chunk": 256, "max_tokens": 40, "runs": [run]}))
    out = tmp_path / "again.json"
    main(["--resimulate", str(recorded), "--profile", profile, "--out", str(out)])
    again = json.loads(out.read_text())
    assert again["profile"] == profile and again["profile_streams"] is False
    assert again["runs"][0]["simulated_e2e_s"] == predict(run, profile, 4, 256, 40)["simulated_e2e_s"]
    # the run had no streams: they came with this profile ("resimulated"); had it had them, the
    # predictions are only made again ("repredicted")
    assert again.get("resimulated") and "repredicted" not in again
    recorded.write_text(json.dumps({**again, "resimulated": None, "profile_streams": True}))
    main(["--resimulate", str(recorded), "--profile", profile, "--out", str(out)])
    twice = json.loads(out.read_text())
    assert twice.get("repredicted") and not twice.get("resimulated")
    from simulator.profile import load_profile
    assert twice["profile_created"] == load_profile(profile).metadata.get("created")  # when the profile was calibrated
    with pytest.raises(SystemExit):  # a file that is no serve_batching result: one error naming it
        recorded.write_text(json.dumps({"runs": [{}]}))
        main(["--resimulate", str(recorded), "--profile", profile, "--out", str(out)])


@pytest.mark.parametrize("args, message", [
    (["--plain-slowdown", "fast"], "plain_slowdown='fast'"),
    (["--plain-slowdown", "-0.5"], "plain_slowdown='-0.5'"),
])
def test_a_bad_plain_slowdown_is_refused_by_name_before_serving(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "out.json"), *args])
    assert message in capsys.readouterr().err


def test_forwards_out_without_a_profile_is_refused_by_name_before_serving(tmp_path, capsys):
    forwards = tmp_path / "forwards.json"
    with pytest.raises(SystemExit):  # without --profile the server keeps no step records to write
        main(["--out", str(tmp_path / "out.json"), "--forwards-out", str(forwards)])
    assert f"forwards_out={str(forwards)!r}" in capsys.readouterr().err
    assert not forwards.exists()


def test_drafting_is_counted_by_how_many_rows_each_forward_carried():
    # a forward of three rows (two drafted), then one row alone that decoded plainly, then two rows
    def step(t, request, proposed, accepted, verify_s):
        return {"time": t, "request_id": request, "proposed": proposed, "accepted": accepted, "draft_s": 0.0,
                "verify_s": verify_s}

    steps = [step(0.0, 1, 4, 3, 0.1), step(0.0, 2, 0, 0, 0.1), step(0.0, 3, 2, 0, 0.1),
             step(0.2, 1, 0, 0, 0.06), step(0.4, 1, 3, 1, 0.09), step(0.4, 2, 0, 0, 0.09)]
    assert drafting_by_rows(steps) == {"1": [0, 1, 0], "2": [1, 2, 1], "3": [2, 3, 3]}
    runs = [{"config": "adaptive", "drafting_by_rows": {"1": [0, 1, 0], "3": [2, 3, 3]}},
            {"config": "adaptive", "drafting_by_rows": {"3": [1, 3, 2]}},
            {"config": "plain", "drafting_by_rows": {"3": [0, 3, 0]}}]
    assert pooled_by_rows(runs, "adaptive") == {1: [0, 1, 0], 3: [3, 6, 5]}
    # a result recorded before the accepted tokens were: shares only
    assert pooled_by_rows([{"config": "adaptive", "drafting_by_rows": {"3": [1, 3]}}], "adaptive") == {3: [1, 3, None]}


def test_what_a_draft_must_win_follows_the_profile_and_grows_as_the_batch_fills(tmp_path):
    from simulator.cost_model import fit_cost_model
    from simulator.profile import load_profile

    cost = fit_cost_model(load_profile(_profile(tmp_path)))
    tokens = [draft_break_even(cost, rows, 100) for rows in (2, 4, 8)]
    assert 0 < tokens[0] < tokens[1] < tokens[2]
    # by its definition: (rows + won) tokens in the drafting step's seconds, as many a second as a plain step
    plain, drafting = (forward_verify_s(cost, widths, [100] * 4) for widths in ([1] * 4, [9, 1, 1, 1]))
    assert (4 + tokens[1]) / drafting == pytest.approx(4 / plain)


def test_the_server_starts_its_batch_cap_from_the_profile_the_replica_prices_with(tmp_path, capsys):
    import argparse
    import json
    from pathlib import Path

    from adaptive_spec.server.cli import _step_costs

    profile = _profile(tmp_path)
    # a profile the server would refuse (illustrative here) is refused by name before any server starts
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "out.json"), "--profile", profile])
    assert f"profile={profile!r}" in capsys.readouterr().err
    raw = json.loads(Path(profile).read_text())
    raw["metadata"] = {**raw["metadata"], "illustrative": False, "model": "smollm2"}  # as calibrate writes one
    Path(profile).write_text(json.dumps(raw))
    args = argparse.Namespace(max_batch=4, prefill_chunk=256, plain_slowdown="0.05", batch_objective="goodput",
                              batch_cut="common", profile=profile)
    options = server_options(args)
    assert options[options.index("--profile") + 1] == profile
    assert options[options.index("--batch-cut") + 1] == "common"  # the server cuts as the replica does
    assert options[options.index("--max-batch") + 1] == "4"
    # the server takes that profile's batched steps to warm its cap (a profile without them is refused)
    assert any(rows > 1 for rows, *_ in _step_costs(profile, 4, "smollm2"))
    assert "--profile" not in server_options(argparse.Namespace(**{**vars(args), "profile": None}))


def test_the_timeline_replay_starts_the_replicas_cap_where_the_servers_was_when_the_run_began(tmp_path):
    """One server serves every run, and its cap has learned from every forward before a run; the
    replica's starts from the profile. Given the server's forwards (here: wider forwards timed at
    four times what the profile prices them at), the timeline replay's cap learns them first, so it
    drafts less; the replays at the profile's speed stay as they were, and the timeline replay from
    the profile alone is kept beside it."""
    profile = _profile(tmp_path)
    trace = [_row(i, "p-copy", 0.0) for i in range(4)]
    run = {"config": "adaptive", "concurrency": 4, "round": 0, "trace": trace, "e2el_s": {"p50": 2.0, "p95": 3.0},
           "speed_timeline": [(0.0, 1.0)], "serving_overhead": {"step_s": 0.0, "request_s": 0.0}}
    cold = predict(run, profile, max_batch=8, prefill_chunk=128)
    plain, wide = forward_verify_s(_load(profile), [1] * 4, [64] * 4, 64), forward_verify_s(_load(profile), [5] * 4, [64] * 4, 64)
    history = [[4, 1.0, plain, 64], [4, 5.0, 4 * wide, 64]] * 40
    warm = predict(run, profile, max_batch=8, prefill_chunk=128, cap_steps=history)
    assert warm["cap_steps_timeline"] == len(history)
    assert warm["simulated_e2e_s"] == cold["simulated_e2e_s"]  # as calibrated: the profile's cap, as before
    assert warm["simulated_e2e_s_timeline_cold"] == cold["simulated_e2e_s_timeline"]
    assert warm["simulated_drafting_timeline"] < cold["simulated_drafting_timeline"]
    # the replay without the time between forwards starts from the same history (here that time is none)
    assert warm["simulated_e2e_s_timeline_without_overhead"] == warm["simulated_e2e_s_timeline"]
    assert "simulated_e2e_s_timeline_cold" not in cold and "cap_steps_timeline" not in cold  # no history
    # no timeline: nothing replays as the server ran, so nothing says it started from the server's cap
    untimed = predict({**run, "speed_timeline": None}, profile, max_batch=8, prefill_chunk=128, cap_steps=history)
    assert "cap_steps_timeline" not in untimed


def _load(profile):
    from simulator.cost_model import fit_cost_model
    from simulator.profile import load_profile

    return fit_cost_model(load_profile(profile))


def test_resimulate_starts_each_timeline_replays_cap_from_the_servers_forwards_before_the_run(tmp_path, capsys):
    import json

    from benchmarks.cap_pace import packed

    profile = _profile(tmp_path)
    run = {"config": "adaptive", "concurrency": 2, "round": 0, "completed": 4, "e2el_s": {"p50": 2.0, "p95": 3.0},
           "trace": [_row(i, "p-copy", 0.0) for i in range(4)], "speed_timeline": [(0.0, 1.0)]}
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps({"max_batch": 4, "prefill_chunk": 256, "max_tokens": 40, "runs": [run]}))
    forward = {"rows": 2, "width": 3.0, "seconds": 0.05, "slots": 60}
    timed = [{**forward, "key": "warm-up", "time": 0.0}, {**forward, "key": "another run", "time": 1.0},
             {**forward, "key": "unrecorded", "time": 1.5, "seconds": 0.0},  # no time: nothing to learn
             {**forward, "key": "serve-batching-adaptive-c2-r0", "time": 2.0}]
    forwards = tmp_path / "forwards.json"
    forwards.write_text(json.dumps(packed(timed)))
    out = tmp_path / "again.json"
    main(["--resimulate", str(recorded), "--profile", profile, "--forwards", str(forwards), "--out", str(out)])
    again = json.loads(out.read_text())
    assert again["cap_history"] == str(forwards) and again["runs"][0]["cap_steps_timeline"] == 2  # the two before it
    # forwards of another server's runs (other keys, or the same keys on other prompts), or none: one
    # error naming the file, nothing written
    out.unlink()
    for other in (packed([{**t, "key": "other"} for t in timed]), {**packed(timed), "prompts": "other.jsonl"}, None):
        if other is None:
            forwards.unlink()
        else:
            forwards.write_text(json.dumps(other))
            recorded.write_text(json.dumps({**json.loads(recorded.read_text()), "prompts": "shift.jsonl"}))
        with pytest.raises(SystemExit):
            main(["--resimulate", str(recorded), "--profile", profile, "--forwards", str(forwards), "--out", str(out)])
        assert f"forwards={str(forwards)!r}" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit):  # a live run reads its own server's forwards
        main(["--out", str(out), "--forwards", str(forwards)])
    assert "applies with --resimulate only" in capsys.readouterr().err
