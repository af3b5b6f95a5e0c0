"""The batch cap's prices against a batched server's own steps, with its pace and without.

The cap's bound weighs a wider step against a plain one of the same rows, so what matters is the
ratio of the two prices. Each cost fit learns from its own kind of step, and on a machine whose
speed swings within seconds the two kinds may have last run at different speeds; the cap's pace
(``BatchDraftCap.pace``) takes the speed both share out of what the fits learn. This replays the
forwards a server ran (``serve_batching --forwards-out``), in order, through a cap warmed from the
same profile as the server's, once as the server runs it and once with no pace (``pace_decay=1``).
Before each forward the cap prices it, as the server's cap did before deciding the step. Reported:

- per run of ``adaptive`` (where both kinds interleave): the median of seconds over price on its
  wider forwards over the same on its plain ones, 1 when the cap's ratio is the machine's, above 1
  when it priced drafts too cheap against plain steps, below when too dear;
- at the start of every run, the ratio the cap prices a forward of ``--rows`` rows each ``--width``
  tokens wide at over a plain one (at the forwards' mean slots): its range over the runs;
- the median of |log(seconds / price)| over every forward of two rows or more.

A forward that carried a newcomer's prompt is in the records at what the engine charged its rows,
which the server's cap never learned from; they are few, and both replays take them alike.

    python -m benchmarks.cap_pace benchmarks/results/serve_batching_forwards.json \\
        --profile simulator/profiles/smollm2_cpu_batched.json --out benchmarks/results/cap_pace.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.outputs import check_writable, write_json_atomic
from adaptive_spec.server.cli import _step_costs
from policies.batch_cap import BatchDraftCap
from simulator.speed import forwards, with_slots

VARIANTS = {"with pace": BatchDraftCap.pace_decay, "without": 1.0}


def timed_forwards(steps: Sequence[dict]) -> list[dict]:
    """The server's step records as the forwards its cap observed: each forward's traffic key, rows,
    tokens per row, seconds (draft and verify) and slots per row, in order.

    >>> rows = [{"time": 0.0, "request_id": r, "key": "k", "proposed": p, "accepted": 0, "draft_s": 0.001,
    ...          "verify_s": 0.05, "context_len": 11} for r, p in ((1, 4), (2, 0))]
    >>> timed_forwards(rows)
    [{'key': 'k', 'time': 0.0, 'rows': 2, 'width': 3.0, 'seconds': 0.051, 'slots': 10}]
    """
    return [{"key": rows[0]["key"], "time": round(rows[0]["time"], 3), "rows": len(rows),  # rounded: a file of thousands
             "width": round(sum(row["proposed"] + 1 for row in rows) / len(rows), 4),
             "seconds": round(rows[0]["draft_s"] + rows[0]["verify_s"], 6), "slots": slots}
            for rows, slots in with_slots(forwards(steps))]


COLUMNS = ["key", "time", "rows", "width", "seconds", "slots"]  # a forward's, as written: a row of values


def packed(timed: Sequence[dict]) -> dict:
    """``timed_forwards`` as a file holds them: the traffic keys once, each forward a row of values
    (its key by index, its time from the first forward's), so a run of thousands stays small."""
    keys = list(dict.fromkeys(f["key"] for f in timed))
    start = timed[0]["time"] if timed else 0.0
    return {"keys": keys, "start_time": start, "columns": COLUMNS,
            "forwards": [[keys.index(f["key"]), round(f["time"] - start, 3), f["rows"], f["width"], f["seconds"], f["slots"]]
                         for f in timed]}


def unpacked(data: dict) -> list[dict]:
    """``packed``'s inverse.

    >>> f = {"key": "k", "time": 5.0, "rows": 2, "width": 3.0, "seconds": 0.05, "slots": 10}
    >>> unpacked(packed([f, {**f, "time": 5.25}])) == [f, {**f, "time": 5.25}]
    True
    """
    keys, start = data["keys"], data["start_time"]
    return [{"key": keys[key], "time": start + t, "rows": rows, "width": width, "seconds": seconds, "slots": slots}
            for key, t, rows, width, seconds, slots in data["forwards"]]


def replay(timed: Sequence[dict], samples: list, pace_decay: float, rows: int, width: float) -> dict:
    """``timed`` forwards through a cap warmed from ``samples``; what the module docstring reports."""
    cap = BatchDraftCap(pace_decay=pace_decay)
    cap.warm(samples)
    context = statistics.fmean(f["slots"] for f in timed)
    runs: dict[str, dict] = {}
    errors = []
    for f in timed:
        run = runs.get(f["key"])
        if run is None:
            plain = cap.cost(rows, 1, context)
            run = runs[f["key"]] = {"start_ratio": cap.cost(rows, width, context) / plain if plain else None,
                                    "residuals": {"plain": [], "wider": []}}
        price = cap.cost(f["rows"], f["width"], f["slots"])
        if f["rows"] >= 2 and price and price > 0:
            run["residuals"]["wider" if f["width"] > 1 else "plain"].append(f["seconds"] / price)
            errors.append(abs(math.log(f["seconds"] / price)))
        cap.observe(f["rows"], f["width"], f["seconds"], f["slots"])
    starts = [r["start_ratio"] for r in runs.values()]
    adaptive = {}
    for key, run in runs.items():
        plain, wider = run["residuals"]["plain"], run["residuals"]["wider"]
        if "adaptive" in key and plain and wider:
            adaptive[key] = {"ratio_error": statistics.median(wider) / statistics.median(plain),
                             "plain_forwards": len(plain), "wider_forwards": len(wider)}
    known = [r for r in starts if r is not None]  # none: no step of a batch priced (a profile without them)
    return {"pace_decay": pace_decay,
            "start_ratio": {"low": min(known, default=None), "high": max(known, default=None), "runs": len(known)},
            "adaptive_runs": adaptive, "median_abs_log_error": statistics.median(errors) if errors else None,
            "forwards": len(errors)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("forwards", type=Path, help="a server's forwards (serve_batching --forwards-out)")
    parser.add_argument("--profile", type=Path, required=True, help="the profile the server's cap was warmed from")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--rows", type=int, default=8, help="the shape whose price ratio is reported at each run's start")
    parser.add_argument("--width", type=float, default=5.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.rows < 2:
        parser.error(f"rows={args.rows}: the ratio is a batch's, so rows >= 2")
    if args.width <= 1:
        parser.error(f"width={args.width:g}: the ratio is a wider step's over a plain one's, so width > 1")
    if args.max_batch < 2:
        parser.error(f"max_batch={args.max_batch}: the server batched, so --max-batch >= 2")
    if not args.forwards.is_file():
        parser.error(f"forwards={str(args.forwards)!r}: no such file")
    if not args.profile.is_file():
        parser.error(f"profile={str(args.profile)!r}: no such file")
    check_writable(args.out, "out")
    try:
        recorded = json.loads(args.forwards.read_text(encoding="utf-8"))
        timed = unpacked(recorded)
    except (KeyError, TypeError, ValueError) as exc:
        parser.error(f"forwards={str(args.forwards)!r}: not a file serve_batching --forwards-out wrote ({exc!r})")
    if not timed:
        parser.error(f"forwards={str(args.forwards)!r}: holds no forward")
    try:
        samples = _step_costs(args.profile, args.max_batch, "smollm2")
    except InvalidParameterError as exc:
        parser.error(str(exc))
    result = {"benchmark": "cap_pace", "forwards_file": str(args.forwards), "profile": str(args.profile),
              "shape": {"rows": args.rows, "width": args.width}, "source": recorded.get("source"),
              "variants": {name: replay(timed, samples, decay, args.rows, args.width) for name, decay in VARIANTS.items()}}
    if not result["variants"]["with pace"]["forwards"]:
        parser.error(f"forwards={str(args.forwards)!r}: holds no forward of two rows or more the profile prices")
    for name, v in result["variants"].items():
        errors = " ".join(f"{r['ratio_error']:.3f}" for r in v["adaptive_runs"].values()) or "-"
        low, high = (v["start_ratio"][end] for end in ("low", "high"))
        starts = f"{low:.2f}-{high:.2f}" if low is not None else "-"
        print(f"{name:>9}: ratio at run starts {starts} | adaptive runs' wider/plain residual {errors} "
              f"| median |log error| {v['median_abs_log_error']:.3f}")
    write_json_atomic(args.out, result, "out")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
