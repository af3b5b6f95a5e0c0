"""RESULTS.md's suffix-drafter section: the repetitive workloads, the public corpus with and without the
drafter, what a lookup costs, and the issue's targets with the figures that decide them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from adaptive_spec.paired import compare, ratio_cell
from benchmarks.bench_sections import bench_section, kinds_of, per_round_of
from benchmarks.results_kit import load, machine_line, provenance, ratio, table
from benchmarks.suffix_ceiling import measured_speedups

CORPUS = "suffix_corpus.json"
LOOKUP = "suffix_lookup.json"
SIMULATED = "suffix_simulated.json"
SIMULATED_SCENARIO = "simulator/scenarios/smollm2_cpu_code_template.yaml"
CORPUS_FILE = "benchmarks/corpus/corpus.jsonl"
TARGET_GAIN = 1.5  # adaptive-suffix over adaptive and over transformers' prompt lookup, repetitive workload

STREAM = (
    "[`corpus/repetitive.py`](corpus/repetitive.py); public domain), its `test` split, in file order: "
    "`adaptive-suffix` is `adaptive` with the `suffix` drafter available, drafting from the answers to the "
    "prompts before the current one (its history is its own and starts empty every round). {tokens} new "
    "tokens, greedy, {rounds} rounds with the configs' order rotated.")


@dataclass(frozen=True)
class Workload:
    """A repetitive workload's results: the measured run, its hindsight ceiling and figure."""
    name: str  # as the targets and the README name it
    bench: str
    ceiling: str
    plot: str
    prompts: str
    what: str


WORKLOADS = (
    Workload("repetitive JSON extraction", "suffix_repetitive.json", "suffix_ceiling.json", "suffix_ceiling.png",
             "benchmarks/corpus/repetitive.jsonl",
             "One JSON-extraction template, its nine keys listed in the prompt, over World Factbook country "
             "profiles ({prompts}, written by " + STREAM),
    Workload("repetitive code generation", "suffix_repetitive_code.json", "suffix_ceiling_code.json",
             "suffix_ceiling_code.png", "benchmarks/corpus/repetitive_code.jsonl",
             "One code-generation template (a Python class for the country, with a method returning its facts "
             "as a dictionary; no code in the prompt), chosen among ten on other profiles for how much of the "
             "answers a `suffix` drafter could draft from earlier ones "
             "([`corpus/README.md`](corpus/README.md#repetitive-workloads)), over World Factbook country "
             "profiles ({prompts}, written by " + STREAM),
)
CORPUS_WHAT = (
    "The public corpus ({prompts}; see [`corpus/README.md`](corpus/README.md)), `test` split: traffic that "
    "does not repeat itself across requests, where the `suffix` drafter must not cost anything. {tokens} new "
    "tokens, greedy, {rounds} rounds with the configs' order rotated.")


def present(results_dir: Path) -> list[Workload]:
    return [w for w in WORKLOADS if (Path(results_dir) / w.bench).exists()]


def suffix_section(results_dir: Path, dates: dict | None) -> str:
    results_dir = Path(results_dir)
    workloads = present(results_dir)
    if not workloads:
        return ""
    parts = ["## Suffix drafter: drafting from past outputs"]
    for w in workloads:
        title = w.name[0].upper() + w.name[1:]
        parts.append(bench_section(results_dir, w.bench, title, w.what, dates, w.prompts)
                     .replace(f"## {title}", f"### {title}"))
    if (results_dir / CORPUS).exists():
        parts.append(bench_section(results_dir, CORPUS, "Non-repetitive traffic", CORPUS_WHAT, dates, CORPUS_FILE)
                     .replace("## Non-repetitive traffic", "### Non-repetitive traffic"))
    parts += ["### Targets", targets(results_dir)]
    for w in workloads:
        if (results_dir / w.ceiling).exists():
            parts += [f"### The most any controller could gain: {w.name}", ceiling_table(results_dir, w, dates)]
    if (results_dir / SIMULATED).exists():
        parts += ["### The simulator with the suffix drafter", simulated_table(results_dir, dates)]
    if (results_dir / LOOKUP).exists():
        parts += ["### What a lookup costs", lookup_table(results_dir, dates)]
    return "\n\n".join(parts)


def targets(results_dir: Path) -> str:
    """Each target, its paired figure and whether it is met (**missed** in bold)."""
    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    rows = []
    for w in present(results_dir):
        block = per_round_of(load(results_dir, w.bench))
        for against in ("adaptive", "hf-prompt-lookup"):
            c = compare(block, "adaptive-suffix", against, "")
            rows.append([f"{w.name}: `adaptive-suffix` / `{against}` >= {TARGET_GAIN}× (median of paired ratios)",
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


def ceiling_table(results_dir: Path, w: Workload, dates: dict | None) -> str:
    """The hindsight ceiling of each drafter set (``benchmarks/suffix_ceiling.py``) beside the measured gain."""
    data = load(results_dir, w.ceiling)
    t, requests = data["total_s"], data["requests"]
    tokens = sum(r["new_tokens"] for r in requests)
    rows = [["`plain`", "-", f"{t['plain']:.1f}", f"{tokens / t['plain']:.1f}", "1.00×", "-"]]
    for name, drafters in data["sets"].items():
        steps = sum(r[name]["steps"] for r in requests)
        rows.append([f"`{name}`", ", ".join(drafters), f"{t[name]:.1f}", f"{tokens / t[name]:.1f}",
                     ratio(t["plain"], t[name]), f"{steps:,}"])
    what = (f"The {data['split'] or 'whole'} split of `{data['prompts_file']}` ({len(requests)} prompts, {tokens:,} "
            f"output tokens at up to {data['max_new_tokens']}). A greedy output is fixed before it is decoded, so "
            "every drafter's proposal at every position of it, and what the target would accept of it, can be "
            "computed in advance: the real drafters propose up to "
            f"{data['max_k']} tokens at every position (`suffix` drafting from the earlier prompts' outputs, as in "
            f"the measured run), each choice is priced by the fitted costs of the profile `{data['profile']}` (verify by width and context, "
            "`int8` per drafted token, prefill, which emits the first token; lookups at their measured seconds per "
            "call), and dynamic "
            "programming finds the cheapest sequence of steps: what a controller that knew every outcome in "
            "advance would take. No controller does better with these drafters at these costs.")
    ceiling_gain = t["adaptive"] / t["adaptive-suffix"]
    bench = load(results_dir, w.bench)
    speed = {name: c["tokens_per_s"] / bench["configs"]["plain"]["tokens_per_s"] for name, c in bench["configs"].items()}
    same = sum(p["token_ids"] == r["output"] for p, r in zip(bench["configs"]["plain"]["prompts"], data["collected"]))
    right = data["first_token_right"]
    share = {name: speed[name] / (t["plain"] / t[name]) for name in ("adaptive", "adaptive-suffix")}
    needed = TARGET_GAIN * speed["adaptive"]
    per_prompt = measured_speedups(bench, [r["id"] for r in requests], ("adaptive", "adaptive-suffix"))
    behind = [r["id"] for r, a, s in zip(requests, per_prompt["adaptive"], per_prompt["adaptive-suffix"]) if s < a]
    above = [r["id"] for r, s in zip(requests, per_prompt["adaptive-suffix"])
             if s > r["plain_s"] / r["adaptive-suffix"]["seconds"]]
    plain_tps = bench["configs"]["plain"]["tokens_per_s"]
    measured_steps = [(p["seconds"] - p["prefill_s"], p["steps"]) for p in bench["configs"]["adaptive-suffix"]["prompts"]]
    priced_steps = [(r["adaptive-suffix"]["seconds"] - r["prefill_s"], r["adaptive-suffix"]["steps"]) for r in requests]
    gain = "\n".join([
        f"- The outputs are the measured run's: {same} of {len(requests)} equal its `plain` outputs token for token.",
        f"- Ceiling of `adaptive-suffix` over `adaptive`: **{ceiling_gain:.2f}×** (each with a perfect controller).",
        f"- Measured: `adaptive` at {speed['adaptive']:.2f}× plain is {share['adaptive']:.0%} of its ceiling; "
        f"`adaptive-suffix` at {speed['adaptive-suffix']:.2f}× is {share['adaptive-suffix']:.0%} of its own.",
        f"- {TARGET_GAIN}× the measured `adaptive` is {needed:.2f}× plain: "
        f"{needed / (t['plain'] / t['adaptive-suffix']):.0%} of `adaptive-suffix`'s ceiling.",
        f"- Of the {right['positions']:,} positions, the first drafted token is right at {right['suffix']:,} for "
        f"`suffix`, {right['ngram']:,} for `ngram` and {right['int8']:,} for `int8`. `suffix` is right where "
        f"neither of the others is at {right['suffix_only']:,} ({right['suffix_only'] / right['suffix']:.0%} of its "
        "right first tokens); the rest the others propose too, but `int8` at a forward of its own per "
        "drafted token, a lookup at no cost per token.",
        f"- Per prompt (the figure, median of rounds), `adaptive-suffix` is behind `adaptive` on {len(behind)} of "
        f"{len(requests)}" + (f": {', '.join(f'`{i}`' for i in behind)}." if behind else "."),
        *([f"- `adaptive-suffix` measured above its ceiling on {len(above)} of {len(requests)} prompts: the ceiling "
           "is priced with the profile's fitted costs, not the run's own timings. `plain` ran at "
           f"{plain_tps:.1f} tok/s in the run, {tokens / t['plain']:.1f} priced; an `adaptive-suffix` step took "
           f"{1e3 * step_s(measured_steps):.0f} ms in the run and {1e3 * step_s(priced_steps):.0f} ms on the "
           "ceiling's path (mean over the prompts' decoding steps)."] if above else [])])
    command = (f".venv/bin/python -m benchmarks.suffix_ceiling --prompts {data['prompts_file']} --split {data['split']} "
               f"--max-new-tokens {data['max_new_tokens']} --profile {data['profile']} --out benchmarks/results/{w.ceiling} \\\n"
               f"  --measured benchmarks/results/{w.bench} --plot benchmarks/results/{w.plot}\n"
               f"# price the stored proposals again, with another profile:\n"
               f".venv/bin/python -m benchmarks.suffix_ceiling --reprice benchmarks/results/{w.ceiling} --profile <profile.json>")
    figure = (f"![measured speed against the ceiling, per prompt](results/{w.plot})"
              if (results_dir / w.plot).exists() else "")
    parts = [what, table(["drafters", "may use", "seconds (priced)", "tok/s", "× plain", "steps"], rows), gain, figure,
             provenance(results_dir, [w.ceiling], dates, command, machine_line(data))]
    return "\n\n".join(p for p in parts if p)


def simulated_table(results_dir: Path, dates: dict | None) -> str:
    """``simulate compare`` on the code-template scenario: the suffix drafter's acceptance per class,
    as calibrate measured it, driving the simulator's policies."""
    runs = load(results_dir, SIMULATED)
    rows = []
    for run in runs:
        summary = run["summary"]
        e2e, tpot = summary["e2e_s"], summary["tpot_s"]
        rows.append([f"`{run['policy']}`", f"{e2e['p50']:.2f} / {e2e['p95']:.2f}", f"{1e3 * tpot['p50']:.1f}",
                     f"{summary['acceptance']['tokens_per_step']:.2f}", f"{summary['slo_attainment']:.1%}"])
    first = runs[0]
    what = (f"The scenario [`{SIMULATED_SCENARIO}`](../{SIMULATED_SCENARIO}) (`{first['scenario']}`, seed "
            f"{first['seed']}): one endpoint serving the code template at a steady rate, on the profile that "
            "`calibrate` measured on the workload's `dev` split with `ngram`, `int8` and `suffix` (command in the "
            "scenario file). The profile holds `suffix`'s acceptance for the class and by kind of match, as "
            "for `ngram`, so the controller's match gate prices its drafts; it is an average over a history "
            "filling from empty, which a simulated request does not see grow.")
    command = f".venv/bin/adaptive-spec simulate compare {SIMULATED_SCENARIO} --json benchmarks/results/{SIMULATED}"
    return "\n\n".join([what, table(["policy", "E2E p50 / p95 s", "TPOT p50 ms", "tokens per step", "SLO attainment"],
                                     rows), provenance(results_dir, [SIMULATED], dates, command, "the simulator (no model; seeded, the same on any machine)")])


def step_s(runs: list[tuple[float, int]]) -> float:
    """Mean seconds per decoding step over ``(seconds, steps)`` pairs."""
    return sum(seconds for seconds, _ in runs) / max(1, sum(steps for _, steps in runs))
