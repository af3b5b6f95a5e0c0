"""Replay a benchmark's greedy outputs through controllers, offline, with in-service step costs.

Greedy output does not depend on the policy, so a `bench --steps` result already holds everything
needed to ask "what would this controller have done on the same stream?": the prompts' tokens,
the tokens plain decoding produced, and what every verify length cost in service (the step
records of all configs). This script drives the real policy objects over those outputs, with the
real n-gram drafter and the engine's match gate and shadow drafting, charging each step the median
in-service cost of its verify length. No model forward runs, so a stream that takes 13 minutes to
benchmark replays in seconds: the tool for trying controller changes before paying for a run.

What it leaves out: model drafters (no int8: its drafts need its forwards) and the spikes of cold
kernels. Timing noise is left out by default; ``--draws N`` replays every config N more times with
each step's cost drawn at random from the in-service costs of its verify length and each request
slowed or sped up as a whole by a factor drawn from how the run's requests varied (``CostDraws``),
so that the measured-speed decisions (the never-slower guard) see noise as they do in service, and
reports the median and the worst of each config's ratio to the best static config per kind of
prompt. Its
figures are predictions, checked against the next real run.

    adaptive-spec replay benchmarks/results/shift.json benchmarks/shift.jsonl
    adaptive-spec replay benchmarks/results/workloads.json benchmarks/workloads.jsonl \
        --configs plain,static:ngram:2,adaptive,adaptive+match_lift_weight=1e12 --out replay.json
    adaptive-spec replay benchmarks/results/workloads.json benchmarks/workloads.jsonl --draws 20
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from adaptive_spec.bench import load_prompts, parse_config
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.models import load_model
from adaptive_spec.outputs import output_path, write_json_atomic
from policies.base import Policy
from policies.outcome import PLAIN, StepOutcome
from policies.registry import make_policy, parse_spec
from policies.session import DecodeSession
from policies.shadow import ShadowDrafts

DEFAULT_CONFIGS = "plain,static:ngram:2,static:ngram:4,static:ngram:8,heuristic:ngram,adaptive"
NGRAM_DRAFT_S = 0.0003  # a lookup, as measured in service (0.2-0.4 ms)


def verify_costs(result: dict) -> list[float]:
    """Median in-service verify seconds by number of drafts verified, over every config's steps;
    lengths never measured take the next shorter measured one."""
    return [statistics.median(samples) for samples in verify_samples(result)]


def verify_samples(result: dict) -> list[list[float]]:
    """In-service verify seconds by number of drafts verified, over every config's steps; lengths
    never measured take the samples of the next shorter measured one."""
    by_length = defaultdict(list)
    fields = result["step_record_fields"]
    proposed_at, verify_at = fields.index("proposed"), fields.index("verify_s")
    for config in result["configs"].values():
        for prompt in config["prompts"]:
            for step in prompt.get("step_records") or ():
                by_length[step[proposed_at]].append(step[verify_at])
    if 0 not in by_length:
        raise SystemExit("the result has no step records: run `adaptive-spec bench` with --steps")
    samples = []
    for n in range(max(by_length) + 1):
        samples.append(by_length[n] if by_length.get(n) else samples[-1])
    return samples


def warm_steps(costs: list[float]) -> list[StepOutcome]:
    """What the engine's StepCostMemory would hand a cold controller."""
    steps = [StepOutcome(PLAIN, 0, 0, 0, 1, 0.0, costs[0])] * 4
    for n in (1, 2, 4, 8, 16):
        if n < len(costs):
            steps += [StepOutcome("ngram", n, n, 0, 1, NGRAM_DRAFT_S, costs[n])] * 4
    return steps


def request_slowdowns(result: dict) -> list[float]:
    """How much slower than usual each request of each config ran: the median plain-step
    (no draft) cost of that request over the median over all of them. Noise in service comes in
    spells (another process, a frequency change), not step by step, and the never-slower guard
    judges from a few dozen steps: a request run 10% slow is what turns it off."""
    fields = result["step_record_fields"]
    proposed_at, verify_at = fields.index("proposed"), fields.index("verify_s")
    medians = []
    for config in result["configs"].values():
        for prompt in config["prompts"]:
            plain = [s[verify_at] for s in prompt.get("step_records") or () if s[proposed_at] == 0]
            if len(plain) >= 8:
                medians.append(statistics.median(plain))
    if not medians:  # no request had 8 plain steps to judge by: no spells to draw
        return [1.0]
    overall = statistics.median(medians)
    return [m / overall for m in medians]


class CostDraws:
    """Step costs at random, seeded: each request a slowdown drawn from ``request_slowdowns``, each
    step a cost drawn from the in-service costs of its verify length (pooled over all requests,
    so they hold some of the requests' spread already: the draws are a little noisier than
    service) times the request's slowdown."""

    def __init__(self, samples: list[list[float]], slowdowns: list[float], seed: int) -> None:
        self.samples, self.slowdowns = samples, slowdowns
        self.rng = random.Random(seed)
        # its own stream: the i-th request runs equally slow under every config of one seed, so
        # that the configs' ratios compare policies under the same spells, not the spells
        self.spells = random.Random(seed + 1_000_003)
        self.factor = 1.0

    def new_request(self) -> None:
        self.factor = self.spells.choice(self.slowdowns)

    def __call__(self, length: int) -> float:
        return self.rng.choice(self.samples[length]) * self.factor


def replay(policy: Policy, requests: list[tuple], costs: list[float], max_new_tokens: int,
           draw: Callable[[int], float] | None = None, drafter=None) -> list[dict]:
    """Serve ``requests`` (id, kind, prompt ids, plain output ids, prefill seconds) in order.

    ``drafter`` (default: the n-gram lookup) is anything with a ``name`` and ``lookup(context, k)``
    (``policies.shadow``). Each step costs ``costs[drafts verified]`` (the median), or
    ``draw(drafts verified)`` when given (``draw.new_request()``, if it has one, is called as each
    request starts); the controller's warm start always sees the medians, as the engine's memory
    would."""
    new_request = getattr(draw, "new_request", None)  # a plain callable is a valid draw too
    drafter = drafter if drafter is not None else NgramDrafter()
    warm = warm_steps(costs)
    rows = []
    for rid, kind, prompt, output, prefill_s in requests:
        context, seconds = prompt + [output[0]], prefill_s
        shadow = ShadowDrafts([drafter], policy)
        session = DecodeSession(policy, max_new_tokens, gated={drafter.name}, warm_steps=warm, shadow=shadow)
        if new_request is not None:
            new_request()
        pos = 1
        while pos < len(output):
            plan = session.plan(pos, context)
            tokens, order, ambiguous = drafter.lookup(context, plan.k) if plan.k > 0 else ([], None, False)
            kept = session.cut(plan, len(tokens), order, ambiguous)
            drafts = tokens[:kept]
            accepted = 0
            while accepted < kept and pos + accepted < len(output) - 1 and drafts[accepted] == output[pos + accepted]:
                accepted += 1
            step_tokens = drafts[:accepted] + [output[pos + accepted]]
            context += step_tokens
            pos += len(step_tokens)
            draft_s = NGRAM_DRAFT_S if plan.k > 0 else 0.0
            length = min(kept, len(costs) - 1)
            verify_s = draw(length) if draw is not None else costs[length]
            seconds += draft_s + verify_s
            session.finish(plan, kept, accepted, len(step_tokens), draft_s, verify_s, len(context) - len(step_tokens),
                           first_token_right=bool(tokens) and tokens[0] == step_tokens[-1], match_order=order,
                           match_ambiguous=ambiguous, context=context)
        rows.append({"id": rid, "kind": kind, "new_tokens": len(output), "seconds": seconds, "steps": session.steps})
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
    if parse_spec(name).kind == "adaptive":
        return make_policy(name, ["ngram"])
    if config.peer or any(d not in ("ngram", "none") for d in config.drafters):
        raise InvalidParameterError("configs", name, "cannot be replayed: only engine configs drafting with ngram can")
    return config.make_policy()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="adaptive-spec replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a `bench --steps` result JSON (it must include `plain`)")
    parser.add_argument("prompts", type=Path, help="the prompts file that result was run on")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated bench configs (n-gram only)")
    parser.add_argument("--draws", type=int, default=0,
                        help="also replay this many times with each step's cost drawn from the in-service costs of its length")
    parser.add_argument("--out", type=output_path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    if args.draws < 0:
        parser.error(f"draws={args.draws}: must be >= 0")
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

    names = args.configs.split(",")
    policies = {}
    for name in names:
        try:
            policies[name] = make_replay_policy(name)
        except (InvalidParameterError, ValueError) as exc:
            parser.error(str(exc))
    replayed = {name: aggregate(replay(policy, requests, costs, result["max_new_tokens"]))
                for name, policy in policies.items()}
    print_table(replayed)
    out = {"source": str(args.result), "verify_s_by_drafts": costs, "configs": replayed}
    if args.draws:
        samples, slowdowns = verify_samples(result), request_slowdowns(result)
        runs = []
        for seed in tqdm(range(args.draws), desc="cost draws", unit="draw"):
            # every config of a draw sees the same costs: one seed per (draw, config)
            runs.append({name: aggregate(replay(make_replay_policy(name), requests, costs, result["max_new_tokens"],
                                                CostDraws(samples, slowdowns, seed)))
                         for name in names})
        out["draws"] = summarise_draws(runs)
        print_draws(out["draws"], args.draws)
    if args.out:
        write_json_atomic(args.out, out, "out")
        print(f"wrote {args.out}")


def _best_static(agg_by_name: dict, kind: str | None) -> float | None:
    speeds = [(a["tokens_per_s"] if kind is None else a["by_kind"][kind])
              for n, a in agg_by_name.items() if n.startswith("static:")]
    return max(speeds) if speeds else None


def print_table(replayed: dict) -> None:
    best = _best_static(replayed, None)
    kinds = sorted(next(iter(replayed.values()))["by_kind"])
    print(f"{'config':44s} {'tok/s':>7s} {'vs best static':>15s}  " + "  ".join(f"{k:>8s}" for k in kinds))
    for name, agg in replayed.items():
        ratio = f"{agg['tokens_per_s'] / best:.3f}" if best else "-"
        print(f"{name:44s} {agg['tokens_per_s']:7.2f} {ratio:>15s}  " + "  ".join(f"{agg['by_kind'][k]:8.1f}" for k in kinds))


def summarise_draws(runs: list[dict]) -> dict:
    """Per config and kind of prompt (and ``all``): the median tokens/s over the draws, and the
    median and worst ratio to the best static config of the same draw."""
    kinds = ["all", *sorted(next(iter(runs[0].values()))["by_kind"])]
    summary = {}
    for name in runs[0]:
        summary[name] = {}
        for kind in kinds:
            key = None if kind == "all" else kind
            speeds = [(run[name]["tokens_per_s"] if key is None else run[name]["by_kind"][key]) for run in runs]
            ratios = [s / b for s, run in zip(speeds, runs) if (b := _best_static(run, key))]
            summary[name][kind] = {"tokens_per_s_median": statistics.median(speeds),
                                   "vs_best_static_median": statistics.median(ratios) if ratios else None,
                                   "vs_best_static_worst": min(ratios) if ratios else None}
    return summary


def print_draws(summary: dict, draws: int) -> None:
    kinds = list(next(iter(summary.values())))
    print(f"\nover {draws} cost draws: median tok/s (median / worst ratio to that draw's best static)")
    print(f"{'config':44s} " + "  ".join(f"{k:>22s}" for k in kinds))
    for name, by_kind in summary.items():
        cells = []
        for kind in kinds:
            row = by_kind[kind]
            ratio = (f"{row['vs_best_static_median']:.3f}/{row['vs_best_static_worst']:.3f}"
                     if row["vs_best_static_median"] is not None else "-")
            cells.append(f"{row['tokens_per_s_median']:7.1f} ({ratio})")
        print(f"{name:44s} " + "  ".join(f"{c:>22s}" for c in cells))


if __name__ == "__main__":
    main()
