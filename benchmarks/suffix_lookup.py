"""What a suffix-drafter lookup costs as its history grows (it must stay well under a millisecond).

The history is filled with real text tokenized by the embedded model's tokenizer: the World Factbook
backgrounds (``benchmarks/corpus/sources``), one output per profile, repeated in order until the
history holds ``--sizes`` tokens. Contexts are windows of the same text (their suffixes occur in the
history, as in repetitive traffic) and, as the worst case, contexts ending in the history's most
frequent 2-gram. Each lookup is ``SuffixDrafter.draft`` with the defaults (per-request match included)
on a 512-token context; the table gives the median, the 99th percentile and the maximum.

    python -m benchmarks.suffix_lookup --out benchmarks/results/suffix_lookup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np

from adaptive_spec.drafters import HistoryLimits, HistoryStore, SuffixDrafter

FACTBOOK = Path(__file__).resolve().parent / "corpus" / "sources" / "factbook_backgrounds.jsonl"
CONTEXT = 512


def outputs(tokenizer) -> list[list[int]]:
    rows = [json.loads(line)["background"] for line in FACTBOOK.read_text().splitlines() if line.strip()]
    return [tokenizer(text)["input_ids"] for text in rows]


def time_lookups(drafter: SuffixDrafter, contexts: list[list[int]], k: int = 16) -> list[float]:
    seconds = []
    for context in contexts:
        start = time.perf_counter()
        drafter.draft(context, k)
        seconds.append(time.perf_counter() - start)
    return seconds


def measure(docs: list[list[int]], size: int, lookups: int, rng: np.random.Generator) -> dict:
    store = HistoryStore(HistoryLimits(max_tokens=size, max_outputs=1_000_000))
    view = SuffixDrafter(store).for_request("")
    added, i = 0, 0
    while added < size:
        view.learn(docs[i % len(docs)])
        added += len(docs[i % len(docs)])
        i += 1
    stats = store.stats()
    flat = [t for d in docs for t in d]
    starts = rng.integers(CONTEXT, len(flat), lookups)
    typical = [flat[s - CONTEXT : s] for s in starts]
    pair = Counter(zip(flat, flat[1:])).most_common(1)[0][0]
    worst = [flat[s - CONTEXT : s - 2] + list(pair) for s in starts[: lookups // 4]]
    row = {"history_tokens": stats["tokens"], "memory_bytes": stats["memory_bytes"]}
    for name, contexts in (("typical", typical), ("most_frequent_2gram", worst)):
        time_lookups(view, contexts[:20])  # warm-up
        s = sorted(time_lookups(view, contexts))
        row[name] = {"lookups": len(s), "median_ms": statistics.median(s) * 1e3,
                     "p99_ms": s[int(0.99 * (len(s) - 1))] * 1e3, "max_ms": s[-1] * 1e3}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="history sizes in tokens, comma-separated")
    parser.add_argument("--lookups", type=int, default=2000, help="timed lookups per size (typical contexts)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or args.lookups < 4:
        parser.error(f"--sizes must be positive integers and --lookups >= 4, got {args.sizes!r}, {args.lookups}")
    from adaptive_spec.models import load_model

    docs = outputs(load_model("smollm2").tokenizer)
    rng = np.random.default_rng(0)
    rows = [measure(docs, size, args.lookups, rng) for size in sizes]
    print(f"{'history tokens':>15} {'memory MB':>10} | {'typical median / p99 / max ms':>30} | {'frequent 2-gram median / p99 / max ms':>38}")
    for r in rows:
        t, w = r["typical"], r["most_frequent_2gram"]
        print(f"{r['history_tokens']:>15,} {r['memory_bytes'] / 1e6:>10.1f} | "
              f"{t['median_ms']:>10.3f} {t['p99_ms']:>9.3f} {t['max_ms']:>9.3f} | "
              f"{w['median_ms']:>12.3f} {w['p99_ms']:>12.3f} {w['max_ms']:>12.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        import torch
        import transformers

        machine = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                   "transformers": transformers.__version__, "platform": platform.platform()}
        args.out.write_text(json.dumps({"benchmark": "suffix_lookup", "context_tokens": CONTEXT, "rows": rows,
                                        "machine": machine}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
