"""Served runs compared round by round: one config against another at one concurrency, each
round's ratio, their median and range, and a verdict only where every round agrees. A run of a
config is one draw of a machine whose speed swings by a quarter within minutes, so configs are
compared within a round, never across rounds."""

from __future__ import annotations

import statistics


def agreement(ratios: list[float]) -> str:
    """What a few rounds' ratios (> 1: ``adaptive`` better) say: a verdict only where every round agrees.

    >>> agreement([1.1, 1.2, 1.05]), agreement([1.1, 0.9, 1.2]), agreement([1.1])
    ('ahead in every round', 'no consistent difference', 'one round: no spread')
    """
    if len(ratios) < 2:
        return "one round: no spread"
    if min(ratios) > 1:
        return "ahead in every round"
    if max(ratios) < 1:
        return "behind in every round"
    return "no consistent difference"


def compare_rounds(runs: list[dict], config: str, concurrency: int, reference: str = "adaptive") -> dict | None:
    """``reference`` against ``config`` at ``concurrency``, round by round: output tokens/s
    (``reference`` over ``config``) and p95 end-to-end latency (``config`` over ``reference``), so
    that > 1 is ``reference`` better in both; each as the rounds' ratios, their median and range.
    Where every run compared was priced (``priced_tokens_per_s``), also output tokens per second of
    decode forwards at the profile's prices (``priced_throughput``): the same comparison without the
    machine's swings in speed, which move a run's wall-clock figures by more than most differences."""
    def by_round(name: str) -> dict[int, dict]:
        return {r.get("round", 0): r for r in runs if r["config"] == name and r["concurrency"] == concurrency}

    mine, theirs = by_round(reference), by_round(config)
    rounds = sorted(set(mine) & set(theirs))
    if not rounds:
        return None
    out = {"concurrency": concurrency, "config": config, "reference": reference, "rounds": len(rounds)}
    ratios_of = [("throughput", lambda a, b: a["output_tokens_per_s"] / b["output_tokens_per_s"]),
                 ("e2el_p95", lambda a, b: b["e2el_s"]["p95"] / a["e2el_s"]["p95"])]
    if all(run.get("priced_tokens_per_s") for r in rounds for run in (mine[r], theirs[r])):
        ratios_of.append(("priced_throughput", lambda a, b: a["priced_tokens_per_s"] / b["priced_tokens_per_s"]))
    for name, ratio in ratios_of:
        ratios = [ratio(mine[r], theirs[r]) for r in rounds]
        out[name] = {"ratios": ratios, "median": statistics.median(ratios), "low": min(ratios), "high": max(ratios),
                     "verdict": agreement(ratios)}
    return out


def compare_best_fixed(runs: list[dict], concurrency: int, reference: str = "adaptive") -> dict | None:
    """``reference`` against the best fixed config of each round at ``concurrency`` (the one with the
    most output tokens/s that round), as ``compare_rounds`` does against one config."""
    best = {}
    for run in runs:
        if run["concurrency"] == concurrency and run["config"] != reference:
            mine = best.get(run.get("round", 0))
            if mine is None or run["output_tokens_per_s"] > mine["output_tokens_per_s"]:
                best[run.get("round", 0)] = run
    relabelled = [r for r in runs if r["config"] == reference] + [{**r, "config": "best fixed"} for r in best.values()]
    return compare_rounds(relabelled, "best fixed", concurrency, reference)
