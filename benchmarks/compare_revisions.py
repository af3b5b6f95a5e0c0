"""The same benchmark on two revisions of this repository, interleaved, as ratios to plain decoding.

A refactor must not slow the decoder down. This machine's speed drifts by 25% and more within
seconds, so two runs made one after the other cannot compare revisions. Here each round runs
``adaptive-spec bench`` once on each revision (the order alternating from round to round), and
every run reports each config against ``plain`` of that same run (``bench`` interleaves configs
prompt by prompt): a drift hits both sides of a ratio alike. Then the revisions are compared by
their ratios, round by round.

    python -m benchmarks.compare_revisions --before 8e88efc --prompts benchmarks/workloads.jsonl \\
        --configs plain,adaptive --rounds 3 --out benchmarks/results/refactor_ab.json
    python -m benchmarks.compare_revisions --before 5a67b10 --after 1a2b3c4 \\
        --prompts benchmarks/corpus/corpus.jsonl --split test --rounds 3 --out controller_ab.json

Both revisions (``--after`` defaults to ``HEAD``) are checked out into temporary git worktrees,
so editing the working tree during the run changes nothing; both run with this interpreter, each
revision's own packages first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_RUN_BENCH = "import sys; from adaptive_spec.cli import main; sys.argv = ['adaptive-spec', *sys.argv[1:]]; main()"


def run_bench(tree: Path, args: argparse.Namespace, out: Path) -> dict:
    """One ``bench`` run of the revision checked out at ``tree``; its JSON."""
    command = [sys.executable, "-c", _RUN_BENCH, "bench", "--prompts", str(args.prompts.resolve()),
               "--configs", args.configs, "--max-new-tokens", str(args.max_new_tokens), "--out", str(out)]
    if args.split:
        command += ["--split", args.split]
    subprocess.run(command, cwd=tree, check=True, env={**os.environ, "PYTHONPATH": str(tree)})
    return json.loads(out.read_text())


def summarise(run: dict) -> dict:
    configs = run["configs"]
    plain = configs["plain"]["tokens_per_s"]
    plain_kinds = configs["plain"].get("by_kind", {})
    return {name: {"tokens_per_s": c["tokens_per_s"], "vs_plain": c["tokens_per_s"] / plain,
                   "vs_plain_by_kind": {kind: k["tokens_per_s"] / plain_kinds[kind]["tokens_per_s"]
                                        for kind, k in c.get("by_kind", {}).items() if kind in plain_kinds},
                   "all_equal_plain": c.get("all_equal_plain", True)} for name, c in configs.items()}


def compare(rounds: list[dict[str, dict]], configs: list[str]) -> dict:
    """Per config: each revision's ratios to plain by round, and after/before per round."""
    out = {}
    for name in configs:
        before = [r["before"][name]["vs_plain"] for r in rounds]
        after = [r["after"][name]["vs_plain"] for r in rounds]
        change = [a / b for a, b in zip(after, before)]
        out[name] = {"before_vs_plain": before, "after_vs_plain": after, "after_over_before": change,
                     "median_after_over_before": statistics.median(change),
                     "range_after_over_before": [min(change), max(change)],
                     "all_equal_plain": all(r[side][name]["all_equal_plain"] for r in rounds for side in r)}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="git revision to compare against")
    parser.add_argument("--after", default="HEAD", help="git revision to compare with it")
    parser.add_argument("--prompts", type=Path, default=ROOT / "benchmarks" / "workloads.jsonl")
    parser.add_argument("--split", default=None, help="only the prompts of this split (e.g. test of the corpus)")
    parser.add_argument("--configs", default="plain,adaptive")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"rounds={args.rounds}: must be >= 1")
    if "plain" not in args.configs.split(","):
        parser.error(f"configs={args.configs!r}: must include plain (every ratio is to plain)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {side: Path(tmp) / side for side in ("before", "after")}
        for side, tree in trees.items():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), getattr(args, side)],
                           check=True)
        try:
            rounds, machine = [], None
            for r in range(args.rounds):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                runs = {}
                for side in order:
                    print(f"round {r + 1}/{args.rounds}: {side}", flush=True)
                    run = run_bench(trees[side], args, Path(tmp) / f"{side}-{r}.json")
                    machine = machine or run.get("machine")
                    runs[side] = summarise(run)
                rounds.append(runs)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    names = args.configs.split(",")
    result = {"before": args.before, "after": args.after, "prompts": str(args.prompts), "split": args.split,
              "max_new_tokens": args.max_new_tokens,
              "machine": machine, "rounds": rounds, "comparison": compare(rounds, names)}
    print(f"{'config':24s} {'before/plain by round':>28s} {'after/plain by round':>28s} {'after/before median [range]':>30s}")
    for name, c in result["comparison"].items():
        before = " ".join(f"{x:.3f}" for x in c["before_vs_plain"])
        after = " ".join(f"{x:.3f}" for x in c["after_vs_plain"])
        lo, hi = c["range_after_over_before"]
        print(f"{name:24s} {before:>28s} {after:>28s} {c['median_after_over_before']:>12.3f} [{lo:.3f}, {hi:.3f}]")
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
