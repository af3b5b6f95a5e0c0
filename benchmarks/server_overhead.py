"""What the HTTP server adds to a request: end-to-end latency through ``/v1/completions`` against
``generate`` in process, on the same decoder, side by side.

One process loads the model once and serves it from a thread (``serving_in_thread``); each prompt
is run both ways (non-streamed, greedy, the same fixed speculation so both do the same work), the
order alternating from pair to pair, for ``--rounds`` rounds. The HTTP side is timed by the client,
so it includes the client, JSON, the event loop, the queue hand-off and the response. Reported: p50
of each side, and the median per-pair difference with a bootstrap 95% interval; the server meets
its budget when the p50 difference is within 5% or 10 ms.

    python -m benchmarks.server_overhead --rounds 3 --out benchmarks/results/server_overhead.json
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
from pathlib import Path

import httpx
import torch
import transformers

from adaptive_spec.bench import load_prompts
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import build_drafter
from adaptive_spec.models import load_model
from adaptive_spec.outputs import check_writable, write_json_atomic
from adaptive_spec.server import Settings, create_app
from adaptive_spec.server.run import serving_in_thread
from policies import StaticPolicy

ROOT = Path(__file__).resolve().parents[1]


def bootstrap_median(values: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=ROOT / "benchmarks" / "engine.jsonl")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drafter", default="ngram")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for name in ("rounds", "max_tokens", "k"):
        if getattr(args, name) < 1:
            parser.error(f"{name}={getattr(args, name)}: must be >= 1")
    check_writable(args.out, "out")  # before the model loads, not after the run
    rows = load_prompts(args.prompts)
    target = load_model("smollm2")
    decoder = SpeculativeDecoder(target, [build_drafter(args.drafter, target)])
    speculation = {"mode": "static", "drafter": args.drafter, "k": args.k}
    policy = StaticPolicy(args.drafter, args.k)
    pairs = []
    with serving_in_thread(create_app(lambda: decoder, "smollm2", Settings())) as url, \
            httpx.Client(base_url=url, timeout=300) as http:
        def in_process(ids):
            started = time.perf_counter()
            text = decoder.generate(ids, max_new_tokens=args.max_tokens, policy=policy).text
            return time.perf_counter() - started, text

        def over_http(text_prompt):
            started = time.perf_counter()
            r = http.post("/v1/completions", json={"prompt": text_prompt, "max_tokens": args.max_tokens,
                                                    "temperature": 0, "speculation": speculation})
            r.raise_for_status()
            return time.perf_counter() - started, r.json()["choices"][0]["text"]

        over_http(rows[0].prompt)  # warm both paths once
        in_process(list(decoder.tokenizer(rows[0].prompt)["input_ids"]))
        for r in range(args.rounds):
            for i, row in enumerate(rows):
                ids = list(decoder.tokenizer(row.prompt)["input_ids"])
                if (i + r) % 2 == 0:
                    local, local_text = in_process(ids)
                    remote, remote_text = over_http(row.prompt)
                else:
                    remote, remote_text = over_http(row.prompt)
                    local, local_text = in_process(ids)
                pairs.append({"round": r, "prompt": row.id, "in_process_s": local, "http_s": remote,
                              "same_text": local_text == remote_text})
                print(f"round {r + 1} {row.id:>12s}: in process {local * 1e3:8.1f} ms, http {remote * 1e3:8.1f} ms")
    local_p50 = statistics.median(p["in_process_s"] for p in pairs)
    http_p50 = statistics.median(p["http_s"] for p in pairs)
    diffs = [p["http_s"] - p["in_process_s"] for p in pairs]
    lo, hi = bootstrap_median(diffs)
    budget = max(0.05 * local_p50, 0.010)
    result = {
        "prompts": str(args.prompts.relative_to(ROOT)) if args.prompts.is_absolute() else str(args.prompts),
        "max_tokens": args.max_tokens, "rounds": args.rounds, "speculation": speculation,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "transformers": transformers.__version__, "platform": platform.platform()},
        "p50_in_process_s": local_p50, "p50_http_s": http_p50, "p50_difference_s": http_p50 - local_p50,
        "median_pair_difference_s": statistics.median(diffs), "median_pair_difference_ci95_s": [lo, hi],
        "budget_s": budget, "within_budget": http_p50 - local_p50 <= budget,
        "all_same_text": all(p["same_text"] for p in pairs), "pairs": pairs,
    }
    print(f"p50 in process {local_p50 * 1e3:.1f} ms, over HTTP {http_p50 * 1e3:.1f} ms "
          f"(difference {(http_p50 - local_p50) * 1e3:+.1f} ms; per pair median {statistics.median(diffs) * 1e3:+.1f} ms, "
          f"95% CI [{lo * 1e3:+.1f}, {hi * 1e3:+.1f}]); budget {budget * 1e3:.1f} ms: "
          f"{'within' if result['within_budget'] else 'OVER'}; same text in every pair: {result['all_same_text']}")
    write_json_atomic(args.out, result, "out")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
