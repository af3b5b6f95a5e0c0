"""RESULTS.md's suffix-drafter section: the repetitive workload, the public corpus with and without the
drafter, what a lookup costs, and the issue's targets with the figures that decide them."""

from __future__ import annotations

from pathlib import Path

from adaptive_spec.paired import compare, ratio_cell
from benchmarks.bench_sections import bench_section, kinds_of, per_round_of
from benchmarks.results_kit import load, machine_line, provenance, table

REPETITIVE = "suffix_repetitive.json"
CORPUS = "suffix_corpus.json"
LOOKUP = "suffix_lookup.json"
REPETITIVE_FILE = "benchmarks/corpus/repetitive.jsonl"
CORPUS_FILE = "benchmarks/corpus/corpus.jsonl"
TARGET_GAIN = 1.5  # adaptive-suffix over adaptive and over transformers' prompt lookup, repetitive workload

REPETITIVE_WHAT = (
    "One JSON-extraction template over World Factbook country profiles ({prompts}, written by "
    "[`corpus/repetitive.py`](corpus/repetitive.py); public domain), its `test` split, in file order: "
    "`adaptive-suffix` is `adaptive` with the `suffix` drafter available, drafting from the answers to the "
    "prompts before the current one (its history is its own and starts empty every round). {tokens} new "
    "tokens, greedy, {rounds} rounds with the configs' order rotated.")
CORPUS_WHAT = (
    "The public corpus ({prompts}; see [`corpus/README.md`](corpus/README.md)), `test` split: traffic that "
    "does not repeat itself across requests, where the `suffix` drafter must not cost anything. {tokens} new "
    "tokens, greedy, {rounds} rounds with the configs' order rotated.")


def suffix_section(results_dir: Path, dates: dict | None) -> str:
    results_dir = Path(results_dir)
    if not (results_dir / REPETITIVE).exists():
        return ""
    parts = ["## Suffix drafter: drafting from past outputs",
             bench_section(results_dir, REPETITIVE, "Repetitive workload", REPETITIVE_WHAT, dates,
                           REPETITIVE_FILE).replace("## Repetitive workload", "### Repetitive workload")]
    if (results_dir / CORPUS).exists():
        parts.append(bench_section(results_dir, CORPUS, "Non-repetitive traffic", CORPUS_WHAT, dates, CORPUS_FILE)
                     .replace("## Non-repetitive traffic", "### Non-repetitive traffic"))
    parts += ["### Targets", targets(results_dir)]
    if (results_dir / LOOKUP).exists():
        parts += ["### What a lookup costs", lookup_table(results_dir, dates)]
    return "\n\n".join(parts)


def targets(results_dir: Path) -> str:
    """Each target, its paired figure and whether it is met (**missed** in bold)."""
    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    rows = []
    data = load(results_dir, REPETITIVE)
    block = per_round_of(data)
    for against in ("adaptive", "hf-prompt-lookup"):
        c = compare(block, "adaptive-suffix", against, "")
        rows.append([f"repetitive: `adaptive-suffix` / `{against}` >= {TARGET_GAIN}× (median of paired ratios)",
                     ratio_cell(c.to_dict()), met(c.median >= TARGET_GAIN)])
    if (results_dir / CORPUS).exists():
        data = load(results_dir, CORPUS)
        block = per_round_of(data)
        for kind in [None] + kinds_of(data):
            c = compare(block, "adaptive-suffix", "adaptive", "", kind)
            rows.append([f"non-repetitive, {kind or 'all'}: `adaptive-suffix` / `adaptive` interval includes or "
                         "exceeds 1.0", ratio_cell(c.to_dict()), met(c.high is not None and c.high >= 1.0)])
    return table(["target", "measured", "met"], rows)


def lookup_table(results_dir: Path, dates: dict | None) -> str:
    data = load(results_dir, LOOKUP)
    rows = []
    for r in data["rows"]:
        t, w = r["typical"], r["most_frequent_2gram"]
        rows.append([f"{r['history_tokens']:,}", f"{r['memory_bytes'] / 1e6:.1f}",
                     f"{t['median_ms']:.3f} / {t['p99_ms']:.3f} / {t['max_ms']:.3f}",
                     f"{w['median_ms']:.3f} / {w['p99_ms']:.3f} / {w['max_ms']:.3f}"])
    what = (f"`SuffixDrafter.draft` on a {data['context_tokens']}-token context (its own match included) against a "
            "history of Factbook text tokenized by the embedded model; contexts from the same text, and contexts "
            "ending in the history's most frequent 2-gram (the most candidates a lookup starts from).")
    command = ".venv/bin/python -m benchmarks.suffix_lookup --out benchmarks/results/suffix_lookup.json"
    return "\n\n".join([what, table(["history tokens", "memory MB", "typical: median / p99 / max ms",
                                     "most frequent 2-gram: median / p99 / max ms"], rows),
                        provenance(results_dir, [LOOKUP], dates, command, machine_line(data))])
