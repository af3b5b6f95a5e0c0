"""The RESULTS.md sections for ``adaptive-spec bench`` files: tokens/s per config and kind, the
``adaptive`` comparison, paired ratios with bootstrap intervals, and the public corpus run with its
targets (definitions in ``benchmarks/make_results.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from adaptive_spec.paired import NO_DIFFERENCE, compare, ratio_cell, speeds
from benchmarks.results_kit import (PROMPTS, load, machine_line, provenance, ratio, table)

def kinds_of(data: dict) -> list[str]:
    return list(data["configs"]["plain"]["by_kind"])


def column(data: dict, config: str, kind: str | None) -> float:
    """tokens/s of a config over all prompts (kind None) or over the prompts of one kind."""
    entry = data["configs"][config]
    return entry["tokens_per_s"] if kind is None else entry["by_kind"][kind]["tokens_per_s"]


def bench_table(data: dict) -> str:
    """One row per config: tokens/s (× plain) per column, acceptance, outputs equal to plain."""
    kinds = kinds_of(data)
    plain = data["configs"]["plain"]
    counts = {k: plain["by_kind"][k]["prompts"] for k in kinds}
    header = ["config", f"all ({len(plain['prompts'])})"] + [f"{k} ({counts[k]})" for k in kinds]
    rows = []
    for name, entry in data["configs"].items():
        cells = [f"`{name}`"]
        for kind in [None] + kinds:
            speed = column(data, name, kind)
            cells.append(f"{speed:.1f} ({ratio(speed, column(data, 'plain', kind))})")
        acceptance = entry.get("acceptance_rate")
        cells.append("-" if acceptance is None else f"{acceptance:.2f}")
        equal = sum(1 for p in entry["prompts"] if p.get("equals_plain"))
        cells.append(f"{equal}/{len(entry['prompts'])}")
        rows.append(cells)
    return table(header + ["acceptance", "equal to plain"], rows)


def best(data: dict, kind: str | None, fixed: bool) -> tuple[str, float]:
    """The fastest fixed config (plain or static:*) or the fastest transformers config (hf-*)."""
    if fixed:
        names = [n for n in data["configs"] if n == "plain" or n.startswith("static:")]
    else:
        names = [n for n in data["configs"] if n.startswith("hf-")]
    name = max(names, key=lambda n: column(data, n, kind))
    return name, column(data, name, kind)


def adaptive_rows(data: dict) -> list[dict]:
    """Per column: adaptive's tokens/s and its ratios to plain, the best fixed and the best transformers config."""
    rows = []
    for kind in [None] + kinds_of(data):
        speed = column(data, "adaptive", kind)
        fixed_name, fixed = best(data, kind, fixed=True)
        peer_name, peer = best(data, kind, fixed=False)
        rows.append({"kind": kind or "all", "adaptive": speed, "vs_plain": speed / column(data, "plain", kind),
                     "fixed_name": fixed_name, "fixed": fixed, "vs_fixed": speed / fixed,
                     "peer_name": peer_name, "peer": peer, "vs_peer": speed / peer})
    return rows


def adaptive_table(data: dict) -> str:
    block = per_round_of(data)
    rows = []
    for r in adaptive_rows(data):
        row = [r["kind"], f"{r['adaptive']:.1f}", f"{r['vs_plain']:.2f}×", f"`{r['fixed_name']}` {r['fixed']:.1f}",
               f"**{r['vs_fixed']:.2f}×**", f"`{r['peer_name']}` {r['peer']:.1f}", f"{r['vs_peer']:.2f}×"]
        if block is not None:  # the same comparisons, paired, with their intervals
            kind = None if r["kind"] == "all" else r["kind"]
            row += [ratio_cell(compare(block, "adaptive", against, "", kind).to_dict())
                    for against in ("plain", r["fixed_name"], r["peer_name"])]
        rows.append(row)
    header = ["prompts", "`adaptive` tok/s", "× plain", "best fixed config", "× it", "best transformers config", "× it"]
    if block is not None:
        header += ["paired × plain, 95% CI", "paired × best fixed", "paired × best transformers"]
    return table(header, rows)


# --- paired ratios with intervals, from every round's figures --------------------------------------

PAIRED = ("Paired ratios against `plain`: for each (round, prompt) a config's tokens/s over plain's on the "
          "same prompt in the same round; the median of those ratios and its 95% bootstrap interval "
          "(prompts, within kind, and rounds resampled; `adaptive_spec/paired.py`). An interval that spans "
          f"1.0 reads *{NO_DIFFERENCE}*. The noise floor is `plain` against `hf-plain`, the same work: its "
          "interval shows how large a difference noise alone produces here.")
LEGACY_ROUNDS = ("This file predates the rotated order (every round ran the configs in the same order, `plain` "
                 "first) and kept each prompt's round seconds (`round_seconds`) but one token count per prompt; "
                 "its intervals are computed from those.")


CORPUS_FILE = "benchmarks/corpus/corpus.jsonl"
CORPUS = ("The public corpus ({prompts}: Spec-Bench's six categories and code editing, see "
          "[`corpus/README.md`](corpus/README.md)), its `test` split only, which no default was tuned on; "
          "{tokens} new tokens, greedy, {rounds} rounds with the configs' order rotated, one long-lived "
          "controller per config.")
# the targets for the published measurement (issue 16)
TARGET_VS_PLAIN_LOW = 0.97  # lower end of adaptive / plain's interval, in every kind


def corpus_section(results_dir: Path, dates: dict | None, name: str = "corpus_test.json") -> str:
    """The published measurement on the corpus's test split, when its file exists, with the targets."""
    if not (Path(results_dir) / name).exists():
        return ""
    data = load(results_dir, name)
    section = bench_section(results_dir, name, "Public corpus, test split", CORPUS, dates, CORPUS_FILE)
    block = per_round_of(data)
    if block is None or "adaptive" not in data["configs"]:
        return section
    section += "\n\nTargets:\n\n" + targets_table(data, block)
    missed = [k for k in kinds_of(data) if not _vs_plain_met(compare(block, "adaptive", "plain", "", k))]
    return section + "".join("\n\n" + miss_explanation(data, block, kind) for kind in missed)


def _vs_plain_met(c) -> bool:
    return c.low is not None and c.low >= TARGET_VS_PLAIN_LOW


def miss_explanation(data: dict, block: dict, kind: str) -> str:
    """Why ``adaptive`` / ``plain`` misses its target on ``kind``, from the figures: each prompt's
    median ratio over rounds, then the step records of the lowest prompt's recorded run, with the
    time its verified drafts cost beyond a plain step's (what rejected drafts took from it)."""
    rows = [i for i, k in enumerate(block["kinds"]) if k == kind]
    ratios = speeds(block, "adaptive") / speeds(block, "plain")
    tokens = block["configs"]["plain"]["new_tokens"]
    medians = {block["prompt_ids"][i]: float(np.median(ratios[i])) for i in rows}
    listed = ", ".join(f"`{pid}` {m:.2f}× ({tokens[i][0]} tokens)" for (pid, m), i in zip(medians.items(), rows))
    text = (f"Why `adaptive` / `plain` misses on {kind}: the median of each prompt's rounds is {listed}.")
    worst = min(medians, key=medians.get)
    run = next((r for r in data["configs"]["adaptive"]["prompts"] if r["id"] == worst), None)
    if run is None or not run.get("step_records"):
        return text
    fields = data["step_record_fields"]
    steps = [dict(zip(fields, s)) for s in run["step_records"]]
    drafted = [s for s in steps if s["proposed"] > 0]
    plain = [s["verify_s"] for s in steps if s["proposed"] == 0]
    if not drafted or not plain:
        return text
    plain_s = float(np.mean(plain))
    extra = sum(s["verify_s"] + s["draft_s"] - plain_s for s in drafted)
    gained = sum(s["accepted"] for s in drafted) * plain_s  # accepted tokens save a plain step each
    return text + (
        f" In `{worst}`'s recorded run `adaptive` verified {len(drafted)} drafts ({sum(s['proposed'] for s in drafted)} "
        f"tokens, {sum(s['accepted'] for s in drafted)} accepted) in {len(steps)} steps; a step verifying a draft took "
        f"{1e3 * np.mean([s['verify_s'] for s in drafted]):.0f} ms against {1e3 * plain_s:.0f} ms without, so its drafts "
        f"cost {extra:.2f} s beyond plain steps and saved {gained:.2f} s, on a request of {run['seconds']:.2f} s "
        f"({run['new_tokens']} tokens, prefill included). The interval rests on {len(rows)} prompts of "
        f"{ratios.shape[1]} rounds each.")


def targets_table(data: dict, block: dict) -> str:
    """Each target of the published measurement, its figure, and whether it is met (**missed** in bold)."""
    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    rows = []
    for kind in kinds_of(data):
        c = compare(block, "adaptive", "plain", "", kind)
        rows.append([f"`adaptive` / `plain`, {kind}: interval's lower end >= {TARGET_VS_PLAIN_LOW}",
                     ratio_cell(c.to_dict()), met(_vs_plain_met(c))])
    peers = [n for n in data["configs"] if n.startswith("hf-")]
    if peers:
        peer_name, _ = best(data, None, fixed=False)
        c = compare(block, "adaptive", peer_name, "")
        rows.append([f"`adaptive` / best transformers config (`{peer_name}`), all: interval above 1.0",
                     ratio_cell(c.to_dict()), met(c.low is not None and c.low > 1.0)])
    if {"plain", "hf-plain"} <= set(data["configs"]):
        c = compare(block, "plain", "hf-plain", "")
        rows.append(["noise floor `plain` / `hf-plain`, all: interval contains 1.0", ratio_cell(c.to_dict()),
                     met(c.low is not None and c.low <= 1.0 <= c.high)])
    return table(["target", "measured", "met"], rows)


def per_round_of(data: dict) -> dict | None:
    """Every round's figures, [prompt][round] per config: the file's ``per_round`` block, or one
    rebuilt from an older file's ``round_seconds`` (its token count taken as every round's); None
    for a single round (one unit per prompt: no interval over rounds to show)."""
    if "per_round" in data:
        return data["per_round"]
    rows = data["configs"]["plain"]["prompts"]
    if data.get("rounds", 1) < 2 or not all("round_seconds" in r for r in rows):
        return None
    configs = {name: {"seconds": [r["round_seconds"] for r in entry["prompts"]],
                      "new_tokens": [[r["new_tokens"]] * len(r["round_seconds"]) for r in entry["prompts"]]}
               for name, entry in data["configs"].items()}
    return {"prompt_ids": [r["id"] for r in rows], "kinds": [r["kind"] for r in rows], "configs": configs}


def paired_table(data: dict, block: dict) -> str:
    """One row per config: its paired ratio to plain per column; then the noise floor's row."""
    kinds = kinds_of(data)
    columns = [None] + kinds
    header = ["config", "all"] + kinds

    def cells(config: str, against: str) -> list[str]:
        return [ratio_cell(compare(block, config, against, "", kind).to_dict()) for kind in columns]

    rows = [[f"`{name}`"] + cells(name, "plain") for name in data["configs"] if name != "plain"]
    if "hf-plain" in data["configs"]:
        rows.append(["noise floor: `plain` / `hf-plain`"] + cells("plain", "hf-plain"))
    return table(header, rows)


def bench_command(data: dict, name: str, prompts_file: str | None = None) -> str:
    parts = [f".venv/bin/adaptive-spec bench --prompts {prompts_file or PROMPTS[name]}"]
    if data.get("split"):
        parts.append(f"--split {data['split']}")
    parts.append(f"--max-new-tokens {data['max_new_tokens']}")
    if any("step_records" in p for p in data["configs"]["plain"]["prompts"]):
        parts.append("--steps")
    if data.get("rounds", 1) > 1:
        parts.append(f"--rounds {data['rounds']}")
    if data.get("sessions"):  # a run saved to a checkpoint (and resumable from it)
        parts.append(f"--checkpoint benchmarks/results/{Path(name).stem}.ckpt.gz")
    parts.append(f"--out benchmarks/results/{name} \\\n  --configs {','.join(data['configs'])}")
    return " ".join(parts)


def bench_section(results_dir: Path, name: str, title: str, what: str, dates: dict | None,
                  prompts_file: str | None = None) -> str:
    data = load(results_dir, name)
    prompts_file = prompts_file or PROMPTS[name]
    prompts = f"[`{prompts_file}`]({prompts_file.removeprefix('benchmarks/')})"
    parts = [f"## {title}", what.format(tokens=data["max_new_tokens"], prompts=prompts, rounds=data.get("rounds", 1)),
             "Tokens/s (× plain):", bench_table(data)]
    sittings = data.get("sessions") or []
    if len(sittings) > 1:  # say so: the machine's speed may differ between sittings (pairs never span two)
        starts = "; ".join(f"{s['started']} from round {s['from_round'] + 1}, prompt {s['from_prompt'] + 1}"
                           for s in sittings)
        parts[1] += (f" Run in {len(sittings)} sittings, stopped and resumed from its checkpoint with its "
                     f"controllers as they were ({starts}); a paired unit (one prompt of one round) never spans two.")
    block = per_round_of(data)
    if block is not None:
        parts += [PAIRED + ("" if "per_round" in data else " " + LEGACY_ROUNDS), paired_table(data, block)]
    if "adaptive" in data["configs"] and any(n.startswith("hf-") for n in data["configs"]):  # it needs a peer
        parts += ["`adaptive` against the others:", adaptive_table(data)]
    command = bench_command(data, name, prompts_file) + ("\nmake bench   # the same run" if name == "engine.json" else "")
    parts.append(provenance(results_dir, [name], dates, command, machine_line(data)))
    return "\n\n".join(parts)
