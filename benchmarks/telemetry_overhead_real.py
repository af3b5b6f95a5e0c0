"""Telemetry on vs off on the real engine, interleaved in one process.

    python benchmarks/telemetry_overhead_real.py [--rounds 3] [--telemetry sqlite,prometheus:9464]

One decoder; for every prompt of ``benchmarks/engine.jsonl`` and every round, the same greedy
generation runs once with the observers attached and once without, alternating which goes first,
so machine drift hits both alike. Prints tokens/s for both and the overhead, writes JSON.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from adaptive_spec import GenerationConfig, SpeculativeDecoder, load_model
from adaptive_spec.bench import load_prompts
from adaptive_spec.drafters import build_drafter
from adaptive_spec.observers import ObserverSet
from adaptive_spec.outputs import output_path, write_json_atomic
from adaptive_spec.telemetry import build_observers
from policies import StaticPolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="benchmarks/engine.jsonl")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--telemetry", default=None, help="observer spec (default: sqlite in a temporary folder)")
    parser.add_argument("--out", type=output_path, default="benchmarks/results/telemetry_overhead_real.json")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp()
    spec = args.telemetry or f"sqlite:{tmp}/telemetry.sqlite"
    target = load_model("smollm2")
    decoder = SpeculativeDecoder(target, [build_drafter("ngram", target)])
    on, off = ObserverSet(build_observers(spec)), ObserverSet([])
    prompts = load_prompts(args.prompts)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens)
    totals = {name: {"tokens": 0, "seconds": 0.0} for name in ("off", "on")}
    for policy in (StaticPolicy("none", 0), StaticPolicy("ngram", 8)):  # warm-up
        decoder.generate(prompts[0].prompt, cfg, policy=policy)
    for r in range(args.rounds):
        for i, prompt in enumerate(prompts):
            policy = StaticPolicy("ngram", 8) if prompt.kind == "copy" else StaticPolicy("none", 0)
            order = [("on", on), ("off", off)] if (r + i) % 2 else [("off", off), ("on", on)]
            for name, observers in order:
                decoder.observers = observers
                start = time.perf_counter()
                result = decoder.generate(prompt.prompt, cfg, policy=policy)
                totals[name]["seconds"] += time.perf_counter() - start
                totals[name]["tokens"] += len(result.token_ids)
    time.sleep(1.5)  # let the background writer flush, then check it wrote
    rates = {name: t["tokens"] / t["seconds"] for name, t in totals.items()}
    overhead = 1 - rates["on"] / rates["off"]
    report = {"telemetry": spec, "rounds": args.rounds, "tokens_per_s": rates, "overhead": overhead,
              "observer_errors": on.errors}
    print(f"telemetry off: {rates['off']:.2f} tok/s   on ({spec}): {rates['on']:.2f} tok/s   overhead {overhead:+.2%}"
          f"   observer errors {on.errors}")
    write_json_atomic(args.out, report, "out")


if __name__ == "__main__":
    main()
