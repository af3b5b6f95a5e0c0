"""Throughput against tail latency through the batched server: ``adaptive`` under several
``--plain-slowdown`` bounds beside the fixed configs, at one concurrency.

With a few requests decoding together the fixed configs split the two metrics: drafting always
(``static:ngram:8``) has the throughput, because copying requests finish in fewer steps, and
plain decoding has the p95, because a request that drafts nothing (an open-ended one, the latency
tail) pays for its neighbours' drafts in every wider forward it shares. ``--plain-slowdown`` is
the server's bound on that cost (``policies.batch_cap``); this benchmark measures where each bound
puts ``adaptive`` between the two, so an operator can choose it from a plot rather than a guess.
An entry ``power:B`` serves the bound under ``--batch-objective power`` instead of goodput.

One server per bound (``adaptive-spec serve --max-batch N --drafters ngram --plain-slowdown S``),
all started before the first run; the fixed configs run on the first (the batch cap leaves
overridden requests alone). Each round runs every config once through ``adaptive-spec loadgen``
(the seeded request set of ``benchmarks.serve_batching``), in an order rotated from round to
round, each run on a traffic key of its own. ``adaptive`` under each bound is compared with each
fixed config round by round (``benchmarks.serve_batching.compare_rounds``).

By default the client keeps ``--concurrency`` requests in flight (a closed loop): a config whose
answers end sooner is sent its next requests sooner, so its slowest requests share their steps with
more newcomers' prompts than under plain decoding. ``--rate R`` sends them at R a second instead
(Poisson arrivals, the same seeded times for every config; at most ``--concurrency`` in flight): every
config then serves the same offered load, and the latencies compare service alone.

    python -m benchmarks.serve_tradeoff --concurrency 4 --bounds 0,0.05,0.15,off --rounds 3 \\
        --out benchmarks/results/serve_tradeoff.json --plot benchmarks/results/serve_tradeoff.png
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from importlib.metadata import version
from pathlib import Path

from adaptive_spec.config import PREFILL_CHUNK
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.outputs import check_writable, write_json_atomic
from adaptive_spec.prompts import load_prompts, select_split
from adaptive_spec.server.cli import parse_plain_slowdown
from benchmarks.rounds import compare_rounds
from benchmarks.serve_batching import loadgen, summarize
from benchmarks.serve_shift import free_port, start_server
from policies.batch_cap import CUTS, OBJECTIVES, BatchDraftCap

FIXED = ("plain", "static:ngram:8")


def label(bound: float | None, objective: str = BatchDraftCap.objective) -> str:
    """The config name of ``adaptive`` under a bound (and an objective other than goodput).

    >>> label(0.05), label(None), label(None, "power")
    ('adaptive@0.05', 'adaptive@off', 'adaptive@power:off')
    """
    said = "off" if bound is None else f"{bound:g}"
    return f"adaptive@{said}" if objective == "goodput" else f"adaptive@{objective}:{said}"


def parse_variant(text: str) -> tuple[float | None, str]:
    """A ``--bounds`` entry: a bound (``0.05``, ``off``), optionally after the batch objective it
    serves under (``power:off``; without one, goodput).

    >>> parse_variant("0.05"), parse_variant(" power:off ")
    ((0.05, 'goodput'), (None, 'power'))
    """
    objective, _, bound = text.strip().rpartition(":")
    objective = objective or "goodput"
    if objective not in OBJECTIVES:
        raise InvalidParameterError("batch_objective", objective, f"expected one of {', '.join(OBJECTIVES)}")
    return parse_plain_slowdown(bound), objective


def variants(data: dict) -> list[tuple[float | None, str]]:
    """A file's ``adaptive`` variants: its bounds, each with its objective (files before objectives:
    goodput)."""
    return list(zip(data["bounds"], data.get("objectives", ["goodput"] * len(data["bounds"]))))


def worst_ratios(files: list[dict], against: tuple[str, ...]) -> dict[str, float]:
    """Per ``adaptive`` variant (by label): its worst median ratio against any of ``against``, over
    throughput and p95, in every file (above 1: ``adaptive`` better in all)."""
    worst: dict[str, float] = {}
    for data in files:
        names = {label(*v) for v in variants(data)}
        for c in data["comparisons"]:
            if c["config"] in against and c["reference"] in names:
                w = min(c["throughput"]["median"], c["e2el_p95"]["median"])
                worst[c["reference"]] = min(worst.get(c["reference"], w), w)
    if not worst:
        raise ValueError(f"no run compares a variant with {', '.join(against)}")
    return worst


def choose_variant(files: list[dict], default: str, against: tuple[str, ...] = FIXED, margin: float = 0.02) -> dict:
    """The ``adaptive`` variant (bound and objective, by label) to serve by default, from runs on
    prompts the published figures do not use: the one whose worst median ratio against every fixed
    config (``against``: drafting always, which has the throughput, and plain decoding, which has the
    p95 of the requests that draft nothing), over throughput and p95 at every concurrency, is the
    largest, unless ``default``'s is within ``margin`` of it. Against plain decoding too, unlike
    ``choose_bound``: the service is never to be slower than plain decoding, at the tail included.

    >>> run = lambda c, f, t, p: {"reference": c, "config": f, "throughput": {"median": t}, "e2el_p95": {"median": p}}
    >>> f = [{"bounds": [None, None], "objectives": ["goodput", "power"], "comparisons": [
    ...     run("adaptive@off", "static:ngram:8", 1.05, 1.0), run("adaptive@off", "plain", 1.1, 0.85),
    ...     run("adaptive@power:off", "static:ngram:8", 0.97, 1.02), run("adaptive@power:off", "plain", 1.08, 1.0)]}]
    >>> choose_variant(f, "adaptive@off")["chosen"], choose_variant(f, "adaptive@off", margin=0.2)["chosen"]
    ('adaptive@power:off', 'adaptive@off')
    """
    worst = worst_ratios(files, against)
    best = max(worst, key=worst.get)
    keep = default in worst and worst[default] >= worst[best] - margin
    return {"worst": worst, "best": best, "chosen": default if keep else best, "against": list(against),
            "margin": margin}


def choose_bound(files: list[dict], default: float | None, against: str = "static:ngram:8",
                 margin: float = 0.02) -> dict:
    """The bound to serve by default, from runs on prompts the published figures do not use (``files``:
    this benchmark's outputs, one concurrency each): per bound, its worst median ratio against
    ``against`` (the fixed config with the throughput) over throughput and p95 at every concurrency
    (above 1: ``adaptive`` better in both); the bound whose worst is the largest, unless ``default``'s
    is within ``margin`` of it (a difference that small is noise over a few rounds: the default stays).

    >>> run = lambda c, t, p: {"reference": c, "config": "static:ngram:8", "throughput": {"median": t},
    ...                        "e2el_p95": {"median": p}}
    >>> f = [{"bounds": [0.05, None], "comparisons": [run("adaptive@0.05", 0.95, 1.1), run("adaptive@off", 1.04, 1.0)]}]
    >>> choose_bound(f, 0.05)["chosen"], choose_bound(f, 0.05, margin=0.1)["chosen"]
    (None, 0.05)
    """
    bounds = {label(b): b for data in files for b in data["bounds"]}
    try:
        worst = {name: w for name, w in worst_ratios(files, (against,)).items() if name in bounds}
    except ValueError:
        worst = {}
    if not worst:
        raise ValueError(f"no run compares a bound with {against}")
    best = max(worst, key=worst.get)
    keep = label(default) in worst and worst[label(default)] >= worst[best] - margin
    return {"worst": worst, "best": bounds[best], "chosen": default if keep else bounds[best], "against": against,
            "margin": margin}


def run_all(args: argparse.Namespace, chosen: list[tuple[float | None, str]], tmp: Path) -> list[dict]:
    """Every round of every config, each variant's ``adaptive`` (bound, objective) on its own server."""
    servers, urls = [], {}
    try:
        for bound, objective in chosen:
            port = free_port()
            said = "off" if bound is None else str(bound)
            print(f"starting a server with --plain-slowdown {said} --batch-objective {objective} ...", flush=True)
            servers.append(start_server(port, ["--max-batch", str(args.max_batch), "--prefill-chunk",
                                               str(args.prefill_chunk), "--drafters", "ngram", "--plain-slowdown",
                                               said, "--batch-objective", objective, "--batch-cut", args.batch_cut]))
            urls[label(bound, objective)] = f"http://127.0.0.1:{port}"
            # warm-up, unrecorded: the first forwards of each shape pay for kernel selection
            loadgen(urls[label(bound, objective)],
                    argparse.Namespace(**{**vars(args), "requests": args.max_batch, "rate": None}),
                    "static:ngram:8", args.max_batch, tmp / "warm.json")
        for config in FIXED:
            urls[config] = urls[label(*chosen[0])]
        configs, runs = [*FIXED, *(label(*v) for v in chosen)], []
        for round_ in range(args.rounds):
            shift = round_ % len(configs)
            for config in configs[shift:] + configs[:shift]:
                print(f"round {round_ + 1}/{args.rounds} · concurrency {args.concurrency} · {config} ...", flush=True)
                report = loadgen(urls[config], args, config.split("@")[0], args.concurrency, tmp / "run.json", round_)
                runs.append(summarize(report, config, args.concurrency, round_))
        return runs
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=Path("benchmarks/shift.jsonl"))
    parser.add_argument("--split", default=None, help="only the prompts of this split (e.g. dev, of "
                        "benchmarks/corpus/corpus.jsonl: the prompts a bound may be chosen on)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--bounds", default="0,0.05,0.15,off", help="comma-separated --plain-slowdown values, each "
                        "optionally after a --batch-objective (power:off; without one, goodput)")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--prefill-chunk", type=int, default=PREFILL_CHUNK)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-cut", default=BatchDraftCap.cut, choices=CUTS,
                        help="every server's --batch-cut (the requests' drafts cut row by row, or to one length)")
    parser.add_argument("--rate", type=float, default=None, help="requests per second, Poisson arrivals (default: as "
                        "fast as --concurrency allows)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    for name in ("concurrency", "max_batch", "prefill_chunk", "requests", "rounds", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"{name}={getattr(args, name)}: must be >= 1")
    if args.rate is not None and not 0 < args.rate < float("inf"):
        parser.error(f"rate={args.rate}: must be a number of requests per second > 0 (leave it out for a closed loop)")
    try:
        chosen = [parse_variant(b) for b in args.bounds.split(",") if b.strip()]
    except InvalidParameterError as exc:
        parser.error(f"bounds={args.bounds!r}: {exc}")
    if not chosen or len({label(*v) for v in chosen}) != len(chosen):
        parser.error(f"bounds={args.bounds!r}: needs at least one value, each once")
    if not args.prompts.is_file():
        parser.error(f"prompts={str(args.prompts)!r}: no such file")
    if args.split is not None:
        try:  # before any server starts: a typo must not run the whole set or fail after minutes
            select_split(load_prompts(args.prompts), args.split, str(args.prompts))
        except InvalidParameterError as exc:
            parser.error(str(exc))
    for path, name in ((args.out, "out"), (args.plot, "plot")):
        if path is not None:
            check_writable(path, name)
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_all(args, chosen, Path(tmp))
    configs = [*FIXED, *(label(*v) for v in chosen)]
    for config in configs:
        mine = [r for r in runs if r["config"] == config]
        print(f"{config:>16}: tok/s {_spread([r['output_tokens_per_s'] for r in mine], '{:.1f}')}  p95 s "
              f"{_spread([r['e2el_s']['p95'] for r in mine], '{:.2f}')}  drafting "
              f"{_spread([r['speculative_step_share'] for r in mine], '{:.0%}')}")
    comparisons = [c for v in chosen for fixed in FIXED
                   for c in [compare_rounds(runs, fixed, args.concurrency, reference=label(*v))] if c is not None]
    for c in comparisons:
        t, p = c["throughput"], c["e2el_p95"]
        print(f"{c['reference']} / {c['config']}: tok/s x{t['median']:.2f} [{t['low']:.2f}, {t['high']:.2f}] "
              f"{t['verdict']}; p95 x{p['median']:.2f} [{p['low']:.2f}, {p['high']:.2f}] {p['verdict']}")
    write_json_atomic(args.out, {
        "benchmark": "serve_tradeoff", "prompts": str(args.prompts), **({"split": args.split} if args.split else {}),
        "concurrency": args.concurrency,
        "bounds": [b for b, _ in chosen],
        **({"objectives": [o for _, o in chosen]} if any(o != "goodput" for _, o in chosen) else {}),
        "configs": configs, "max_batch": args.max_batch, "prefill_chunk": args.prefill_chunk,
        "requests": args.requests, "max_tokens": args.max_tokens, "seed": args.seed, "rounds": args.rounds, "batch_cut": args.batch_cut,
        "rate": args.rate,  # None: a closed loop of --concurrency
        "endpoint": "chat", "cap_pace_decay": BatchDraftCap.pace_decay,  # the servers' batch cap's
        "machine": {"cpus": os.cpu_count(), "torch_threads": "the server's default", "torch": version("torch"),
                    "transformers": version("transformers"), "platform": platform.platform()},
        "runs": runs, "comparisons": comparisons}, "out")
    print(f"wrote {args.out}")
    if args.plot is not None:
        plot(runs, configs, args.plot, args.rate)
        print(f"wrote {args.plot}")


def _spread(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def _point_name(config: str) -> str:
    """``adaptive@power:off`` -> ``power, bound off``; ``adaptive@0.05`` -> ``bound 0.05``."""
    objective, _, bound = config.split("@")[1].rpartition(":")
    return f"{objective}, bound {bound}" if objective else f"bound {bound}"


def plot(runs: list[dict], configs: list[str], path: Path, rate: float | None = None) -> None:
    """Output tokens/s against p95 end-to-end latency: each config's median over rounds, bars from
    its lowest round to its highest, ``adaptive``'s bounds joined in order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(7, 5))
    points = {}
    for config in configs:
        mine = [r for r in runs if r["config"] == config]
        if not mine:
            continue
        x, y = [r["e2el_s"]["p95"] for r in mine], [r["output_tokens_per_s"] for r in mine]
        points[config] = mx, my = statistics.median(x), statistics.median(y)
        fixed = config in FIXED
        axis.errorbar(mx, my, xerr=[[mx - min(x)], [max(x) - mx]], yerr=[[my - min(y)], [max(y) - my]],
                      marker="s" if fixed else "o", color="tab:gray" if fixed else "tab:blue", capsize=3)
        axis.annotate(config if fixed else _point_name(config), (mx, my), textcoords="offset points",
                      xytext=(6, -14) if fixed else (6, 6), fontsize=9, color="tab:gray" if fixed else "tab:blue")
    adaptive = [points[c] for c in configs if c in points and c not in FIXED]
    axis.plot([p[0] for p in adaptive], [p[1] for p in adaptive], color="tab:blue", alpha=0.5,
              label="adaptive, by [--batch-objective,] --plain-slowdown bound")
    rounds = len({r.get("round", 0) for r in runs})
    concurrency = runs[0]["concurrency"]
    load = f"{rate:g} requests/s, at most {concurrency} at once" if rate else f"{concurrency} concurrent requests"
    axis.set(xlabel="end-to-end latency p95 (s): lower is better", ylabel="output tokens/s (all requests)",
             title=f"{load}: median of {rounds} rounds, bars lowest to highest")
    axis.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
