"""How fast the simulator runs: 100,000 requests per case, one process, one core.

    python benchmarks/simulator_speed.py [--requests 100000] [--json out/simulator_speed.json]

Each case generates ``--requests`` requests (lengths and classes as in the example scenario:
copy-heavy then open-ended, outputs 32-128 tokens) and simulates them with enough replicas to keep
queues short. Cases run side by side in this process and differ only in policy and replica kind,
so the table shows what a policy's own ``decide``/``observe`` costs per step. Wall time covers
traffic generation, the simulation and the summary (percentiles, time series).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simulator import scenario_from_dict, simulate  # noqa: E402
from simulator.report import _table, write_json  # noqa: E402


def scenario(requests: int, profile: str, mode: str, replicas: int, rate: float) -> dict:
    duration = requests / rate * 1.2  # max_requests cuts at exactly `requests`
    return {
        "name": f"speed-{mode}",
        "seed": 1,
        "profile": str(REPO / "simulator/profiles" / profile),
        "classes": {
            "copy_heavy": {"prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5},
                           "output_tokens": {"dist": "uniform", "low": 32, "high": 128}},
            "open_ended": {"prompt_tokens": {"dist": "lognormal", "mean": 60, "sigma": 0.6},
                           "output_tokens": {"dist": "uniform", "low": 32, "high": 128}},
        },
        "workload": {"arrival": {"process": "poisson", "rate": rate}, "mix": {"copy_heavy": 1.0},
                     "duration_s": duration, "shifts": [{"at_s": duration / 2.4, "mix": {"open_ended": 1.0}}],
                     "max_requests": requests},
        "replicas": {"count": replicas, "mode": mode, "max_batch": 32},
        "slo": {"e2e_s": 20.0},
        "metrics": {"bin_s": 600},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000, help="requests per case")
    parser.add_argument("--json", default="out/simulator_speed.json", help="where to write the results")
    parser.add_argument("--cases", default="", help="comma-separated case names to run (default: all)")
    args = parser.parse_args()
    cases = [
        ("serial plain", "example_cpu.json", "serial", 48, 12.0, "none"),
        ("serial static:ngram:4", "example_cpu.json", "serial", 48, 12.0, "static:ngram:4"),
        ("serial adaptive", "example_cpu.json", "serial", 48, 12.0, "adaptive"),
        ("batching(32) static:ngram:4", "example_gpu_synthetic.json", "batching", 4, 40.0, "static:ngram:4"),
    ]
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c[0] in wanted]
    rows, results = [], []
    for name, profile, mode, replicas, rate, policy in cases:
        s = scenario_from_dict(scenario(args.requests, profile, mode, replicas, rate))
        started = time.perf_counter()
        result = simulate(s, policy)
        wall = time.perf_counter() - started
        steps = result.summary["acceptance"]["steps"]
        done = result.summary["requests"]["completed"]
        results.append({"case": name, "policy": policy, "mode": mode, "replicas": replicas, "requests": done,
                        "decode_steps": steps, "wall_s": wall, "requests_per_s": done / wall,
                        "us_per_step": wall / steps * 1e6, "simulated_s": result.summary["last_finish_s"],
                        "e2e_p95_s": result.summary["e2e_s"]["p95"],
                        "tokens_per_step": result.summary["acceptance"]["tokens_per_step"]})
        r = results[-1]
        rows.append([name, f"{done:,}", f"{steps:,}", f"{wall:.1f}", f"{r['requests_per_s']:,.0f}",
                     f"{r['us_per_step']:.2f}", f"{r['tokens_per_step']:.2f}"])
    _table(f"simulator speed ({platform.processor() or platform.machine()}, Python {platform.python_version()})",
           ["case", "requests", "decode steps", "wall s", "requests/s", "us/step", "tokens/step"], rows)
    write_json({"python": platform.python_version(), "cases": results}, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
