"""Replay a benchmark's greedy outputs through controllers, offline, with in-service step costs.

Greedy output does not depend on the policy, so a `bench --steps` result already holds everything
needed to ask "what would this controller have done on the same stream?": the prompts' tokens,
the tokens plain decoding produced, and what every verify length cost in service (the step
records of all configs). This script drives the real policy objects over those outputs, with the
real n-gram drafter and the engine's match gate and shadow drafting, charging each step the median
in-service cost of its verify length. No model forward runs, so a stream that takes 13 minutes to
benchmark replays in seconds: the tool for trying controller changes before paying for a run.

What it leaves out: model drafters (no int8: its drafts need its forwards), timing noise, and the
spikes of cold kernels. Its figures are predictions, checked against the next real run.

    python benchmarks/replay.py benchmarks/results/shift.json benchmarks/shift.jsonl
    python benchmarks/replay.py benchmarks/results/workloads.json benchmarks/workloads.jsonl \
        --configs plain,static:ngram:2,adaptive,adaptive:match_lift_weight=1e12 --out replay.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adaptive_spec.bench import _option, load_prompts, parse_config  # noqa: E402
from adaptive_spec.config import GenerationConfig  # noqa: E402
from adaptive_spec.decoder import SpeculativeDecoder, ShadowDrafts  # noqa: E402
from adaptive_spec.drafters import NgramDrafter  # noqa: E402
from adaptive_spec.errors import InvalidParameterError  # noqa: E402
from adaptive_spec.models import load_model  # noqa: E402
from policies.outcome import PLAIN, StepOutcome  # noqa: E402
from policies.registry import make_policy  # noqa: E402

DEFAULT_CONFIGS = "plain,static:ngram:2,static:ngram:4,static:ngram:8,heuristic:ngram,adaptive"
NGRAM_DRAFT_S = 0.0003  # a lookup, as measured in service (0.2-0.4 ms)


def verify_costs(result: dict) -> list[float]:
    """Median in-service verify seconds by number of drafts verified, over every config's steps;
    lengths never measured take the next shorter measured one."""
    by_length = defaultdict(list)
    fields = result["step_record_fields"]
    proposed_at, verify_at = fields.index("proposed"), fields.index("verify_s")
    for config in result["configs"].values():
        for prompt in config["prompts"]:
            for step in prompt.get("step_records") or ():
                by_length[step[proposed_at]].append(step[verify_at])
    if 0 not in by_length:
        raise SystemExit("the result has no step records: run `adaptive-spec bench` with --steps")
    costs = []
    for n in range(max(by_length) + 1):
        costs.append(statistics.median(by_length[n]) if by_length.get(n) else costs[-1])
    return costs


def warm_steps(costs: list[float]) -> list[StepOutcome]:
    """What the engine's StepCostMemory would hand a cold controller."""
    steps = [StepOutcome(PLAIN, 0, 0, 0, 1, 0.0, costs[0])] * 4
    for n in (1, 2, 4, 8, 16):
        if n < len(costs):
            steps += [StepOutcome("ngram", n, n, 0, 1, NGRAM_DRAFT_S, costs[n])] * 4
    return steps


def replay(policy, requests: list[tuple], costs: list[float], max_new_tokens: int) -> list[dict]:
    """Serve ``requests`` (id, kind, prompt ids, plain output ids, prefill seconds) in order."""
    drafter = NgramDrafter()
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    warm_start = getattr(policy, "warm_start", None)
    if warm_start is not None:
        warm_start(warm_steps(costs))
    gate_for = getattr(policy, "draft_gate", None)
    rows = []
    for rid, kind, prompt, output, prefill_s in requests:
        context, pos, seconds, steps = prompt + [output[0]], 1, prefill_s, 0
        shadow = ShadowDrafts([drafter], policy, cfg)
        if hasattr(policy, "start_request"):
            policy.start_request()
        while pos < len(output):
            action = policy.decide()
            speculate = action.drafter != PLAIN and action.k > 0
            k = min(action.k, max_new_tokens - pos - 1) if speculate else 0
            if k == 0:
                shadow.propose(context)
            gate = gate_for(action.drafter) if gate_for and k > 0 else None
            if gate is not None:  # as the engine: look up to max_k, the gate keeps a prefix
                k = min(max(k, gate.max_k), max_new_tokens - pos - 1)
            proposal = drafter.propose(context, k, cfg, None) if k > 0 else None
            drafts = proposal.tokens[:k] if proposal else []
            skipped = None
            if gate is not None and drafts:
                keep = gate.keep(proposal.match_order, len(drafts), proposal.match_ambiguous)
                skipped = drafts[0] if keep == 0 else None
                drafts, k = drafts[:keep], keep
            accepted = 0
            while accepted < len(drafts) and pos + accepted < len(output) - 1 and drafts[accepted] == output[pos + accepted]:
                accepted += 1
            step_tokens = drafts[:accepted] + [output[pos + accepted]]
            if skipped is not None:
                gate.learn_skipped(proposal.match_order, skipped == step_tokens[-1], proposal.match_ambiguous)
            context += step_tokens
            pos += len(step_tokens)
            shadow.resolve(context, action.drafter if drafts else None)
            draft_s = NGRAM_DRAFT_S if speculate else 0.0
            verify_s = costs[min(len(drafts), len(costs) - 1)]
            seconds += draft_s + verify_s
            steps += 1
            policy.observe(StepOutcome(
                action.drafter if speculate else PLAIN, k if speculate else 0, len(drafts), accepted,
                len(step_tokens), draft_s, verify_s, len(context),
                match_order=proposal.match_order if drafts else None,
                match_ambiguous=bool(proposal and proposal.match_ambiguous)))
        rows.append({"id": rid, "kind": kind, "new_tokens": len(output), "seconds": seconds, "steps": steps})
    return rows


def aggregate(rows: list[dict]) -> dict:
    tokens, seconds = sum(r["new_tokens"] for r in rows), sum(r["seconds"] for r in rows)
    out = {"tokens_per_s": tokens / seconds, "seconds": seconds, "by_kind": {}}
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        out["by_kind"][kind] = sum(r["new_tokens"] for r in mine) / sum(r["seconds"] for r in mine)
    return out


def make_replay_policy(name: str):
    """The bench config's policy; ``adaptive`` chooses among the n-gram drafter alone here."""
    config = parse_config(name)  # raises on a bad name
    if name.split(":")[0] == "adaptive":
        options = dict(_option(o, name) for o in name.partition(":")[2].split("+") if o)
        return make_policy("adaptive", ["ngram"], **options)
    if config.peer or any(d not in ("ngram", "none") for d in config.drafters):
        raise InvalidParameterError("configs", name, "cannot be replayed: only engine configs drafting with ngram can")
    return config.make_policy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a `bench --steps` result JSON (it must include `plain`)")
    parser.add_argument("prompts", type=Path, help="the prompts file that result was run on")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated bench configs (n-gram only)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()

    for name in ("result", "prompts"):
        if not getattr(args, name).is_file():
            parser.error(f"{name}={str(getattr(args, name))!r}: file not found")
    try:
        result = json.loads(args.result.read_text())
        plain_rows = result["configs"]["plain"]["prompts"]
    except (ValueError, KeyError, TypeError) as exc:
        parser.error(f"result={str(args.result)!r}: not a `bench` result with a `plain` config ({exc!r})")
    costs = verify_costs(result)
    decoder = SpeculativeDecoder(load_model(result["model"]))  # only its tokenizer and chat template
    prompts = {p.id: p.prompt for p in load_prompts(args.prompts)}
    missing = sorted({r["id"] for r in plain_rows} - set(prompts))
    if missing:
        parser.error(f"prompts={str(args.prompts)!r}: lacks the result's prompt ids {missing[:5]}")
    requests = [(r["id"], r["kind"], decoder.encode_prompt(prompts[r["id"]]), r["token_ids"], r.get("prefill_s") or 0.0)
                for r in plain_rows]

    replayed = {}
    for name in args.configs.split(","):
        try:
            policy = make_replay_policy(name)
        except (InvalidParameterError, ValueError) as exc:
            parser.error(str(exc))
        replayed[name] = aggregate(replay(policy, requests, costs, result["max_new_tokens"]))

    statics = [a["tokens_per_s"] for n, a in replayed.items() if n.startswith("static:")]
    best = max(statics) if statics else None
    kinds = sorted(next(iter(replayed.values()))["by_kind"])
    print(f"{'config':44s} {'tok/s':>7s} {'vs best static':>15s}  " + "  ".join(f"{k:>8s}" for k in kinds))
    for name, agg in replayed.items():
        ratio = f"{agg['tokens_per_s'] / best:.3f}" if best else "-"
        print(f"{name:44s} {agg['tokens_per_s']:7.2f} {ratio:>15s}  " + "  ".join(f"{agg['by_kind'][k]:8.1f}" for k in kinds))
    if args.out:
        args.out.write_text(json.dumps({"source": str(args.result), "verify_s_by_drafts": costs, "configs": replayed}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
