"""Continuous batching against batch-1 serving of the same requests, side by side.

All requests arrive at once. ``batch-1`` serves them one after another with ``generate`` (the
engine the server runs today); ``batched`` submits them to ``BatchedDecoder`` with up to
``--max-batch`` rows. Both run the same speculation config, each request with a controller of its
own. Per mode: total output tokens over the wall time of the whole set, and each request's
end-to-end latency from the common arrival (queueing included, as a server's client sees it).
Rounds interleave the modes, their order alternating, and every batched request's tokens are
checked against its batch-1 tokens (greedy).

    python -m benchmarks.batching --configs plain,static:ngram:8,adaptive --rounds 3 \\
        --out benchmarks/results/batching.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.table import Table

from adaptive_spec.batching import BatchedDecoder
from adaptive_spec.bench import load_prompts
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import build_drafter
from adaptive_spec.models import load_model
from adaptive_spec.outputs import check_writable, write_json_atomic
from benchmarks.server_overhead import bootstrap_median
from policies.registry import make_policy

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def serve_one_by_one(decoder, texts, config: str, max_tokens: int) -> dict:
    start = time.perf_counter()
    latencies, tokens = [], []
    for text in texts:
        result = decoder.generate(text, policy=make_policy(config, ["ngram"]), max_new_tokens=max_tokens)
        latencies.append(time.perf_counter() - start)
        tokens.append(result.token_ids)
    return {"wall_s": time.perf_counter() - start, "latencies_s": latencies, "tokens": tokens}


def serve_batched(decoder, texts, config: str, max_tokens: int, max_batch: int) -> dict:
    engine = BatchedDecoder(decoder, max_batch=max_batch)
    start = time.perf_counter()
    ids = [engine.submit(text, policy=make_policy(config, ["ngram"]), max_new_tokens=max_tokens) for text in texts]
    done_at: dict[int, float] = {}
    rows = []
    while engine.pending:
        rows.append(len(engine.active) + min(len(engine.waiting), max_batch - len(engine.active)))
        for request_id in engine.step():
            done_at[request_id] = time.perf_counter() - start
    results = engine.results
    return {"wall_s": time.perf_counter() - start, "latencies_s": [done_at[i] for i in ids],
            "tokens": [results[i].token_ids for i in ids], "mean_rows": statistics.fmean(rows) if rows else 0.0,
            "speculative_steps": sum(s.proposed > 0 for i in ids for s in results[i].steps),
            "steps": sum(len(results[i].steps) for i in ids)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=ROOT / "benchmarks" / "shift.jsonl")
    parser.add_argument("--requests", type=int, default=8, help="requests per set (copy and open alternating)")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--configs", default="plain,static:ngram:8,adaptive")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for name in ("requests", "max_batch", "max_tokens", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"{name}={getattr(args, name)}: must be >= 1")
    configs = [c for c in args.configs.split(",") if c]
    for config in configs:
        make_policy(config, ["ngram"])  # a bad spec fails here, before the model loads
    check_writable(args.out, "out")
    by_kind: dict[str, list[str]] = {}
    for row in load_prompts(args.prompts):
        by_kind.setdefault(row.kind, []).append(row.prompt)
    kinds = sorted(by_kind)
    texts = [by_kind[kinds[i % len(kinds)]][i // len(kinds) % len(by_kind[kinds[i % len(kinds)]])]
             for i in range(args.requests)]
    console = Console()
    target = load_model("smollm2")
    decoder = SpeculativeDecoder(target, [build_drafter("ngram", target)])
    with console.status("warming up ..."):
        serve_batched(decoder, texts[: min(len(texts), args.max_batch)], "static:ngram:8", 8, args.max_batch)
        serve_one_by_one(decoder, texts[:1], "plain", 8)
    runs = []
    for round_index in range(args.rounds):
        for config in configs:
            modes = ("batch-1", "batched") if round_index % 2 == 0 else ("batched", "batch-1")
            pair = {}
            for mode in modes:
                console.print(f"round {round_index + 1}/{args.rounds} · {config} · {mode} ...")
                if mode == "batch-1":
                    pair[mode] = serve_one_by_one(decoder, texts, config, args.max_tokens)
                else:
                    pair[mode] = serve_batched(decoder, texts, config, args.max_tokens, args.max_batch)
            same = pair["batched"]["tokens"] == pair["batch-1"]["tokens"]
            for mode, run in pair.items():
                runs.append({"round": round_index, "config": config, "mode": mode, "wall_s": run["wall_s"],
                             "output_tokens": sum(len(t) for t in run["tokens"]), "latencies_s": run["latencies_s"],
                             "identical_to_batch_1": same,
                             **{k: run[k] for k in ("mean_rows", "speculative_steps", "steps") if k in run}})
    summary = summarize(runs, configs)
    table = Table(title=f"{args.requests} requests at once, {args.max_tokens} tokens each, max batch {args.max_batch}")
    for column in ("config", "mode", "output tok/s", "vs batch-1 (95% CI)", "E2E p50 s", "E2E p95 s", "identical"):
        table.add_column(column, justify="right" if column not in ("config", "mode") else "left")
    for row in summary:
        ratio = "" if row["mode"] == "batch-1" else f"{row['throughput_ratio']:.2f}× ({row['ratio_ci'][0]:.2f}-{row['ratio_ci'][1]:.2f})"
        table.add_row(row["config"], row["mode"], f"{row['tokens_per_s']:.1f}", ratio, f"{row['e2e_p50_s']:.2f}",
                      f"{row['e2e_p95_s']:.2f}", "yes" if row["identical"] else "NO")
    console.print(table)
    write_json_atomic(args.out, {
        "benchmark": "batching", "prompts": str(args.prompts), "requests": args.requests, "max_batch": args.max_batch,
        "max_tokens": args.max_tokens, "rounds": args.rounds, "configs": configs,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "platform": platform.platform()},
        "summary": summary, "runs": runs}, "out")
    console.print(f"wrote {args.out}")


def summarize(runs: list[dict], configs: list[str]) -> list[dict]:
    """Per config and mode: median tokens/s over rounds, pooled E2E percentiles; for batched, the
    paired (same round) throughput ratio against batch-1 with a bootstrap interval over rounds."""
    rows = []
    for config in configs:
        for mode in ("batch-1", "batched"):
            mine = [r for r in runs if r["config"] == config and r["mode"] == mode]
            latencies = [x for r in mine for x in r["latencies_s"]]
            row = {"config": config, "mode": mode,
                   "tokens_per_s": statistics.median(r["output_tokens"] / r["wall_s"] for r in mine),
                   "e2e_p50_s": percentile(latencies, 0.5), "e2e_p95_s": percentile(latencies, 0.95),
                   "identical": all(r["identical_to_batch_1"] for r in mine)}
            if mode == "batched":
                ratios = []
                for r in mine:
                    base = next(b for b in runs if b["config"] == config and b["mode"] == "batch-1" and b["round"] == r["round"])
                    ratios.append((r["output_tokens"] / r["wall_s"]) / (base["output_tokens"] / base["wall_s"]))
                row["throughput_ratio"] = statistics.median(ratios)
                row["ratio_ci"] = bootstrap_median(ratios)
                row["ratios"] = ratios
                row["speculative_step_share"] = sum(r["speculative_steps"] for r in mine) / max(1, sum(r["steps"] for r in mine))
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
