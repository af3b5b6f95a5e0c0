"""Continuous batching against batch-1 serving of the same requests, side by side.

All requests arrive at once. ``batch-1`` serves them one after another with ``generate`` (the
engine the server runs without ``--max-batch``); ``batched N`` submits them to ``BatchedDecoder``
with up to N rows. Every mode runs the same speculation config, each request with a controller of
its own; each config keeps one ``BatchDraftCap`` for the whole run, as a server keeps its own
(it caps only the rows of learning controllers: ``adaptive``). Per mode: total output tokens over
the wall time of the whole set, each request's end-to-end latency from the common arrival
(queueing included, as a client sees it), and the share of decode steps that verified a draft.
Rounds interleave the modes, their order rotating, and every request's tokens are checked
against its batch-1 tokens (greedy).

    python -m benchmarks.batching --configs plain,static:ngram:8,adaptive --max-batch 4,8 --rounds 3 \\
        --out benchmarks/results/batching.json --plot benchmarks/results/batching.png
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
from policies.batch_cap import BatchDraftCap
from policies.registry import make_policy

ROOT = Path(__file__).resolve().parents[1]
BATCH_1 = "batch-1"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def serve_one_by_one(decoder, texts, config: str, max_tokens: int) -> dict:
    start = time.perf_counter()
    latencies, tokens, steps, drafted = [], [], 0, 0
    for text in texts:
        result = decoder.generate(text, policy=make_policy(config, ["ngram"]), max_new_tokens=max_tokens)
        latencies.append(time.perf_counter() - start)
        tokens.append(result.token_ids)
        steps, drafted = steps + len(result.steps), drafted + sum(s.proposed > 0 for s in result.steps)
    return {"wall_s": time.perf_counter() - start, "latencies_s": latencies, "tokens": tokens, "steps": steps,
            "speculative_steps": drafted}


def serve_batched(decoder, texts, config: str, max_tokens: int, max_batch: int, cap: BatchDraftCap | None) -> dict:
    engine = BatchedDecoder(decoder, max_batch=max_batch, draft_cap=cap)
    start = time.perf_counter()
    ids = [engine.submit(text, policy=make_policy(config, ["ngram"]), max_new_tokens=max_tokens) for text in texts]
    done_at: dict[int, float] = {}
    while engine.pending:
        for request_id in engine.step():
            done_at[request_id] = time.perf_counter() - start
    results = engine.results
    return {"wall_s": time.perf_counter() - start, "latencies_s": [done_at[i] for i in ids],
            "tokens": [results[i].token_ids for i in ids],
            "speculative_steps": sum(s.proposed > 0 for i in ids for s in results[i].steps),
            "steps": sum(len(results[i].steps) for i in ids)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=ROOT / "benchmarks" / "shift.jsonl")
    parser.add_argument("--requests", type=int, default=8, help="requests per set (copy and open alternating)")
    parser.add_argument("--max-batch", default="8", help="comma-separated batch sizes to run besides batch-1")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--configs", default="plain,static:ngram:8,adaptive")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=None, help="PNG: tokens/s and drafting share by batch size")
    args = parser.parse_args(argv)
    for name in ("requests", "max_tokens", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"{name}={getattr(args, name)}: must be >= 1")
    try:
        sizes = sorted({int(n) for n in args.max_batch.split(",") if n})
    except ValueError:
        parser.error(f"max_batch={args.max_batch!r}: must be comma-separated integers")
    if not sizes or min(sizes) < 2:
        parser.error(f"max_batch={args.max_batch!r}: batch sizes must be >= 2 (batch-1 always runs)")
    configs = [c for c in args.configs.split(",") if c]
    for config in configs:
        make_policy(config, ["ngram"])  # a bad spec fails here, before the model loads
    for path, name in ((args.out, "out"), (args.plot, "plot")):
        if path is not None:
            check_writable(path, name)
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
        serve_batched(decoder, texts[: max(sizes)], "static:ngram:8", 8, max(sizes), None)
        serve_one_by_one(decoder, texts[:1], "plain", 8)
    modes = [BATCH_1] + [f"batched {n}" for n in sizes]
    caps = {config: BatchDraftCap() for config in configs}
    runs = []
    for round_index in range(args.rounds):
        for config in configs:
            shift = round_index % len(modes)
            got = {}
            for mode in modes[shift:] + modes[:shift]:
                console.print(f"round {round_index + 1}/{args.rounds} · {config} · {mode} ...")
                if mode == BATCH_1:
                    got[mode] = serve_one_by_one(decoder, texts, config, args.max_tokens)
                else:
                    got[mode] = serve_batched(decoder, texts, config, args.max_tokens, int(mode.split()[1]), caps[config])
            for mode, run in got.items():
                runs.append({"round": round_index, "config": config, "mode": mode, "wall_s": run["wall_s"],
                             "output_tokens": sum(len(t) for t in run["tokens"]), "latencies_s": run["latencies_s"],
                             "identical_to_batch_1": run["tokens"] == got[BATCH_1]["tokens"],
                             "speculative_steps": run["speculative_steps"], "steps": run["steps"]})
    summary = summarize(runs, configs, modes)
    table = Table(title=f"{args.requests} requests at once, {args.max_tokens} tokens each")
    for column in ("config", "mode", "output tok/s", "vs batch-1 (95% CI)", "E2E p50 s", "E2E p95 s", "drafting", "same"):
        table.add_column(column, justify="right" if column not in ("config", "mode") else "left")
    for row in summary:
        ratio = "" if row["mode"] == BATCH_1 else f"{row['throughput_ratio']:.2f}× ({row['ratio_ci'][0]:.2f}-{row['ratio_ci'][1]:.2f})"
        table.add_row(row["config"], row["mode"], f"{row['tokens_per_s']:.1f}", ratio, f"{row['e2e_p50_s']:.2f}",
                      f"{row['e2e_p95_s']:.2f}", f"{row['speculative_step_share']:.0%}", "yes" if row["identical"] else "NO")
    console.print(table)
    write_json_atomic(args.out, {
        "benchmark": "batching", "prompts": str(args.prompts.relative_to(ROOT)) if args.prompts.is_absolute() else str(args.prompts),
        "requests": args.requests, "max_batch": sizes, "max_tokens": args.max_tokens, "rounds": args.rounds,
        "configs": configs, "modes": modes,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "platform": platform.platform()},
        "summary": summary, "runs": runs}, "out")
    console.print(f"wrote {args.out}")
    if args.plot is not None:
        plot(summary, configs, modes, args.plot)
        console.print(f"wrote {args.plot}")


def summarize(runs: list[dict], configs: list[str], modes: list[str]) -> list[dict]:
    """Per config and mode: median tokens/s over rounds, pooled E2E percentiles, the share of steps
    that verified a draft; for batched modes, the paired (same round) throughput ratio against
    batch-1 with a bootstrap interval over rounds."""
    rows = []
    for config in configs:
        for mode in modes:
            mine = [r for r in runs if r["config"] == config and r["mode"] == mode]
            latencies = [x for r in mine for x in r["latencies_s"]]
            row = {"config": config, "mode": mode,
                   "tokens_per_s": statistics.median(r["output_tokens"] / r["wall_s"] for r in mine),
                   "e2e_p50_s": percentile(latencies, 0.5), "e2e_p95_s": percentile(latencies, 0.95),
                   "speculative_step_share": sum(r["speculative_steps"] for r in mine) / max(1, sum(r["steps"] for r in mine)),
                   "identical": all(r["identical_to_batch_1"] for r in mine)}
            if mode != BATCH_1:
                ratios = []
                for r in mine:
                    base = next(b for b in runs if b["config"] == config and b["mode"] == BATCH_1 and b["round"] == r["round"])
                    ratios.append((r["output_tokens"] / r["wall_s"]) / (base["output_tokens"] / base["wall_s"]))
                row.update(throughput_ratio=statistics.median(ratios), ratio_ci=bootstrap_median(ratios), ratios=ratios)
            rows.append(row)
    return rows


def plot(summary: list[dict], configs: list[str], modes: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [1] + [int(m.split()[1]) for m in modes[1:]]
    fig, (speed, share) = plt.subplots(1, 2, figsize=(10, 4))
    for config in configs:
        rows = [next(r for r in summary if r["config"] == config and r["mode"] == m) for m in modes]
        speed.plot(sizes, [r["tokens_per_s"] for r in rows], marker="o", label=config)
        share.plot(sizes, [100 * r["speculative_step_share"] for r in rows], marker="o", label=config)
    speed.set(xlabel="requests decoded together (max batch)", ylabel="output tokens/s (all requests)",
              title="Throughput", xticks=sizes)
    share.set(xlabel="requests decoded together (max batch)", ylabel="decode steps that verified a draft (%)",
              title="Speculation the batch kept", xticks=sizes, ylim=(0, 100))
    speed.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
