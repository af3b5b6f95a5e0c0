"""Controller decision overhead: wall time of ``decide()`` + ``observe()`` per step.

The engine calls the policy once per step, and a step of SmolLM2-135M on 2 CPU cores takes
~35-90 ms, so the controller must stay far below a millisecond; the target is a median under
50 us. Each policy is driven for ``--steps`` steps against ``policies.synthetic.SyntheticEnv``;
only the policy calls are timed (``time.perf_counter_ns`` around them), not the environment.
The gated cases also time the n-gram match gate as the engine uses it (``keep`` on every lookup,
outcomes carrying the match order). Early-stop calls are timed per drafted token.

    python benchmarks/policy_overhead.py                 # table on stdout
    python benchmarks/policy_overhead.py --out out/policy_overhead.json
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adaptive_spec.outputs import output_path, write_json_atomic  # noqa: E402
from policies.early_stop import ConfidenceThreshold, LearnedEarlyStop  # noqa: E402
from policies.outcome import Action  # noqa: E402
from policies.registry import make_policy  # noqa: E402
from policies.synthetic import SyntheticDrafter, SyntheticEnv  # noqa: E402

DRAFTERS = [
    SyntheticDrafter("ngram", 0.8, draft_s_fixed=0.0001),
    SyntheticDrafter("int8", 0.6, draft_s_per_token=0.015, confidences=True),
    SyntheticDrafter("model:/models/small", 0.7, draft_s_per_token=0.008, confidences=True),
]
CASES = [
    ("static:int8:4", ["int8"]),
    ("heuristic:int8", ["int8"]),
    ("adaptive", ["ngram"]),
    ("adaptive", ["ngram", "int8", "model:/models/small"]),
]


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(int(fraction * len(sorted_values)), len(sorted_values) - 1)]


def summarise(name: str, samples_ns: list[int]) -> dict:
    us = sorted(ns / 1000.0 for ns in samples_ns)
    return {"case": name, "calls": len(us), "median_us": statistics.median(us), "p90_us": percentile(us, 0.9),
            "p99_us": percentile(us, 0.99), "mean_us": statistics.fmean(us)}


def time_policy(spec: str, drafters: list[str], steps: int, seed: int, gated: bool = False) -> dict:
    """``decide`` + ``observe`` per step; ``gated``: also the n-gram match gate's ``keep`` whenever
    the policy drafts with n-gram, as the engine calls it (random match kinds)."""
    policy = make_policy(spec, drafters, seed=seed)
    gate = policy.draft_gate("ngram") if gated else None
    env = SyntheticEnv(DRAFTERS, seed=seed)
    rng = random.Random(seed)
    samples = []
    clock = time.perf_counter_ns
    for _ in range(steps):
        start = clock()
        action = policy.decide()
        elapsed = clock() - start
        order, ambiguous = rng.choice((1, 1, 2, 3)), rng.random() < 0.3
        if gate is not None and action.drafter == "ngram":
            start = clock()
            keep = gate.keep(order, policy.config.max_k, ambiguous)
            elapsed += clock() - start
            action = Action("ngram", keep) if keep else Action("none", 0)
        outcome = env.step(action)
        if gate is not None and outcome.drafter == "ngram" and outcome.proposed:
            outcome = dataclasses.replace(outcome, match_order=order, match_ambiguous=ambiguous)
        start = clock()
        policy.observe(outcome)
        samples.append(elapsed + clock() - start)
    label = f"{spec}{' + match gate' if gated else ''} [{len(drafters)} drafter{'s' if len(drafters) > 1 else ''}]"
    return summarise(label, samples)


def time_early_stop(stopper, name: str, tokens: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    decide, learn = [], []
    clock = time.perf_counter_ns
    for position in range(tokens):
        top_prob = rng.betavariate(4, 1.5)
        start = clock()
        stopper.should_continue(stopper.features(top_prob, position=position % 8))
        decide.append(clock() - start)
        features = stopper.features(top_prob, position=position % 8)
        start = clock()
        stopper.learn(features, rng.random() < top_prob)
        learn.append(clock() - start)
    return [summarise(f"{name}.should_continue", decide), summarise(f"{name}.learn (amortised)", learn)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps per policy (default 3000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=output_path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    rows = [time_policy(spec, drafters, args.steps, args.seed) for spec, drafters in CASES]
    rows += [time_policy("adaptive", drafters, args.steps, args.seed, gated=True)
             for drafters in (["ngram"], [d.name for d in DRAFTERS])]
    rows += time_early_stop(ConfidenceThreshold(), "threshold", args.steps, args.seed)
    rows += time_early_stop(LearnedEarlyStop(seed=args.seed), "learned", args.steps, args.seed)

    print(f"{'case':<48} {'calls':>6} {'median us':>10} {'p90 us':>8} {'p99 us':>8} {'mean us':>8}")
    for row in rows:
        print(f"{row['case']:<48} {row['calls']:>6} {row['median_us']:>10.1f} {row['p90_us']:>8.1f} "
              f"{row['p99_us']:>8.1f} {row['mean_us']:>8.1f}")
    if args.out is not None:
        report = {"python": platform.python_version(), "machine": platform.machine(), "steps": args.steps,
                  "seed": args.seed, "target_median_us": 50.0, "results": rows}
        write_json_atomic(args.out, report, "out", indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
