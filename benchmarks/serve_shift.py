"""The server under a traffic shift: ``adaptive`` against ``static:ngram:8`` and plain decoding at the
same offered load, measured with ``adaptive-spec loadgen``, and the simulator's prediction of each run.

One ``adaptive-spec serve`` (the default ``adaptive`` policy, the device's default drafters) serves
every run; a config is a per-request ``speculation`` override (``static``: ngram, k = 8; ``off``:
plain), each run on a traffic key of its own, so its controller starts fresh, as the simulator's
replay of it does, and no run's steps teach another's. Within a
round every config replays the same seeded arrivals and prompts (copy-heavy, then open-ended, then
copy-heavy again), the order rotating from round to round. Each run's completed requests are then
replayed by the simulator (``benchmarks.sim_validation.simulate_trace``: the calibrated profile,
the same policy) and its p50/p95 end-to-end latency compared with the measured ones; ``--also-rate``
adds ``adaptive`` runs at other offered loads for that comparison.

Two predictions per run: with each request's class its prompt's kind (what a capacity planner
knows of future traffic), and with ``--per-prompt`` also with each request's class its prompt
(loadgen records which prompt each request sent; ``calibrate --per-prompt`` measured every prompt's
acceptance offline). Requests of one kind differ (an open-ended answer that loops drafts like a
copy), so the second says how much of the first's error is the kind's average. ``--calibrate``
measures the profile (``calibrate --per-prompt`` on the same prompts) right before serving, so the
step costs it times are the machine's of the moment.

The machine's speed is not that of any one moment: on a shared machine a plain step's cost moves
within minutes (RESULTS.md shows by how much). So each run also records what the
server's plain steps (no draft verified) cost over the run's window, from ``/metrics`` before and
after (``adaptive_spec_decode_duration`` over ``adaptive_spec_decode_output_tokens`` for drafter
``none``); the window starts and ends with a few plain requests of open prompts (``PROBES``), so a
run that never decodes plainly (a fixed draft length) is measured too. Each prediction is then
made twice: with the profile as calibrated, and with every cost in it scaled by that plain step
over the profile's (``*_at_speed``): one number for the machine's speed, measured on plain steps
only, so acceptance, the controller and queueing remain the simulator's to predict. One number
misses a machine that slows mid-run, so a third prediction (``*_timeline``) follows the speed
window by window: the server records every decode step (telemetry ``steps=1``), and each window's
verifies are compared with what the profile prices the same verifies at
(``simulator.speed.timeline_from_steps``; the scenario's ``speed``). The profile prices forwards
only; a served request also spends time outside them (the engine's setup before the first token,
each step's sampling, controller and streaming, the way between client and engine), so the
timeline prediction adds that too, measured on the run's plain probe requests alone
(``measure_overhead``; the scenario's ``overhead``).

    python -m benchmarks.serve_shift --phases copy:300,open:150,copy:150 --rate 0.15 --also-rate 0.08 \
        --per-prompt --profile simulator/profiles/smollm2_cpu_serve_chat.json --out benchmarks/results/serve_shift.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import httpx

from prometheus_client.parser import text_string_to_metric_families

from adaptive_spec.outputs import output_path, write_json_atomic
from adaptive_spec.telemetry.store import read_requests, read_steps
from benchmarks.sim_validation import simulate_trace
from simulator.cost_model import fit_cost_model
from simulator.profile import load_profile, profile_from_dict
from simulator.scenario import OVERHEAD_FIELDS  # a run's serving_overhead is a scenario's overhead
from simulator.speed import serving_overhead, timeline_from_steps

ROOT = Path(__file__).resolve().parents[1]
SIM_SEEDS = 9  # replays per prediction: on a run of a few dozen requests one replay's p50 moves far from seed to seed
CONFIGS = {"adaptive": ({"mode": "auto"}, "adaptive"),
           "static:ngram:8": ({"mode": "static", "drafter": "ngram", "k": 8}, "static:ngram:8"),
           "plain": ({"mode": "off"}, "plain")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, extra: list[str] | tuple[str, ...] = (), telemetry: str = "off") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "adaptive_spec.cli", "serve", "--port", str(port),
                             "--telemetry", telemetry, "--max-queue", "1000", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        time.sleep(1)
    proc.kill()
    raise RuntimeError("the server did not become ready in 10 minutes")


def loadgen(url: str, args: argparse.Namespace, config: str, rate: float, seed: int, out: Path) -> dict:
    speculation, _ = CONFIGS[config]
    schedule = ",".join(f"{kind}:{seconds:g}" for kind, seconds in phase_plan(args.phases, args.phase_s))
    command = [sys.executable, "-m", "adaptive_spec.cli", "loadgen", "--url", url, "--prompts", str(args.prompts),
               "--rate", str(rate), "--schedule", schedule, "--max-tokens", str(args.max_tokens),
               "--temperature", "0", "--seed", str(seed), "--traffic-key", f"serve-shift-{config}-{rate:g}-{seed}",
               "--extra-body", json.dumps({"speculation": speculation}), "--goodput", *args.goodput.split(),
               "--endpoint", args.endpoint,
               "--out", str(out), "--quiet"]
    subprocess.run(command, check=True, cwd=ROOT)
    return json.loads(out.read_text())


def phase_plan(phases: str, phase_s: float) -> list[tuple[str, float]]:
    """``copy,open`` (each ``phase_s`` long) or ``copy:300,open:150`` (each its own length)."""
    plan = []
    for item in phases.split(","):
        kind, _, seconds = item.partition(":")
        try:
            length = float(seconds) if seconds else phase_s
        except ValueError:
            length = -1.0
        if not kind or not length > 0:
            raise ValueError(f"phases={phases!r}: {item!r} is not KIND or KIND:SECONDS with SECONDS > 0")
        plan.append((kind, length))
    return plan


# plain steps a run's window must hold for its speed to be measured (fewer: no prediction at speed)
MIN_PLAIN_STEPS = 50
TIMELINE_WINDOW_S = 30.0  # long enough for tens of steps, short against a phase
STORE_FLUSH_S = 3.0  # the telemetry writer's batches reach the store within this
PROBES = 3  # plain requests of open prompts before and after each run (not in its figures)
PROBE_TOKENS = 48
PROBE_KEY = "serve-shift-probe"


def probe(url: str, prompts: Path, endpoint: str) -> list[tuple[float, float]]:
    """``PROBES`` plain requests, one at a time, on a traffic key of their own: plain steps for the
    window's speed, whatever the run's config, and the serving overhead (``measure_overhead``).
    Each one's client-side (sent, last chunk) Unix times, streamed over one connection opened
    beforehand, as loadgen sends its requests (a client built per request would time its own
    setup, tens of milliseconds, which loadgen's requests never pay)."""
    rows = [json.loads(line) for line in prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [r["prompt"] for r in rows if r.get("kind") == "open"] or [r["prompt"] for r in rows]
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    sent_answered = []
    with httpx.Client(timeout=300, headers={"X-Traffic-Key": PROBE_KEY}) as client:
        client.get(url + "/health").raise_for_status()  # the connection is open before anything is timed
        for text in texts[:PROBES]:
            body = {"model": "smollm2", "max_tokens": PROBE_TOKENS, "temperature": 0, "stream": True,
                    "speculation": {"mode": "off"}}
            if endpoint == "chat":
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
            sent = time.time()
            with client.stream("POST", url + path, json=body) as response:
                response.raise_for_status()
                for _ in response.iter_lines():
                    pass
            sent_answered.append((sent, time.time()))
    return sent_answered


def plain_step_totals(exposition: str) -> tuple[float, float]:
    """Seconds and count of the server's plain steps so far (drafter ``none``), from ``/metrics``."""
    seconds = tokens = 0.0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.labels.get("adaptive_spec_drafter") != "none" or not sample.name.endswith("_total"):
                continue
            if sample.name.startswith("adaptive_spec_decode_duration"):
                seconds += sample.value
            elif sample.name.startswith("adaptive_spec_decode_output_tokens"):
                tokens += sample.value  # a plain step emits one token
    return seconds, tokens


def scrape_plain_steps(url: str) -> tuple[float, float]:
    return plain_step_totals(httpx.get(f"{url}/metrics", timeout=30).text)


def at_speed(profile: str, plain_step_s: float, context: float) -> tuple[object, float]:
    """The profile with every cost scaled so that its plain step at ``context`` costs ``plain_step_s``,
    and the scale."""
    raw = json.loads(Path(profile).read_text(encoding="utf-8"))
    factor = plain_step_s / fit_cost_model(profile_from_dict(raw, profile)).verify_s(1, round(context))
    scaled = copy.deepcopy(raw)
    for sample in scaled["prefill"] + scaled["verify"] + scaled.get("ride", []):
        sample["seconds"] *= factor
    for cost in scaled["draft"].values():
        for key in ("per_token_s", "per_call_s"):
            cost[key] *= factor
    return profile_from_dict(scaled, f"{profile} at x{factor:.3f}"), factor


TRACE_FIELDS = ("arrival_s", "id", "class", "prompt_tokens", "output_tokens", "ok", "status", "ttft_ms", "e2el_ms")


def predict(run: dict, profile: str, per_prompt: bool = False, seeds: int = 1, max_tokens: int | None = None) -> dict:
    """The simulator's p50/p95 end-to-end latency for the run's completed requests, and its error;
    with ``per_prompt`` also with every request's prompt as its class (``*_per_prompt``); where the
    run measured its plain steps' cost, also with the profile scaled to it (``*_at_speed``); where it
    recorded its speed window by window, also at that speed over time (``*_timeline``), with the
    serving overhead it measured (``serving_overhead``) where it did.

    ``seeds``: the simulator draws acceptance at random, so one replay is one draw of what the
    profile predicts; with several seeds each percentile is the median over the replays (the error is
    that median's), and ``*_seeds`` keeps every replay's percentiles. ``max_tokens``: the budget the
    requests were sent with (an answer that ends sooner leaves the engine drafting past its end)."""
    rows = [{**r, "max_tokens": max_tokens} if max_tokens else r for r in run["trace"] if r["ok"]]
    profiles = {"": profile}
    plain = run.get("plain_steps")
    out = {}
    if plain and plain["count"] >= MIN_PLAIN_STEPS:
        context = sum(r["prompt_tokens"] + r["output_tokens"] / 2 for r in rows) / len(rows)
        profiles["_at_speed"], out["speed_factor"] = at_speed(profile, plain["mean_s"], context)
    timeline = run.get("speed_timeline")
    overhead = {k: run["serving_overhead"][k] for k in OVERHEAD_FIELDS} if run.get("serving_overhead") else None
    for suffix, by_prompt in (("", False), ("_per_prompt", True)):
        if by_prompt and not per_prompt:
            continue
        if by_prompt and any("id" not in r for r in rows):
            raise ValueError("per_prompt: this run's trace does not record each request's prompt id")
        replay = [{**r, "class": r["id"]} for r in rows] if by_prompt else rows
        # as calibrated; at the run's mean speed; at its speed window by window (its step records)
        variants = [(name, chosen, None, None) for name, chosen in profiles.items()]
        variants += [("_timeline", profile, timeline, overhead)] if timeline else []
        for speed, chosen, points, extra in variants:
            # seed = the round for one replay, as every result before seeds were added was simulated
            draws = [simulate_trace(replay, chosen, CONFIGS[run["config"]][1], run["round"] * seeds + i,
                                    speed=points, overhead=extra)["e2e_s"] for i in range(seeds)]
            predicted = {q: float(statistics.median(d[q] for d in draws)) for q in ("p50", "p95")}
            measured = run["e2el_s"]
            out["simulated_e2e_s" + suffix + speed] = predicted
            out["simulator_error" + suffix + speed] = {q: (predicted[q] - measured[q]) / measured[q] for q in ("p50", "p95")}
            if seeds > 1:
                out["simulated_e2e_s" + suffix + speed + "_seeds"] = draws
    return out


def run_timeline(store: Path, origin: float, cost, until: float | None = None,
                 window_s: float = TIMELINE_WINDOW_S) -> list[tuple[float, float]]:
    """The run's speed window by window (``simulator.speed.timeline_from_steps``) from the server's
    step records from ``origin`` (to ``until``), once the telemetry writer has flushed them."""
    time.sleep(STORE_FLUSH_S)
    return timeline_from_steps(read_steps(store, since=origin, until=until), cost, origin, window_s)


def measure_overhead(store: Path, probes: list[tuple[float, float]], cost) -> dict:
    """The server's time outside the forwards (``simulator.speed.serving_overhead``), measured on the
    probe requests (none of the run's own), from the server's records of them and the client's
    timings; read once the telemetry writer has flushed them (``run_timeline`` waits for it)."""
    rows = [r for r in read_requests(store, since=probes[0][0]) if r["key"] == PROBE_KEY]
    matched, client = [], []
    for sent, answered in probes:
        row = next((r for r in rows if sent <= r["start_time"] and r["end_time"] <= answered), None)
        if row is not None:
            matched.append(row)
            client.append(answered - sent)
    if not matched:
        raise RuntimeError(f"no request on traffic key {PROBE_KEY!r} within the probes' times in {store}")
    steps = read_steps(store, since=probes[0][0])
    return serving_overhead(matched, steps, client, cost)


def measured_its_overhead(run: dict) -> bool:
    """Whether the run measured its own serving overhead (not borrowed, not served before it was measured)."""
    return "serving_overhead" in run and "from" not in run["serving_overhead"]


def borrowed_overhead(result: dict, source: str) -> dict:
    """The median of ``result``'s measured serving overheads, field by field, for a run that measured
    none; it records where it came from (``from``)."""
    measured = [r["serving_overhead"] for r in result["runs"] if measured_its_overhead(r)]
    if not measured:
        raise ValueError("no run in it measured its serving overhead")
    return {**{k: float(statistics.median(m[k] for m in measured)) for k in OVERHEAD_FIELDS},
            "from": f"the median of {len(measured)} measured runs in {source}"}


def calibrate(args: argparse.Namespace) -> None:
    """``adaptive-spec calibrate --per-prompt`` on the run's prompts, written to ``--profile``."""
    print(f"calibrating {args.profile} on {args.prompts} ...", flush=True)
    subprocess.run([sys.executable, "-m", "adaptive_spec.cli", "calibrate", "--prompts", str(args.prompts),
                    "--per-prompt", "--max-new-tokens", str(args.max_tokens), "--out", str(args.profile)],
                   check=True, cwd=ROOT)


def summarize(report: dict) -> dict:
    s = report["summary"]
    measured = {"p50": s["e2el_ms"]["p50"] / 1e3, "p95": s["e2el_ms"]["p95"] / 1e3}
    return {
        "requests": s["requests"], "completed": s["completed"], "errors": s["errors"],
        "e2el_s": measured, "ttft_s": {q: s["ttft_ms"][q] / 1e3 for q in ("p50", "p95")},
        "output_throughput": s["output_throughput"],
        "goodput_rps": s["goodput"]["requests_per_s"] if s["goodput"] else None,
        "good_requests": s["goodput"]["good_requests"] if s["goodput"] else None,
        "acceptance_rate": (report.get("speculation_per_request") or {}).get("acceptance_rate"),
        "phases": [{"schedule": p["schedule"], "requests": p["requests"], "e2el_ms": p["e2el_ms"]}
                   for p in report.get("phases") or []],
        "trace": [{k: r[k] for k in TRACE_FIELDS} for r in report["requests"]],  # what the simulator replays
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=ROOT / "benchmarks" / "shift.jsonl")
    parser.add_argument("--phases", default="copy,open,copy",
                        help="the schedule's kinds in order, each KIND (--phase-s long) or KIND:SECONDS")
    parser.add_argument("--phase-s", type=float, default=100.0)
    parser.add_argument("--rate", type=float, default=0.15)
    parser.add_argument("--also-rate", type=float, action="append", default=[], help="adaptive at another load")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--endpoint", choices=["chat", "completions"], default="chat",
                        help="chat: prompts through the chat template, as `calibrate` and `generate` send them, so the "
                        "profile's acceptance is measured on the very texts the server produces")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--goodput", default="ttft:2000 e2el:10000")
    parser.add_argument("--profile", help="the profile the simulator replays with (default: the shipped "
                        "simulator/profiles/smollm2_cpu.json; with --calibrate, required: the file to write)")
    parser.add_argument("--out", type=output_path, required=True)
    parser.add_argument("--per-prompt", action="store_true", help="also predict with each request's prompt as its "
                        "class (the profile needs `calibrate --per-prompt` classes)")
    parser.add_argument("--sim-seeds", type=int, default=SIM_SEEDS, help="replay each run this many times with "
                        "different simulator seeds; a prediction is the median (one replay is one random draw of "
                        "acceptance)")
    parser.add_argument("--calibrate", action="store_true", help="first calibrate --profile (per prompt) on --prompts")
    parser.add_argument("--resimulate", type=Path, help="only redo the simulator's predictions of this result file "
                        "with --profile (e.g. one calibrated on the machine that served), writing --out")
    parser.add_argument("--overhead-from", type=Path, help="with --resimulate: a run that did not measure its serving "
                        "overhead (served before this benchmark measured it) takes the median of this result file's "
                        "measured ones")
    args = parser.parse_args(argv)
    for name, value in (("rate", args.rate), ("phase_s", args.phase_s), ("max_tokens", args.max_tokens),
                        ("rounds", args.rounds), ("sim_seeds", args.sim_seeds), *(("also_rate", r) for r in args.also_rate)):
        if not value > 0:
            parser.error(f"{name}={value}: must be > 0")
    try:
        phase_plan(args.phases, args.phase_s)
    except ValueError as exc:
        parser.error(str(exc))
    if args.calibrate and args.profile is None:
        parser.error("calibrate: name the profile to write with --profile (not the shipped default)")
    if args.calibrate and args.resimulate is not None:
        parser.error("calibrate: --resimulate replays a recorded run; calibrating now would not describe it")
    if args.resimulate is not None and not args.resimulate.is_file():
        parser.error(f"resimulate={str(args.resimulate)!r}: no such file")
    if args.overhead_from is not None and args.resimulate is None:
        parser.error("overhead_from: only with --resimulate (a new run measures its own)")
    borrowed = None
    if args.overhead_from is not None:
        try:
            source = args.overhead_from.resolve()
            named = os.path.relpath(source, ROOT) if source.is_relative_to(ROOT) else source.name
            borrowed = borrowed_overhead(json.loads(args.overhead_from.read_text()), named)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"overhead_from={str(args.overhead_from)!r}: {exc}")
    args.profile = args.profile or str(ROOT / "simulator" / "profiles" / "smollm2_cpu.json")
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        parser.error(f"configs={args.configs!r}: unknown {unknown}; known: {', '.join(CONFIGS)}")
    if args.resimulate is not None:
        result = json.loads(args.resimulate.read_text())
        try:
            for run in result["runs"]:
                for key in [k for k in run if k.startswith(("simulated_e2e_s", "simulator_error", "speed_factor"))]:
                    del run[key]  # the previous predictions: none may outlive this one
                if borrowed is not None and not measured_its_overhead(run):
                    run["serving_overhead"] = borrowed
                run.update(predict(run, args.profile, args.per_prompt, args.sim_seeds, result.get("max_tokens")))
        except (KeyError, TypeError, ValueError) as exc:
            parser.error(f"resimulate={str(args.resimulate)!r}: not a serve_shift result this can replay ({exc})")
        result["profile"] = os.path.relpath(args.profile, ROOT)
        result["per_prompt"] = args.per_prompt
        result["sim_seeds"] = args.sim_seeds
        result["profile_streams"] = bool(load_profile(args.profile).streams)
        write_json_atomic(args.out, result, "out")
        print(f"wrote {args.out}")
        return
    configs = args.configs.split(",")
    if args.calibrate:
        calibrate(args)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tmp_dir = tempfile.TemporaryDirectory()
    tmp = tmp_dir.name
    store = Path(tmp) / "steps.sqlite"  # every decode step, for the run's speed window by window
    server = start_server(port, telemetry=f"sqlite:{store}?steps=1")
    cost = fit_cost_model(load_profile(args.profile))
    runs = []
    try:
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            plan = [(c, args.rate) for c in order] + ([("adaptive", rate) for rate in args.also_rate] if r == 0 else [])
            for config, rate in plan:
                print(f"round {r + 1}/{args.rounds}: {config} at {rate:g} req/s", flush=True)
                before = scrape_plain_steps(url)
                probes = probe(url, args.prompts, args.endpoint)
                report = loadgen(url, args, config, rate, r, Path(tmp) / f"{config}-{rate}-{r}.json")
                end = time.time()
                probes += probe(url, args.prompts, args.endpoint)
                after = scrape_plain_steps(url)
                steps = after[1] - before[1]
                run = {"round": r, "config": config, "rate": rate, **summarize(report),
                       "plain_steps": {"count": steps, "mean_s": (after[0] - before[0]) / steps if steps else None},
                       "speed_timeline": run_timeline(store, report["origin_unix"], cost, end)}
                try:  # after run_timeline: it waited for the telemetry writer to flush the probes too
                    run["serving_overhead"] = measure_overhead(store, probes, cost)
                except (RuntimeError, ValueError) as exc:  # the run stands; its prediction prices no overhead
                    print(f"  serving overhead not measured: {exc}", flush=True)
                run.update(predict(run, args.profile, args.per_prompt, args.sim_seeds, args.max_tokens))
                runs.append(run)
                print(f"  e2el p50 {run['e2el_s']['p50']:.2f} s, p95 {run['e2el_s']['p95']:.2f} s, goodput "
                      f"{run['goodput_rps']} req/s", flush=True)
                for suffix in ("", "_per_prompt") if args.per_prompt else ("",):
                    for speed in ("", "_at_speed", "_timeline"):
                        if "simulated_e2e_s" + suffix + speed not in run:
                            continue
                        sim, err = run["simulated_e2e_s" + suffix + speed], run["simulator_error" + suffix + speed]
                        print(f"  simulated{(suffix + speed).replace('_', ' ')}: p50 {sim['p50']:.2f} s "
                              f"({err['p50']:+.1%}), p95 {sim['p95']:.2f} s ({err['p95']:+.1%})", flush=True)
                o = run.get("serving_overhead")
                if o:
                    print(f"  serving overhead over {o['requests']} probes: {o['request_s'] * 1e3:.1f} ms a request, "
                          f"{o['step_s'] * 1e3:.2f} ms a step, {o['client_s'] * 1e3:.1f} ms outside the engine", flush=True)
                if run.get("speed_factor"):
                    print(f"  plain step {run['plain_steps']['mean_s'] * 1e3:.1f} ms over "
                          f"{run['plain_steps']['count']:.0f} steps: profile x{run['speed_factor']:.3f}", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
        tmp_dir.cleanup()
    result = {"prompts": os.path.relpath(args.prompts, ROOT), "phases": args.phases, "phase_s": args.phase_s,
              "rate": args.rate, "max_tokens": args.max_tokens, "endpoint": args.endpoint, "goodput_slos": args.goodput,
              "profile": os.path.relpath(args.profile, ROOT), "calibrated_first": args.calibrate,
              "per_prompt": args.per_prompt, "sim_seeds": args.sim_seeds,
              "profile_streams": bool(load_profile(args.profile).streams), "rounds": args.rounds, "timeline_window_s": TIMELINE_WINDOW_S,
              "machine": {"cpus": os.cpu_count(), "torch_threads": "the server's default", "torch": version("torch"),
                          "transformers": version("transformers"), "platform": platform.platform()},
              "runs": runs}
    write_json_atomic(args.out, result, "out")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
