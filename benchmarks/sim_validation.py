"""Does the simulator predict the real engine? One seeded open-loop workload, run both ways.

An experiment that uses both layers, so it lives here and not in either: the engine serves the
trace, and the simulator is fed what was served in memory (trace rows and a profile), as
``adaptive-spec validate-sim`` does.

1. A trace: Poisson arrivals at ``rate`` requests/s, classes drawn from the workload prompts'
   kinds, each request a real prompt of its class and a token budget.
2. The real engine serves it batch-1 FIFO in wall-clock time, as a replica would: a request starts
   when it has arrived and the previous one is done; it stops at end of sequence or at the budget,
   as served traffic does; its end-to-end latency is finish - arrival.
3. The simulator replays what was served (arrival, class, prompt tokens, and the output tokens
   the engine produced) on one serial replica with a profile calibrated on this machine and the
   same policy spec: the replay of recorded traffic a capacity planner would run.
4. Predicted vs measured p50 / p95 end-to-end latency and throughput, with relative errors.

Why the engine stops at end of sequence: ``calibrate`` measures acceptance on outputs that end
there, and forcing generation past it (``ignore_eos``) makes the model ramble, where the n-gram
drafter's acceptance on a copy prompt falls from ~0.7 to ~0.2 (measured on SmolLM2). A trace
forced to 64 tokens therefore ran copy requests about twice as long as the profile predicts.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from adaptive_spec.config import GenerationConfig
from policies.registry import make_policy
from simulator.profile import Profile
from simulator.run import simulate
from simulator.scenario import scenario_from_dict

if TYPE_CHECKING:  # the engine (torch) is only needed by the caller that built the decoder
    from adaptive_spec.bench import Prompt
    from adaptive_spec.decoder import SpeculativeDecoder


def make_trace(decoder: SpeculativeDecoder, prompts: list[Prompt], rate: float, count: int, output_tokens: int,
               seed: int) -> list[dict]:
    rng = random.Random(seed)
    by_class: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_class.setdefault(p.kind, []).append(p)
    classes = sorted(by_class)
    t = 0.0
    trace = []
    for i in range(count):
        if i:
            t += rng.expovariate(rate)
        klass = rng.choice(classes)
        prompt = rng.choice(by_class[klass])
        trace.append({"arrival_s": t, "class": klass, "prompt_id": prompt.id, "prompt": prompt.prompt,
                      "prompt_tokens": len(decoder.encode_prompt(prompt.prompt)), "output_tokens": output_tokens})
    return trace


def run_real(decoder: SpeculativeDecoder, trace: list[dict], policy_spec: str,
             progress: Callable[[str], None] | None = None) -> list[dict]:
    """Serve the trace in wall-clock time, batch-1 FIFO; one policy instance for the whole run."""
    drafters = [d for d in decoder.drafters if d != "none"]
    policy = make_policy(policy_spec, drafters)
    warm = GenerationConfig(max_new_tokens=trace[0]["output_tokens"])
    for row in trace[:2]:  # warm the kernels of every shape before the clock starts
        decoder.generate(row["prompt"], warm, policy=make_policy(policy_spec, drafters))
    origin = time.perf_counter()
    served = []
    for i, row in enumerate(trace):
        wait = row["arrival_s"] - (time.perf_counter() - origin)
        if wait > 0:
            time.sleep(wait)
        start = time.perf_counter() - origin
        cfg = GenerationConfig(max_new_tokens=row["output_tokens"])  # a budget: end of sequence stops it earlier
        result = decoder.generate(row["prompt"], cfg, policy=policy)
        finish = time.perf_counter() - origin
        served.append({**{k: row[k] for k in ("arrival_s", "class", "prompt_tokens")},
                       "max_new_tokens": row["output_tokens"], "output_tokens": result.stats.new_tokens,
                       "start_s": start, "finish_s": finish, "ttft_s": start - row["arrival_s"] + result.stats.prefill_s,
                       "e2e_s": finish - row["arrival_s"], "acceptance_rate": result.stats.acceptance_rate})
        if progress:
            progress(f"request {i + 1}/{len(trace)}")
    return served


def summarize_real(served: list[dict]) -> dict:
    e2e = np.array([r["e2e_s"] for r in served])
    ttft = np.array([r["ttft_s"] for r in served])
    span = max(r["finish_s"] for r in served)
    return {
        "e2e_s": {"p50": float(np.percentile(e2e, 50)), "p95": float(np.percentile(e2e, 95))},
        "ttft_s": {"p50": float(np.percentile(ttft, 50)), "p95": float(np.percentile(ttft, 95))},
        "throughput_rps": len(served) / span,
        "throughput_tokens_s": sum(r["output_tokens"] for r in served) / span,
    }


def simulate_trace(trace: list[dict], profile: str | Path | Profile, policy_spec: str, seed: int,
                   replicas: dict | None = None, speed: list[tuple[float, float]] | None = None,
                   concurrency: int | None = None, overhead: dict | None = None,
                   prefill_speed: float | None = None, hooks: list | None = None) -> dict:
    """Replay ``trace`` rows (arrival_s, class, prompt_tokens, output_tokens) on one replica: serial,
    or as ``replicas`` says (the scenario's field, e.g. ``{"mode": "batching", "max_batch": 8}``);
    ``speed``: the machine's speed over the trace, ``(at_s, factor)`` points (``simulator/speed.py``);
    ``concurrency``: the client's limit on requests in flight (rows in the order it sent them);
    ``overhead``: the server's time outside the forwards (the scenario's field); ``prefill_speed``:
    prefill's own speed factor (the scenario's field); ``hooks``: more observers of the replay's
    events (``simulate``'s ``extra_hooks``).

    ``profile`` is a profile file or a ``Profile`` already loaded; the rows go to the simulator as
    they are, no file in between.
    """
    classes = sorted({r["class"] for r in trace})
    rows = [{k: r[k] for k in ("arrival_s", "class", "prompt_tokens", "output_tokens", "max_tokens") if k in r}
            for r in trace]
    scenario = scenario_from_dict({
        "name": "validation", "seed": seed,
        "profile": profile if isinstance(profile, Profile) else str(Path(profile).resolve()),
        # lengths come from the trace; these only satisfy the class schema
        "classes": {c: {"prompt_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 64}}
                    for c in classes},
        "workload": {"replay": rows, **({"concurrency": concurrency} if concurrency else {})},
        "replicas": {"count": 1, "mode": "serial", **(replicas or {})},
        "speed": [{"at_s": t, "factor": f} for t, f in speed or ()],
        "overhead": overhead or {},
        **({"prefill_speed": prefill_speed} if prefill_speed is not None else {}),
        "policy": policy_spec,
    })
    s = simulate(scenario, with_timeseries=False, extra_hooks=hooks).summary
    return {
        "e2e_s": {"p50": s["e2e_s"]["p50"], "p95": s["e2e_s"]["p95"]},
        "ttft_s": {"p50": s["ttft_s"]["p50"], "p95": s["ttft_s"]["p95"]},
        "throughput_rps": s["throughput_rps"],
        "throughput_tokens_s": s["throughput_tokens_s"],
    }


def compare(measured: dict, predicted: dict) -> list[dict]:
    rows = []
    for name, get in (("e2e p50 (s)", lambda d: d["e2e_s"]["p50"]), ("e2e p95 (s)", lambda d: d["e2e_s"]["p95"]),
                      ("ttft p50 (s)", lambda d: d["ttft_s"]["p50"]), ("ttft p95 (s)", lambda d: d["ttft_s"]["p95"]),
                      ("throughput (req/s)", lambda d: d["throughput_rps"]),
                      ("throughput (tok/s)", lambda d: d["throughput_tokens_s"])):
        m, p = get(measured), get(predicted)
        rows.append({"metric": name, "measured": m, "predicted": p, "error": (p - m) / m if m else None})
    return rows


def resimulate(result: dict, profile: str | None = None) -> dict:
    """``result`` (a ``validate-sim`` file) with its predictions redone by the current simulator on the
    same served trace: the measurements stay, ``predicted`` and ``comparison`` are replaced, and
    ``resimulated`` records when and with which profile."""
    from datetime import date

    profile = profile or result["profile"]
    predicted = simulate_trace(result["served"], profile, result["policy"], result["seed"])
    return {**result, "profile": str(profile), "predicted": predicted,
            "comparison": compare(result["measured"], predicted),
            "resimulated": {"date": date.today().isoformat(), "profile": str(profile)}}


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    from adaptive_spec.outputs import output_path, write_json_atomic

    parser = argparse.ArgumentParser(description="Redo a validate-sim file's predictions with the current simulator.")
    parser.add_argument("--resimulate", type=Path, required=True, help="a result file of `adaptive-spec validate-sim`")
    parser.add_argument("--profile", help="another profile (default: the file's own)")
    parser.add_argument("--out", type=output_path, required=True)
    args = parser.parse_args(argv)
    if not args.resimulate.is_file():
        parser.error(f"resimulate={str(args.resimulate)!r}: no such file")
    try:
        result = resimulate(json.loads(args.resimulate.read_text()), args.profile)
    except (KeyError, TypeError, ValueError) as exc:
        parser.error(f"resimulate={str(args.resimulate)!r}: not a validate-sim result ({exc})")
    write_json_atomic(args.out, result, "out")
    for row in result["comparison"]:
        print(f"{row['metric']:<20} measured {row['measured']:.3f} predicted {row['predicted']:.3f} ({row['error']:+.1%})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
