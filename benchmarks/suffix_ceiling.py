"""The most any controller could gain from a set of drafters on a workload: a hindsight ceiling.

A greedy output is fixed before it is decoded: plain decoding writes it, and every lossless
speculative run writes the same tokens. So at each position of it the context is known, every
drafter's proposal there is known, and so is how many of its tokens the target would accept. This
runs the real drafters at every position of the real outputs (the ``suffix`` drafter's history
filled with the earlier prompts' outputs, in file order, as in ``bench``), prices each choice with the
profile's fitted costs (verify by width and context, a model drafter's tokens, prefill; the prefill
emits the first token, as in the engine, so steps start at the second), and finds the cheapest
sequence of steps by dynamic programming: the time a controller that knew every
outcome in advance would take. No controller does better with these drafters at these costs; the
ceiling of one drafter set over another's bounds what adding drafters can buy on the workload.

    python -m benchmarks.suffix_ceiling --prompts benchmarks/corpus/repetitive.jsonl --split test \\
        --max-new-tokens 96 --out benchmarks/results/suffix_ceiling.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

# the sets compared: what `bench`'s `adaptive` chooses among, and `adaptive-suffix`; lookups alone too
SETS = {"ngram": ("ngram",), "adaptive": ("ngram", "int8"), "ngram+suffix": ("ngram", "suffix"),
        "adaptive-suffix": ("ngram", "int8", "suffix")}
LOOKUPS = ("ngram", "suffix")  # drafters priced at their measured seconds per call (no per-token cost)
FIRST_STEP = 1  # the prefill emits output[0]; decoding steps (and drafts) start at position 1


@dataclass(frozen=True)
class Step:
    """One choice at a position: verify ``k`` drafted tokens, emitting ``emitted`` tokens for ``seconds``."""
    k: int
    emitted: int
    seconds: float


def accepted(draft: Sequence[int], truth: Sequence[int]) -> int:
    """How many leading tokens of ``draft`` greedy verification keeps against the output ``truth``.

    >>> accepted([5, 6, 7], [5, 6, 9, 9])
    2
    """
    n = 0
    for d, t in zip(draft, truth):
        if d != t:
            break
        n += 1
    return n


def cheapest(options: Sequence[Sequence[Step]]) -> tuple[float, list[int]]:
    """The least total seconds to emit every token, choosing one step at each position reached, and
    the positions where steps start. ``options[i]`` are the steps possible at position ``i``; each
    emits at least one token and must not run past the end.

    >>> plain = Step(0, 1, 1.0)
    >>> cheapest([[plain, Step(2, 3, 1.5)], [plain], [plain]])
    (1.5, [0])
    """
    n = len(options)
    best = [0.0] * (n + 1)
    choice = [0] * (n + 1)
    for i in range(n - 1, -1, -1):  # best[i]: least seconds from position i to the end
        costs = []
        for j, s in enumerate(options[i]):
            if not 1 <= s.emitted <= n - i:
                raise ValueError(f"options[{i}][{j}] emits {s.emitted} tokens with {n - i} left")
            costs.append(s.seconds + best[i + s.emitted])
        if not costs:
            raise ValueError(f"options[{i}] is empty: every position needs at least the plain step")
        choice[i] = min(range(len(costs)), key=costs.__getitem__)
        best[i] = costs[choice[i]]
    path, i = [], 0
    while i < n:
        path.append(i)
        i += options[i][choice[i]].emitted
    return best[0], path


def position_steps(output: Sequence[int], i: int, drafts: dict[str, list[int]], drafters: Sequence[str],
                   price: Callable[[str, int], float]) -> list[Step]:
    """Every step possible at position ``i``: plain, and each drafter's draft cut to any length.
    ``price(drafter, k)`` is a step's seconds (``""`` with ``k = 0`` for plain)."""
    left = len(output) - i
    steps = [Step(0, 1, price("", 0))]
    for name in drafters:
        draft = drafts[name]
        for k in range(1, len(draft) + 1):
            steps.append(Step(k, min(accepted(draft[:k], output[i:]) + 1, left), price(name, k)))
    return steps


def request_ceiling(output: list[int], all_drafts: list[dict[str, list[int]]], drafters: Sequence[str],
                    price_at: Callable[[int], Callable[[str, int], float]]) -> dict:
    """The ceiling for one request: ``all_drafts[i]`` are the proposals at position ``i``,
    ``price_at(i)`` prices steps there (context grows with ``i``). The first token is the prefill's
    (its last position's logits), as in the engine: steps start at position 1."""
    options = [position_steps(output, i, all_drafts[i], drafters, price_at(i)) for i in range(FIRST_STEP, len(output))]
    seconds, path = cheapest(options)
    return {"decode_s": seconds, "steps": len(path)}


def collect(target, rows: list, max_new_tokens: int, max_k: int, progress: Callable[[str], None]) -> list[dict]:
    """Plain outputs and every drafter's proposals at every position, with lookups' measured seconds."""
    from adaptive_spec.config import GenerationConfig
    from adaptive_spec.decoder import SpeculativeDecoder
    from adaptive_spec.drafters import HistoryStore, SuffixDrafter, build_drafter

    decoder = SpeculativeDecoder(target)  # plain: the reference every lossless run equals
    drafters = {"ngram": build_drafter("ngram", target), "int8": build_drafter("int8", target)}
    suffix = SuffixDrafter(HistoryStore()).for_request("")
    greedy = GenerationConfig(max_new_tokens=max_k)
    out = []
    for n, row in enumerate(rows):
        prompt = decoder.encode_prompt(row.prompt)
        output = decoder.generate(prompt, max_new_tokens=max_new_tokens).token_ids
        per_position, lookup_s = [], {name: [] for name in LOOKUPS}
        for i in range(len(output)):
            context = prompt + output[:i]
            drafts = {}
            for name, drafter in (("ngram", drafters["ngram"]), ("suffix", suffix), ("int8", drafters["int8"])):
                start = time.perf_counter()
                drafts[name] = list(drafter.propose(context, max_k, greedy, None).tokens)
                if name in lookup_s:
                    lookup_s[name].append(time.perf_counter() - start)
            per_position.append(drafts)
        suffix.learn(output)  # the next request drafts from this one's answer, as in a service
        out.append({"id": row.id, "prompt_tokens": len(prompt), "output": output, "drafts": per_position,
                    "lookup_s": lookup_s})
        progress(f"[{n + 1}/{len(rows)}] {row.id}: {len(output)} tokens, drafts at every position")
    return out


def ceilings(requests: list[dict], cost) -> dict:
    """Priced plain time and each drafter set's ceiling, per request and in total."""
    lookup_cost = {name: statistics.fmean(s for r in requests for s in r["lookup_s"][name]) for name in LOOKUPS}

    def price_at(context: int) -> Callable[[str, int], float]:
        def price(drafter: str, k: int) -> float:
            draft = lookup_cost[drafter] if drafter in LOOKUPS else cost.draft_s(drafter, k) if drafter else 0.0
            return draft + cost.verify_s(k + 1, context)
        return price

    per_request = []
    for r in requests:
        n, prefill = len(r["output"]), cost.prefill_s(r["prompt_tokens"])
        row = {"id": r["id"], "new_tokens": n, "prefill_s": prefill,
               "plain_s": prefill + sum(cost.verify_s(1, r["prompt_tokens"] + i) for i in range(FIRST_STEP, n))}
        for name, drafters in SETS.items():
            c = request_ceiling(r["output"], r["drafts"], drafters, lambda i: price_at(r["prompt_tokens"] + i))
            row[name] = {"seconds": prefill + c["decode_s"], "steps": c["steps"]}
        per_request.append(row)
    totals = {"plain": sum(r["plain_s"] for r in per_request)}
    totals.update({name: sum(r[name]["seconds"] for r in per_request) for name in SETS})
    return {"lookup_s": lookup_cost, "requests": per_request, "total_s": totals,
            "first_token_right": first_token_right(requests)}


def first_token_right(requests: list[dict]) -> dict:
    """At how many decoding positions (all but the first, which the prefill emits) each drafter's first
    token is the output's, and ``suffix``'s alone."""
    counts = {"positions": 0, "ngram": 0, "int8": 0, "suffix": 0, "suffix_only": 0}
    for r in requests:
        for i, drafts in enumerate(r["drafts"][FIRST_STEP:], start=FIRST_STEP):
            right = {name: bool(drafts[name]) and drafts[name][0] == r["output"][i] for name in ("ngram", "int8", "suffix")}
            counts["positions"] += 1
            for name, ok in right.items():
                counts[name] += ok
            counts["suffix_only"] += right["suffix"] and not (right["ngram"] or right["int8"])
    return counts


def report(result: dict) -> str:
    t = result["total_s"]
    tokens = sum(r["new_tokens"] for r in result["requests"])
    lines = [f"{'drafters':<18} {'seconds':>9} {'tok/s':>7} {'x plain':>8}"]
    for name in ("plain", *SETS):
        lines.append(f"{name:<18} {t[name]:>9.2f} {tokens / t[name]:>7.1f} {t['plain'] / t[name]:>7.2f}x")
    lines.append(f"ceiling of adaptive-suffix over adaptive: {t['adaptive'] / t['adaptive-suffix']:.2f}x; "
                 f"ngram+suffix over ngram: {t['ngram'] / t['ngram+suffix']:.2f}x")
    return "\n".join(lines)


def measured_speedups(bench: dict, ids: list[str], configs: Sequence[str]) -> dict[str, list[float]]:
    """Per prompt of ``ids``, each config's speed over plain in a ``bench`` result: plain's seconds over
    the config's, round by round, the median of the rounds."""
    block = bench["per_round"]
    where = {pid: i for i, pid in enumerate(block["prompt_ids"])}
    missing = [pid for pid in ids if pid not in where]
    if missing:
        raise ValueError(f"the measured run has no prompt {missing[0]!r}: it ran other prompts")
    seconds = block["configs"]
    return {c: [statistics.median(p / s for p, s in zip(seconds["plain"]["seconds"][where[pid]], seconds[c]["seconds"][where[pid]]))
                for pid in ids] for c in configs}


def plot(result: dict, bench: dict, path: Path) -> None:
    """Per prompt, each controller's measured speed over plain beside its ceiling's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = ("adaptive", "adaptive-suffix")
    ids = [r["id"] for r in result["requests"]]
    measured = measured_speedups(bench, ids, configs)
    fig, axis = plt.subplots(figsize=(9, 4.5))
    x = range(len(ids))
    for config, color, shift in zip(configs, ("tab:gray", "tab:blue"), (-0.15, 0.15)):
        ceiling = [r["plain_s"] / r[config]["seconds"] for r in result["requests"]]
        xs = [i + shift for i in x]
        axis.bar(xs, ceiling, width=0.3, color=color, alpha=0.3, label=f"{config}: ceiling")
        axis.plot(xs, measured[config], "o", color=color, label=f"{config}: measured (median of rounds)")
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_xticks(list(x), [i.split("-")[-1] for i in ids], fontsize=8)
    axis.set(xlabel="prompt (in stream order)", ylabel="speed over plain decoding",
             title="Measured speed against the hindsight ceiling, per prompt")
    top = max(max(max(measured[c]), *(r["plain_s"] / r[c]["seconds"] for r in result["requests"])) for c in configs)
    axis.set_ylim(0, top * 1.3)  # headroom: the legend sits above the bars and points
    axis.legend(loc="upper left", fontsize=8, ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def machine_record() -> dict:
    import torch
    import transformers

    return {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "platform": platform.platform()}


DEFAULTS = {"prompts": Path("benchmarks/corpus/repetitive.jsonl"), "split": "test", "max_new_tokens": 96, "max_k": 16}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, help=f"prompts file (default {DEFAULTS['prompts']})")
    parser.add_argument("--split", help="the prompts' split to use ('' for all; default test)")
    parser.add_argument("--max-new-tokens", type=int, help="default 96")
    parser.add_argument("--max-k", type=int, help="longest draft considered (the controller's max_k; default 16)")
    parser.add_argument("--profile", type=Path, default=Path("simulator/profiles/smollm2_cpu.json"),
                        help="calibration profile whose fitted costs price the steps")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here (with every proposal)")
    parser.add_argument("--reprice", type=Path, default=None,
                        help="a JSON this wrote: price its stored proposals with --profile instead of running the model")
    parser.add_argument("--measured", type=Path, default=None,
                        help="a `bench` result on the same prompts (with adaptive and adaptive-suffix): plotted beside the ceilings")
    parser.add_argument("--plot", type=Path, default=None, help="write the per-prompt figure here (needs --measured)")
    args = parser.parse_args(argv)
    given = [f"--{name.replace('_', '-')}" for name in DEFAULTS if getattr(args, name) is not None]
    if args.reprice and given:  # the stored run fixed them: taking them silently would mislabel it
        parser.error(f"--reprice takes the prompts, split and lengths of the file it reads; drop {', '.join(given)}")
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.plot and not args.measured:
        parser.error("--plot needs --measured: the figure sets the measured speeds beside the ceilings")
    bench = None
    if args.measured:
        try:
            bench = json.loads(args.measured.read_text())
            bench["per_round"]["configs"]["adaptive-suffix"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            parser.error(f"--measured {args.measured}: not a `bench` result with adaptive-suffix ({e!r})")
    if args.max_new_tokens < 1 or args.max_k < 1:
        parser.error(f"--max-new-tokens and --max-k must be >= 1, got {args.max_new_tokens}, {args.max_k}")
    from adaptive_spec.errors import InvalidParameterError
    from adaptive_spec.models import load_model
    from adaptive_spec.prompts import load_prompts, select_split
    from simulator.cost_model import fit_cost_model
    from simulator.profile import load_profile

    try:
        cost = fit_cost_model(load_profile(args.profile))
    except (OSError, ValueError) as e:
        parser.error(f"--profile {args.profile}: {e}")
    if "int8" not in cost.draft:  # the only drafter priced per token: its cost must be measured
        parser.error(f"--profile {args.profile}: no draft cost for int8 (calibrate with the int8 drafter)")
    rows = None
    if args.reprice:  # the proposals are stored: price them again (another profile, a changed search)
        try:
            saved = json.loads(args.reprice.read_text())
            requests, machine = saved["collected"], saved["machine"]
            meta = {k: saved[k] for k in ("prompts_file", "split", "max_new_tokens", "max_k")}
        except (OSError, ValueError, KeyError, TypeError) as e:
            parser.error(f"--reprice {args.reprice}: not a JSON written by this benchmark ({e!r})")
        ids = [r["id"] for r in requests]
    else:
        try:
            rows = load_prompts(args.prompts)
            rows = select_split(rows, args.split, str(args.prompts)) if args.split else rows
        except InvalidParameterError as e:
            parser.error(str(e))
        ids = [r.id for r in rows]
    if bench is not None:  # before the long part: a figure that cannot be drawn is known now
        try:
            measured_speedups(bench, ids, ("adaptive", "adaptive-suffix"))
        except (ValueError, KeyError, TypeError) as e:
            parser.error(f"--measured {args.measured}: {e}")
    if rows is not None:
        started = time.monotonic()
        requests = collect(load_model("smollm2"), rows, args.max_new_tokens, args.max_k,
                           lambda line: print(f"{time.monotonic() - started:6.0f}s {line}", file=sys.stderr, flush=True))
        meta = {"prompts_file": str(args.prompts), "split": args.split, "max_new_tokens": args.max_new_tokens,
                "max_k": args.max_k}
        machine = machine_record()
    result = ceilings(requests, cost)
    print(report(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "benchmark": "suffix_ceiling", **meta, "profile": str(args.profile),
            "sets": {k: list(v) for k, v in SETS.items()}, **result, "machine": machine, "collected": requests}))
    if args.plot:
        plot(result, bench, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
