"""The batched server under growing concurrency: ``adaptive`` against ``static:ngram:8`` and plain
decoding, measured with ``adaptive-spec loadgen`` at several concurrencies.

One ``adaptive-spec serve --max-batch N`` (policy ``adaptive``, drafter ``ngram``) serves every run;
a config is a per-request ``speculation`` override (``static``: ngram, k = 8, which the batch's
draft cap leaves alone; ``off``: plain), each on a traffic key of its own. Each run sends the same
seeded requests (copy-heavy and open-ended prompts mixed) as fast as ``--max-concurrency`` lets
it; concurrencies run in the order given, configs rotating within each and from round to round
(``--rounds``). Each run starts its controllers fresh (a traffic key of its own), as the simulator's
replay does. Reported per run: output
tokens/s, end-to-end latency p50/p95, and the share of decode steps that verified a draft (from
the responses' own statistics). With ``--profile``, the server's batch cap starts from its costs
(``serve --profile``), as the replica's does, and the simulator's batching replica predicts each
run three ways: as calibrated, at the speed plain probes measured around the run (``*_at_speed``),
and at the speed the run's own batched steps ran window by window (``*_timeline``: the server
records every step in a telemetry store, ``simulator.speed.timeline_from_steps``), with the time
the server spent between those steps (``simulator.speed.batched_overhead``) and the replica's
batch cap starting where the server's was when the run began (``cap_history``: one server serves
every run, and its cap has learned from every forward before).

    python -m benchmarks.serve_batching --concurrency 1,4,8 --requests 16 --rounds 3 \\
        --out benchmarks/results/serve_batching.json --plot benchmarks/results/serve_batching.png

One run of a config is one draw of a machine whose speed swings by a quarter within minutes, so
``adaptive`` is compared with each fixed config round by round (``comparisons``): the ratio of
output tokens/s and of p95 latency in each round, their median, and whether every round agrees.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from adaptive_spec.outputs import check_writable, write_json_atomic
from adaptive_spec.config import PREFILL_CHUNK
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.server.cli import _step_costs, format_plain_slowdown, parse_plain_slowdown
from adaptive_spec.telemetry.store import read_steps
from benchmarks.cap_pace import packed, timed_forwards, unpacked
from benchmarks.serve_shift import (CONFIGS, TRACE_FIELDS, at_speed, free_port, probe, run_timeline, scrape_plain_steps,
                                    start_server)
from benchmarks.rounds import compare_rounds
from benchmarks.sim_validation import simulate_trace
from policies.batch_cap import CUTS, OBJECTIVES, BatchDraftCap
from simulator.cost_model import fit_cost_model, forward_verify_s
from simulator.metrics import DraftingByBatch
from simulator.profile import load_profile
from simulator.speed import batched_overhead, forwards, priced_seconds

ROOT = Path(__file__).resolve().parents[1]
TIMELINE_WINDOW_S = 5.0  # a run lasts tens of seconds; a window still holds tens of forwards


def loadgen(url: str, args: argparse.Namespace, config: str, concurrency: int, out: Path, round_: int = 0) -> dict:
    speculation, _ = CONFIGS[config]
    command = [sys.executable, "-m", "adaptive_spec.cli", "loadgen", "--url", url, "--prompts", str(args.prompts),
               "--rate", str(getattr(args, "rate", None) or "inf"),  # None: as fast as the concurrency allows
               "--max-concurrency", str(concurrency), "--num-requests", str(args.requests),
               "--max-tokens", str(args.max_tokens), "--temperature", "0", "--seed", str(args.seed),
               "--traffic-key", traffic_key(config, concurrency, round_), "--extra-body", json.dumps({"speculation": speculation}),
               "--endpoint", "chat", "--out", str(out), "--quiet",
               *(["--split", args.split] if getattr(args, "split", None) else [])]
    subprocess.run(command, check=True, cwd=ROOT)
    return json.loads(out.read_text())


def traffic_key(config: str, concurrency: int, round_: int) -> str:
    """The traffic key a run's requests are sent under: its controllers' and its forwards' record."""
    return f"serve-batching-{config}-c{concurrency}-r{round_}"


def cap_history(timed: Sequence[dict], run: dict) -> list[list[float]]:
    """What the server's batch cap had learned from when ``run`` began, after its warm start: every
    forward before the run's first (``cap_pace.timed_forwards``' records, in order), as the
    replica's ``replicas.cap_steps``. The run's forwards are its key's last unbroken stretch (one run
    at a time; the warm-up before the first round went out under one run's key). Forwards that
    carried a newcomer's prompt are among them, at what the engine charged their rows, though the
    server's cap skipped them; they are few. Empty where the records hold none of the run's.

    >>> f = lambda key, t: {"key": key, "time": t, "rows": 2, "width": 3.0, "seconds": 0.1, "slots": 50}
    >>> run = {"config": "plain", "concurrency": 4, "round": 0}
    >>> cap_history([f("a", 0.0), f("b", 1.0), f("serve-batching-plain-c4-r0", 2.0)], run)
    [[2, 3.0, 0.1, 50], [2, 3.0, 0.1, 50]]
    >>> len(cap_history([f("serve-batching-plain-c4-r0", 0.0), f("b", 1.0), f("serve-batching-plain-c4-r0", 2.0)], run))
    2
    """
    key = traffic_key(run["config"], run["concurrency"], run["round"])
    starts = [i for i, f in enumerate(timed) if f["key"] == key and (i == 0 or timed[i - 1]["key"] != key)]
    if not starts:
        return []
    first = starts[-1]
    return [[f["rows"], f["width"], f["seconds"], f["slots"]] for f in timed[:first] if f["seconds"] > 0]


def summarize(report: dict, config: str, concurrency: int, round_: int = 0) -> dict:
    s = report["summary"]
    served = [r["server_metrics"] for r in report["requests"] if r["ok"] and r.get("server_metrics")]
    steps = sum(m.get("steps", 0) for m in served)
    drafted = sum(m["speculative_decoding"]["num_spec_steps"] for m in served)
    return {"config": config, "concurrency": concurrency, "round": round_, "requests": s["requests"], "completed": s["completed"],
            "errors": s["errors"], "output_tokens_per_s": s["output_throughput"],
            "e2el_s": {q: s["e2el_ms"][q] / 1e3 for q in ("p50", "p95")},
            "ttft_s": {q: s["ttft_ms"][q] / 1e3 for q in ("p50", "p95")},
            "speculative_step_share": drafted / steps if steps else 0.0, "steps": steps,
            "trace": [{k: r[k] for k in (*TRACE_FIELDS, "sent_s")} for r in report["requests"]]}  # what the simulator replays


def arrivals_seen(run: dict, share: float = 0.25) -> float | None:
    """How many other requests arrived, on average, while the run's slowest ``share`` of requests
    ran. In a closed loop every answer that ends sooner lets the client send the next request
    sooner, and each newcomer's prompt is work every running row waits for: a config that
    speeds up the copying requests makes the ones drafts cannot speed up, the latency tail, wait
    for more. None when no request of the run completed."""
    done = sorted((r for r in run["trace"] if r["ok"]), key=lambda r: -r["e2el_ms"])
    if not done:
        return None
    slowest = done[:max(1, int(len(done) * share))]
    return statistics.mean(sum(1 for other in done if other is not r and r["sent_s"] < other["sent_s"]
                               < r["sent_s"] + r["e2el_ms"] / 1e3) for r in slowest)


def drafting_by_rows(steps: Sequence[dict]) -> dict[str, list[int]]:
    """Per number of rows a forward carried (as text, a JSON key): how many of those rows' steps
    verified a draft, how many there were, and the draft tokens the drafting ones got accepted,
    from the server's step records grouped by forward (``simulator.speed.forwards``). How full the
    batch was, step by step, which the concurrency alone does not say: a run at 8 requests ends
    with the batch draining."""
    counts: dict[int, list[int]] = {}
    for rows in forwards(steps):
        drafted, total, accepted = counts.get(len(rows), [0, 0, 0])
        counts[len(rows)] = [drafted + sum(1 for row in rows if row["proposed"] > 0), total + len(rows),
                             accepted + sum(row["accepted"] for row in rows if row["proposed"] > 0)]
    return {str(n): counts[n] for n in sorted(counts)}


def draft_break_even(cost, rows: int, context: float, k: int = 8) -> float:
    """The tokens beyond its next one that one row's ``k``-token draft must get accepted for a step of
    ``rows`` rows at ``context`` tokens to bring more tokens per second than a plain step of the same
    rows, as ``cost`` prices both (``forward_verify_s``, laid out as the engine lays them): the
    other rows' tokens are the same either way, so the draft pays when
    ``(rows + won) / drafting_s > rows / plain_s``."""
    plain = forward_verify_s(cost, [1] * rows, [context] * rows)
    drafting = forward_verify_s(cost, [k + 1] + [1] * (rows - 1), [context] * rows)
    return rows * (drafting / plain - 1)


def break_even_by_rows(runs: list[dict], profile: str, max_batch: int, k: int = 8) -> dict:
    """``draft_break_even`` at every batch size up to ``max_batch``, at the runs' mean context (each
    completed request's prompt and half its answer, as ``predict`` prices)."""
    done = [r for run in runs for r in run["trace"] if r["ok"]]
    context = sum(r["prompt_tokens"] + r["output_tokens"] / 2 for r in done) / len(done)
    cost = fit_cost_model(load_profile(profile))
    return {"k": k, "context": context,
            "tokens": {str(n): draft_break_even(cost, n, context, k) for n in range(1, max_batch + 1)}}


def predict(run: dict, profile: str, max_batch: int, prefill_chunk: int, max_tokens: int | None = None,
            plain_slowdown: float | None = BatchDraftCap.plain_slowdown, objective: str = BatchDraftCap.objective,
            cap_steps: Sequence[Sequence[float]] = (), cut: str = BatchDraftCap.cut) -> dict:
    """The batching replica's p50/p95 end-to-end latency for the run's completed requests (each
    request's prompt its class, sent in the run's order by a client that keeps at most the run's
    concurrency in flight, as loadgen did: each goes once the simulated server has finished one,
    and its latency counts from there), and its error against the run; where
    the run measured the machine's speed (``plain_step``), also with the profile scaled to it
    (``*_at_speed``: the machine's speed drifts between the calibration and the run); where it
    recorded its speed window by window (``speed_timeline``), also at that speed over time
    (``*_timeline``), prefill there at the plain probes' speed where they ran (the timeline is read
    from batched decode forwards; a prefill is a one-sequence forward, as the probes are), and with
    the time between forwards its steps recorded (``serving_overhead``: ``batched_overhead``) where
    they did, and with the replica's batch cap having learned ``cap_steps`` (``cap_history``: the
    forwards the server's cap had learned from when the run began) after its warm start, as the
    server's had. ``max_tokens``: the budget the requests were sent with (an answer that ends
    sooner leaves the engine drafting past its end); ``plain_slowdown``: the server's bound (None: off);
    ``objective``: its ``--batch-objective``; ``cut``: its ``--batch-cut``."""
    budget = {"max_tokens": max_tokens} if max_tokens else {}
    # loadgen ran at rate inf: every request is due at 0, and goes once the client has a free slot
    sent = sorted((r for r in run["trace"] if r["ok"]), key=lambda r: r["sent_s"])
    rows = [{**r, "class": r["id"], "arrival_s": 0.0, **budget} for r in sent]
    if not rows:
        raise ValueError("no request of the run completed: nothing to replay")
    replica = {"mode": "batching", "max_batch": max_batch, "prefill_chunk": prefill_chunk,
               "plain_slowdown": "off" if plain_slowdown is None else plain_slowdown, "batch_objective": objective,
               "batch_cut": cut}
    profiles, out = {"": profile}, {}
    if run.get("plain_step"):
        context = sum(r["prompt_tokens"] + r["output_tokens"] / 2 for r in rows) / len(rows)
        profiles["_at_speed"], out["speed_factor"] = at_speed(profile, run["plain_step"]["mean_s"], context)
    variants = [(suffix, chosen, None) for suffix, chosen in profiles.items()]
    # the time the server spent between its forwards, as the run's own steps recorded it (a run
    # recorded before it was measured replays without it); the timeline replay also without it,
    # to show what it changes
    overhead = {k: run["serving_overhead"][k] for k in ("step_s", "request_s")} if run.get("serving_overhead") else None
    if run.get("speed_timeline"):
        variants += [("_timeline", profile, run["speed_timeline"], overhead)]
        variants += [("_timeline_without_overhead", profile, run["speed_timeline"], None)] if overhead else []
        # and with the replica's cap started from the profile alone, to show what the server's start changes
        variants += [("_timeline_cold", profile, run["speed_timeline"], overhead, False)] if cap_steps else []
        if cap_steps:
            out["cap_steps_timeline"] = len(cap_steps)
    for suffix, chosen, timeline, *between in variants:
        prefill = out.get("speed_factor") if timeline else None
        # the timeline replays the run as the server ran it: its speed, and its cap's state at the start
        warm = timeline is not None and cap_steps and (len(between) < 2 or between[1])
        settings = {**replica, "cap_steps": [list(s) for s in cap_steps]} if warm else replica
        if prefill is not None:
            out["prefill_speed_timeline"] = prefill
        drafting = DraftingByBatch()
        predicted = simulate_trace(rows, chosen, CONFIGS[run["config"]][1], run["concurrency"], settings,
                                   speed=timeline, concurrency=run["concurrency"], prefill_speed=prefill,
                                   overhead=between[0] if between else None, hooks=[drafting])["e2e_s"]
        out["simulated_drafting" + suffix] = drafting.share()
        if suffix == "_timeline":  # the replay the published comparisons use
            out["simulated_drafting_by_rows" + suffix] = drafting.by_batch()
        out["simulated_e2e_s" + suffix] = predicted
        out["simulator_error" + suffix] = {q: (predicted[q] - run["e2el_s"][q]) / run["e2el_s"][q] for q in ("p50", "p95")}
    return out


def recorded_cut(result: dict) -> str:
    """The ``--batch-cut`` a result's server ran with: one recorded before the flag cut to one length.

    >>> recorded_cut({}), recorded_cut({"batch_cut": "per-row"})
    ('common', 'per-row')
    """
    return result.get("batch_cut", "common")


def server_options(args: argparse.Namespace) -> list[str]:
    """``adaptive-spec serve``'s options for the benchmark's one server."""
    return ["--max-batch", str(args.max_batch), "--prefill-chunk", str(args.prefill_chunk), "--drafters", "ngram",
            "--plain-slowdown", args.plain_slowdown, "--batch-objective", args.batch_objective,
            "--batch-cut", args.batch_cut,
            # the batch's cap starts from the calibrated costs, as the simulator's replica does
            *(["--profile", str(args.profile)] if args.profile is not None else [])]


def serve_runs(args: argparse.Namespace, levels: list[int], configs: list[str], tmp: Path) -> tuple[list[dict], list[dict]]:
    """Every run of the benchmark against one server (steps recorded in ``tmp`` when predicting),
    and every forward the server ran (``cap_pace.timed_forwards``; none when not predicting)."""
    port = free_port()
    store = tmp / "steps.sqlite"  # every decode step: each run's speed window by window
    server = start_server(port, server_options(args), telemetry=f"sqlite:{store}?steps=1" if args.profile else "off")
    cost = fit_cost_model(load_profile(args.profile)) if args.profile is not None else None
    runs, timed = [], []
    try:
        url = f"http://127.0.0.1:{port}"
        # warm-up, unrecorded: the first forwards of each shape pay for kernel selection
        loadgen(url, argparse.Namespace(**{**vars(args), "requests": min(args.requests, args.max_batch)}),
                "static:ngram:8", args.max_batch, tmp / "warm.json")
        for round_, (level_index, concurrency) in itertools.product(range(args.rounds), enumerate(levels)):
            shift = (level_index + round_) % len(configs)
            for config in configs[shift:] + configs[:shift]:
                print(f"round {round_ + 1}/{args.rounds} · concurrency {concurrency} · {config} ...", flush=True)
                speed = probe_speed(url, args.prompts) if args.profile is not None else None
                report = loadgen(url, args, config, concurrency, tmp / "run.json", round_)
                end = time.time()
                runs.append(summarize(report, config, concurrency, round_))
                if cost is not None:
                    runs[-1]["speed_timeline"] = run_timeline(store, report["origin_unix"], cost, end, TIMELINE_WINDOW_S)
                    # read once run_timeline has waited for the store's writer
                    steps = read_steps(store, since=report["origin_unix"], until=end)
                    runs[-1]["drafting_by_rows"] = drafting_by_rows(steps)
                    priced = priced_seconds(steps, cost)
                    if priced > 0:  # the run's output over what its decode forwards cost at the profile's prices
                        runs[-1]["priced_decode_s"] = priced
                        runs[-1]["priced_tokens_per_s"] = sum(r["output_tokens"] for r in runs[-1]["trace"] if r["ok"]) / priced
                    overhead = batched_overhead(steps)
                    if overhead is not None:
                        runs[-1]["serving_overhead"] = overhead
                if speed is not None:  # probes open and close the run: its speed is their mean
                    after = probe_speed(url, args.prompts)
                    if speed[1] + after[1] > 0:
                        runs[-1]["plain_step"] = {"mean_s": (speed[0] + after[0]) / (speed[1] + after[1]),
                                                  "count": speed[1] + after[1]}
        if cost is not None:  # every forward since the server started, warm-up included
            timed = timed_forwards(read_steps(store))
        if args.forwards_out is not None:
            write_json_atomic(args.forwards_out, {
                "source": "serve_batching", "prompts": str(args.prompts), "profile": str(args.profile),
                "plain_slowdown": args.plain_slowdown, **packed(timed)}, "forwards_out", indent=None)
            print(f"wrote {args.forwards_out}")
    finally:
        server.terminate()
        server.wait(timeout=60)
    return runs, timed


def resimulate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--resimulate``: every run of a recorded result predicted again with ``--profile``."""
    if args.profile is None or not args.profile.is_file():
        parser.error(f"profile={str(args.profile)!r}: --resimulate needs an existing profile to predict with")
    if not args.resimulate.is_file():
        parser.error(f"resimulate={str(args.resimulate)!r}: no such file")
    result = json.loads(args.resimulate.read_text(encoding="utf-8"))
    timed = _forwards_of(parser, args.forwards, result) if args.forwards is not None else []
    try:
        # a result recorded before the bound existed ran with none
        runs, settings = result["runs"], (result["max_batch"], result["prefill_chunk"], result["max_tokens"],
                                          result.get("plain_slowdown"), result.get("batch_objective", "goodput"))
        for run in runs:
            for key in [k for k in run if k.startswith(("simulated_e2e_s", "simulator_error", "speed_factor",
                                                        "prediction_error", "simulated_drafting", "cap_steps"))]:
                del run[key]  # the previous predictions: none may outlive this one
            try:  # as in a live run: one the simulator cannot replay keeps its measurements, and says why
                run.update(predict(run, str(args.profile), *settings, cap_history(timed, run), recorded_cut(result)))
            except (ValueError, ZeroDivisionError) as exc:
                run["prediction_error"] = str(exc)
    except (KeyError, TypeError, AttributeError) as exc:
        parser.error(f"resimulate={str(args.resimulate)!r}: not a serve_batching result this can replay ({exc!r})")
    # the timeline replays' caps started from the server's forwards before each run (None: from the profile alone)
    result["cap_history"] = str(args.forwards) if args.forwards is not None else None
    had_streams = result.get("profile_streams")
    result["profile"] = str(args.profile)
    profile = load_profile(args.profile)
    result["profile_streams"] = bool(profile.streams)
    result["profile_created"] = profile.metadata.get("created")  # a profile recalibrated since the runs says so
    result["profile_ride_calibrated"] = profile.metadata.get("ride_calibrated")  # ride samples timed on their own
    # "resimulated": the profile's streams came after the runs; "repredicted": the runs' own profile
    result["repredicted" if had_streams else "resimulated"] = True
    write_json_atomic(args.out, result, "out")
    print(f"wrote {args.out}")


def _forwards_of(parser: argparse.ArgumentParser, path: Path, result: dict) -> list[dict]:
    """``--forwards``: the forwards of the server that ran ``result``'s runs, or one error naming the file."""
    if not path.is_file():
        parser.error(f"forwards={str(path)!r}: no such file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        timed = unpacked(raw)
        runs = [traffic_key(r["config"], r["concurrency"], r["round"]) for r in result["runs"] if r.get("completed")]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        parser.error(f"forwards={str(path)!r}: not a --forwards-out file of a serve_batching result ({exc!r})")
    # traffic keys repeat between benchmarks: the prompts tell their servers apart (a result's profile
    # is whatever predicted it last, so it may differ from the one the server started from)
    if raw.get("prompts") is not None and result.get("prompts") is not None and raw["prompts"] != result["prompts"]:
        parser.error(f"forwards={str(path)!r}: its server ran prompts {raw['prompts']!r}, the result's "
                     f"{result['prompts']!r}: not the forwards of these runs' server")
    missing = [key for key in runs if key not in {f["key"] for f in timed}]
    if missing:
        parser.error(f"forwards={str(path)!r}: holds no forward of {len(missing)} of the runs "
                     f"({missing[0]}, ...): not the forwards of these runs' server")
    return timed


def probe_speed(url: str, prompts: Path) -> tuple[float, float]:
    """Seconds and count of the plain steps of a few plain requests sent one at a time (``probe``):
    the machine's batch-1 speed now, read from the server's /metrics."""
    before = scrape_plain_steps(url)
    probe(url, prompts, "chat")
    after = scrape_plain_steps(url)
    return after[0] - before[0], after[1] - before[1]


def calibrate(args: argparse.Namespace) -> None:
    """``adaptive-spec calibrate --per-prompt --batch-sizes 2,...,max_batch`` on the run's prompts."""
    sizes = ",".join(str(n) for n in (2, 4, 8, 16) if n < args.max_batch) + f",{args.max_batch}"
    print(f"calibrating {args.profile} on {args.prompts} (batch sizes {sizes}) ...", flush=True)
    subprocess.run([sys.executable, "-m", "adaptive_spec.cli", "calibrate", "--prompts", str(args.prompts),
                    "--per-prompt", "--drafters", "ngram", "--batch-sizes", sizes, "--max-new-tokens",
                    str(args.max_tokens), "--out", str(args.profile), *(["--split", args.split] if args.split else [])],
                   check=True, cwd=ROOT)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=Path("benchmarks/shift.jsonl"))
    parser.add_argument("--split", default=None, help="only the prompts of this split (e.g. test, of "
                        "benchmarks/corpus/corpus.jsonl)")
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--prefill-chunk", type=int, default=PREFILL_CHUNK, help="the server's --prefill-chunk")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1, help="every config at every concurrency this many times")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", default="adaptive,static:ngram:8,plain")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None,
                        help="a profile from `calibrate --per-prompt --batch-sizes ...` on --prompts: predict every "
                             "run with the simulator's batching replica")
    parser.add_argument("--calibrate", action="store_true", help="write --profile first (calibrate on --prompts)")
    parser.add_argument("--plain-slowdown", default=format_plain_slowdown(BatchDraftCap.plain_slowdown),
                        help="the server's --plain-slowdown (what others' drafts may cost a request decoding plainly; "
                             "'off': none); the simulator's replica runs the same")
    parser.add_argument("--batch-objective", default=BatchDraftCap.objective, choices=OBJECTIVES,
                        help="the server's --batch-objective (what the batch's drafts maximise); the simulator's "
                             "replica runs the same")
    parser.add_argument("--batch-cut", default=BatchDraftCap.cut, choices=CUTS,
                        help="the server's --batch-cut (the requests' drafts cut row by row, or to one length); the "
                             "simulator's replica runs the same")
    parser.add_argument("--forwards-out", type=Path, default=None,
                        help="with --profile: write every batched forward the server ran, in order (benchmarks/cap_pace.py "
                             "replays them through the batch cap)")
    parser.add_argument("--forwards", type=Path, default=None,
                        help="with --resimulate: the runs' server's forwards (a --forwards-out file), so that each "
                        "timeline replay's batch cap starts where the server's was when the run began")
    parser.add_argument("--resimulate", type=Path, help="only redo the simulator's predictions of this result file "
                        "with --profile (e.g. one with recorded token streams), writing --out")
    args = parser.parse_args(argv)
    if args.resimulate is not None:
        if args.calibrate:
            parser.error("calibrate: --resimulate replays a recorded run; calibrating now would not describe it")
        return resimulate(parser, args)
    if args.forwards is not None:
        parser.error(f"forwards={str(args.forwards)!r}: applies with --resimulate only (a live run reads its own server's)")
    for name in ("max_batch", "prefill_chunk", "requests", "max_tokens", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"{name}={getattr(args, name)}: must be >= 1")
    try:
        levels = [int(c) for c in args.concurrency.split(",") if c]
    except ValueError:
        parser.error(f"concurrency={args.concurrency!r}: must be comma-separated integers")
    if not levels or min(levels) < 1:
        parser.error(f"concurrency={args.concurrency!r}: each must be >= 1")
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"configs={args.configs!r}: unknown {unknown}; known: {', '.join(CONFIGS)}")
    if args.forwards_out is not None and args.profile is None:
        parser.error(f"forwards_out={str(args.forwards_out)!r}: the server records its steps only with --profile")
    for path, name in ((args.out, "out"), (args.plot, "plot"), (args.profile if args.calibrate else None, "profile"),
                       (args.forwards_out, "forwards_out")):
        if path is not None:
            check_writable(path, name)
    if args.profile is not None and args.max_batch < 2:
        parser.error(f"max_batch={args.max_batch}: predictions need batched steps in the profile, so --max-batch >= 2")
    if args.calibrate and args.profile is None:
        parser.error("calibrate: needs --profile, the file to write")
    try:
        slowdown = parse_plain_slowdown(args.plain_slowdown)
    except InvalidParameterError as exc:
        parser.error(str(exc))
    if args.profile is not None and not args.calibrate and not args.profile.exists():
        parser.error(f"profile={str(args.profile)!r}: no such file (--calibrate writes it)")
    if args.profile is not None and not args.calibrate:
        try:  # the server warms its cap from it: refused here, by name, rather than by a server that exits
            _step_costs(args.profile, args.max_batch, "smollm2")
        except InvalidParameterError as exc:
            parser.error(str(exc))
    if args.calibrate:
        calibrate(args)
    with tempfile.TemporaryDirectory() as tmp:
        runs, timed = serve_runs(args, levels, configs, Path(tmp))
    for run in runs:
        if args.profile is not None:
            try:  # a run the simulator cannot replay keeps its measurements, and says why
                run.update(predict(run, str(args.profile), args.max_batch, args.prefill_chunk, args.max_tokens, slowdown,
                                   args.batch_objective, cap_history(timed, run), args.batch_cut))
            except (ValueError, ZeroDivisionError) as exc:
                run["prediction_error"] = str(exc)
        error = run.get("simulator_error_timeline", run.get("simulator_error_at_speed", run.get("simulator_error")))
        print(f"{run['config']:>15} c={run['concurrency']} r={run['round'] + 1}: {run['output_tokens_per_s']:6.1f} tok/s  E2EL p50 "
              f"{run['e2el_s']['p50']:.2f} s p95 {run['e2el_s']['p95']:.2f} s  drafting {run['speculative_step_share']:.0%}"
              f"  completed {run['completed']}/{run['requests']}"
              + (f"  priced {run['priced_tokens_per_s']:.1f} tok/s" if run.get("priced_tokens_per_s") else "")
              + (f"  simulated (timeline, else at speed) p50 {error['p50']:+.1%} p95 {error['p95']:+.1%}" if error else ""))
    comparisons = [c for level in levels for config in configs if config != "adaptive" and "adaptive" in configs
                   for c in [compare_rounds(runs, config, level)] if c is not None]
    for c in comparisons:
        t, p = c["throughput"], c["e2el_p95"]
        q = c.get("priced_throughput")
        print(f"adaptive / {c['config']} c={c['concurrency']}: tok/s x{t['median']:.2f} [{t['low']:.2f}, {t['high']:.2f}] "
              f"{t['verdict']}; p95 x{p['median']:.2f} [{p['low']:.2f}, {p['high']:.2f}] {p['verdict']}"
              + (f"; priced tok/s x{q['median']:.2f} [{q['low']:.2f}, {q['high']:.2f}] {q['verdict']}" if q else ""))
    # what the measured costs say a draft must win, by how full the batch is
    break_even = (break_even_by_rows(runs, str(args.profile), args.max_batch)
                  if args.profile is not None and any(r["completed"] for r in runs) else None)
    write_json_atomic(args.out, {
        "benchmark": "serve_batching", "prompts": str(args.prompts), **({"split": args.split} if args.split else {}),
        "max_batch": args.max_batch,
        "requests": args.requests, "max_tokens": args.max_tokens, "seed": args.seed, "concurrency": levels,
        "configs": configs, "endpoint": "chat", "profile": str(args.profile) if args.profile else None,
        "profile_streams": bool(args.profile and load_profile(args.profile).streams),
        "prefill_chunk": args.prefill_chunk,
        "plain_slowdown": slowdown, "batch_objective": args.batch_objective,
        "batch_cut": args.batch_cut, "cap_warmed": args.profile is not None,
        "cap_history": "the server's own" if args.profile is not None else None,  # cap_history: see resimulate
        "cap_pace_decay": BatchDraftCap.pace_decay,  # the server's batch cap's (a result from before it has none)
        "machine": {"cpus": os.cpu_count(), "torch_threads": "the server's default", "torch": version("torch"),
                    "transformers": version("transformers"), "platform": platform.platform()},
        "rounds": args.rounds, "runs": runs, "comparisons": comparisons,
        **({"draft_break_even": break_even} if break_even else {})}, "out")
    print(f"wrote {args.out}")
    if args.plot is not None:
        plot(runs, configs, levels, args.plot, break_even)
        print(f"wrote {args.plot}")


def plot(runs: list[dict], configs: list[str], levels: list[int], path: Path, break_even: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_rows = any("drafting_by_rows" in r for r in runs)
    fig, axes = plt.subplots(1, 4 if by_rows else 3, figsize=(17 if by_rows else 13, 4))
    speed, p95, share = axes[:3]

    def draw(axis, config: str, value) -> None:  # median over rounds, bars from the lowest to the highest
        values = [[value(r) for r in runs if r["config"] == config and r["concurrency"] == c] for c in levels]
        mid = [statistics.median(v) for v in values]
        spread = [[m - min(v) for m, v in zip(mid, values)], [max(v) - m for m, v in zip(mid, values)]]
        axis.errorbar(levels, mid, yerr=spread, marker="o", capsize=3, label=config)

    for config in configs:
        draw(speed, config, lambda r: r["output_tokens_per_s"])
        draw(p95, config, lambda r: r["e2el_s"]["p95"])
        draw(share, config, lambda r: 100 * r["speculative_step_share"])
    speed.set(xlabel="concurrent requests", ylabel="output tokens/s (all requests)", title="Throughput", xticks=levels)
    p95.set(xlabel="concurrent requests", ylabel="end-to-end latency p95 (s)", title="Latency", xticks=levels)
    share.set(xlabel="concurrent requests", ylabel="decode steps that verified a draft (%)",
              title="Speculation kept", xticks=levels, ylim=(0, 100))
    speed.legend()
    if by_rows:
        _plot_by_rows(axes[3], runs, configs, break_even)
    rounds = len({r.get("round", 0) for r in runs})
    if rounds > 1:
        fig.suptitle(f"median of {rounds} rounds; bars from the lowest round to the highest")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def pooled_by_rows(runs: list[dict], config: str, key: str = "drafting_by_rows") -> dict[int, list]:
    """``drafting_by_rows`` (or ``key``: ``simulated_drafting_by_rows_timeline``, the replays') of
    every run of ``config`` added up, per rows: [drafted, row-steps, accepted draft tokens] (the
    last None where a run did not record it)."""
    pooled: dict[int, list] = {}
    for run in runs:
        if run["config"] == config:
            for n, (drafted, total, *accepted) in run.get(key, {}).items():
                before = pooled.get(int(n), [0, 0, 0])
                won = None if before[2] is None or not accepted else before[2] + accepted[0]
                pooled[int(n)] = [before[0] + drafted, before[1] + total, won]
    return dict(sorted(pooled.items()))


def _plot_by_rows(axis, runs: list[dict], configs: list[str], break_even: dict | None) -> None:
    """Speculation kept by how full the batch was, beside what a draft must win there."""
    for config in configs:
        pooled = pooled_by_rows(runs, config)
        if config != "plain" and pooled:
            axis.plot(list(pooled), [100 * d / t for d, t, _ in pooled.values()], marker="o", label=config)
    axis.set(xlabel="rows in the forward", ylabel="rows' steps that verified a draft (%)",
             title="Speculation by batch occupancy", ylim=(0, 100))
    axis.legend(loc="upper left")
    if break_even:
        tokens = {int(n): v for n, v in break_even["tokens"].items()}
        twin = axis.twinx()
        twin.plot(list(tokens), list(tokens.values()), color="gray", linestyle="--")
        twin.set_ylabel(f"tokens a row's {break_even['k']}-token draft must win (dashed)")
        twin.set_ylim(bottom=0)


if __name__ == "__main__":
    main()
