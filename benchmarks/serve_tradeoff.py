"""Throughput against tail latency through the batched server: ``adaptive`` under several
``--plain-slowdown`` bounds beside the fixed configs, at one concurrency.

With a few requests decoding together the fixed configs split the two metrics: drafting always
(``static:ngram:8``) has the throughput, because copying requests finish in fewer steps, and
plain decoding has the p95, because a request that drafts nothing (an open-ended one, the latency
tail) pays for its neighbours' drafts in every wider forward it shares. ``--plain-slowdown`` is
the server's bound on that cost (``policies.batch_cap``); this benchmark measures where each bound
puts ``adaptive`` between the two, so an operator can choose it from a plot rather than a guess.

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
from benchmarks.serve_batching import compare_rounds, loadgen, summarize
from benchmarks.serve_shift import free_port, start_server
from policies.batch_cap import BatchDraftCap

FIXED = ("plain", "static:ngram:8")


def label(bound: float | None) -> str:
    """The config name of ``adaptive`` under a bound.

    >>> label(0.05), label(None)
    ('adaptive@0.05', 'adaptive@off')
    """
    return f"adaptive@{'off' if bound is None else f'{bound:g}'}"


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
    worst: dict[str, float] = {}
    bounds = {label(b): b for data in files for b in data["bounds"]}
    for data in files:
        for c in data["comparisons"]:
            if c["config"] == against and c["reference"] in bounds:
                w = min(c["throughput"]["median"], c["e2el_p95"]["median"])
                worst[c["reference"]] = min(worst.get(c["reference"], w), w)
    if not worst:
        raise ValueError(f"no run compares a bound with {against}")
    best = max(worst, key=worst.get)
    keep = label(default) in worst and worst[label(default)] >= worst[best] - margin
    return {"worst": worst, "best": bounds[best], "chosen": default if keep else bounds[best], "against": against,
            "margin": margin}


def run_all(args: argparse.Namespace, bounds: list[float | None], tmp: Path) -> list[dict]:
    """Every round of every config, each bound's ``adaptive`` on its own server."""
    servers, urls = [], {}
    try:
        for bound in bounds:
            port = free_port()
            print(f"starting a server with --plain-slowdown {'off' if bound is None else bound} ...", flush=True)
            servers.append(start_server(port, ["--max-batch", str(args.max_batch), "--prefill-chunk",
                                               str(args.prefill_chunk), "--drafters", "ngram", "--plain-slowdown",
                                               "off" if bound is None else str(bound)]))
            urls[label(bound)] = f"http://127.0.0.1:{port}"
            # warm-up, unrecorded: the first forwards of each shape pay for kernel selection
            loadgen(urls[label(bound)], argparse.Namespace(**{**vars(args), "requests": args.max_batch, "rate": None}),
                    "static:ngram:8", args.max_batch, tmp / "warm.json")
        for config in FIXED:
            urls[config] = urls[label(bounds[0])]
        configs, runs = [*FIXED, *(label(b) for b in bounds)], []
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
    parser.add_argument("--bounds", default="0,0.05,0.15,off", help="comma-separated --plain-slowdown values")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--prefill-chunk", type=int, default=PREFILL_CHUNK)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
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
        bounds = [parse_plain_slowdown(b.strip()) for b in args.bounds.split(",") if b.strip()]
    except InvalidParameterError as exc:
        parser.error(f"bounds={args.bounds!r}: {exc}")
    if not bounds or len({label(b) for b in bounds}) != len(bounds):
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
        runs = run_all(args, bounds, Path(tmp))
    configs = [*FIXED, *(label(b) for b in bounds)]
    for config in configs:
        mine = [r for r in runs if r["config"] == config]
        print(f"{config:>16}: tok/s {_spread([r['output_tokens_per_s'] for r in mine], '{:.1f}')}  p95 s "
              f"{_spread([r['e2el_s']['p95'] for r in mine], '{:.2f}')}  drafting "
              f"{_spread([r['speculative_step_share'] for r in mine], '{:.0%}')}")
    comparisons = [c for b in bounds for fixed in FIXED
                   for c in [compare_rounds(runs, fixed, args.concurrency, reference=label(b))] if c is not None]
    for c in comparisons:
        t, p = c["throughput"], c["e2el_p95"]
        print(f"{c['reference']} / {c['config']}: tok/s x{t['median']:.2f} [{t['low']:.2f}, {t['high']:.2f}] "
              f"{t['verdict']}; p95 x{p['median']:.2f} [{p['low']:.2f}, {p['high']:.2f}] {p['verdict']}")
    write_json_atomic(args.out, {
        "benchmark": "serve_tradeoff", "prompts": str(args.prompts), **({"split": args.split} if args.split else {}),
        "concurrency": args.concurrency,
        "bounds": bounds, "configs": configs, "max_batch": args.max_batch, "prefill_chunk": args.prefill_chunk,
        "requests": args.requests, "max_tokens": args.max_tokens, "seed": args.seed, "rounds": args.rounds,
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
        axis.annotate(config if fixed else "bound " + config.split("@")[1], (mx, my), textcoords="offset points",
                      xytext=(6, -14) if fixed else (6, 6), fontsize=9, color="tab:gray" if fixed else "tab:blue")
    adaptive = [points[c] for c in configs if c in points and c not in FIXED]
    axis.plot([p[0] for p in adaptive], [p[1] for p in adaptive], color="tab:blue", alpha=0.5,
              label="adaptive, by --plain-slowdown bound")
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
