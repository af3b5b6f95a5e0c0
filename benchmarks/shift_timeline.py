"""How fast does the controller catch up after a traffic shift? Reads `adaptive-spec bench --steps` JSON.

For the shifting stream (copy-heavy -> open-ended -> copy-heavy requests through one long-lived
controller) it measures, per phase, every engine config's decode speed from its step records
(tokens emitted / seconds in draft + verify; prefill excluded so that all configs are compared on
the steps a controller influences), names the phase's best fixed config (the oracle a user would
have to find by hand), and finds the first step after each shift at which the adaptive config's
rolling speed over ``--window`` steps reaches ``--within`` of that oracle. Prints a table, writes
JSON, and draws the timeline.

    python benchmarks/shift_timeline.py benchmarks/results/shift.json --png benchmarks/results/shift_timeline.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from adaptive_spec.outputs import output_path, write_json_atomic

FIELDS = ["drafter", "k", "proposed", "accepted", "emitted", "draft_s", "verify_s"]


def phases_of(prompts: list[dict]) -> list[tuple[str, int, int]]:
    """(kind, first prompt index, end index) for each run of equal kinds."""
    out, start = [], 0
    for i in range(1, len(prompts) + 1):
        if i == len(prompts) or prompts[i]["kind"] != prompts[start]["kind"]:
            out.append((prompts[start]["kind"], start, i))
            start = i
    return out


def steps_of(rows: list[dict]) -> list[dict]:
    return [dict(zip(FIELDS, record)) for row in rows for record in row["step_records"]]


def rate(steps: list[dict]) -> float:
    seconds = sum(s["draft_s"] + s["verify_s"] for s in steps)
    return sum(s["emitted"] for s in steps) / seconds if seconds else 0.0


def analyse(result: dict, policy: str, window: int, within: float) -> dict:
    configs = {n: c for n, c in result["configs"].items() if c["prompts"] and "step_records" in c["prompts"][0]}
    prompts = configs[policy]["prompts"]
    report = {"policy": policy, "window": window, "within": within, "phases": []}
    offset = 0
    for kind, lo, hi in phases_of(prompts):
        rates = {n: rate(steps_of(c["prompts"][lo:hi])) for n, c in configs.items()}
        fixed = {n: r for n, r in rates.items() if n != policy and not n.startswith(("adaptive", "heuristic"))}
        oracle = max(fixed, key=fixed.get)
        steps = steps_of(prompts[lo:hi])
        target = within * fixed[oracle]
        caught_up = next((i + 1 for i in range(window - 1, len(steps)) if rate(steps[i - window + 1 : i + 1]) >= target), None)
        report["phases"].append({
            "kind": kind, "prompts": [lo, hi], "first_step": offset, "steps": len(steps),
            "decode_tokens_per_s": rates, "oracle": oracle, "oracle_tokens_per_s": fixed[oracle],
            f"{policy}_vs_oracle": rates[policy] / fixed[oracle],
            "steps_to_within": caught_up,
        })
        offset += len(steps)
    return report


def plot(result: dict, report: dict, path: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policy = report["policy"]
    steps = steps_of(result["configs"][policy]["prompts"])
    xs = list(range(window, len(steps) + 1))
    rolling = [rate(steps[i - window : i]) for i in xs]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]})
    top.plot(xs, rolling, color="tab:blue", lw=1.2, label=f"{policy} (rolling {window} steps)")
    for phase in report["phases"]:
        a, b = phase["first_step"], phase["first_step"] + phase["steps"]
        top.hlines(phase["oracle_tokens_per_s"], a, b, colors="tab:green", lw=2, label="best fixed config of the phase" if a == 0 else None)
        top.hlines(phase["decode_tokens_per_s"]["plain"], a, b, colors="grey", linestyles="--", label="plain" if a == 0 else None)
        top.text(a + 2, phase["oracle_tokens_per_s"] * 1.03, f"{phase['kind']}: best {phase['oracle']}", fontsize=8, color="tab:green")
        if a:
            for ax in (top, bottom):
                ax.axvline(a, color="black", lw=0.8)
    top.set_ylabel("decode tokens / s")
    top.legend(loc="upper right", fontsize=8)
    top.set_title(f"{result['model']}: shifting stream through one long-lived controller")
    colors = {"none": "grey", "ngram": "tab:orange", "int8": "tab:purple"}
    for drafter in sorted({s["drafter"] for s in steps}):
        pts = [(i, s["k"]) for i, s in enumerate(steps) if s["drafter"] == drafter]
        bottom.scatter([p[0] for p in pts], [p[1] for p in pts], s=4, color=colors.get(drafter, "tab:red"), label=drafter)
    bottom.set_ylabel("k (0 = plain)")
    bottom.set_xlabel("decode step")
    bottom.legend(loc="upper right", fontsize=8, markerscale=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--policy", default="adaptive", help="config whose timeline is analysed")
    parser.add_argument("--window", type=int, default=10, help="steps in the rolling speed window")
    parser.add_argument("--within", type=float, default=0.9, help="fraction of the oracle's speed to reach")
    parser.add_argument("--png", type=output_path, help="where to draw the timeline")
    parser.add_argument("--out", type=output_path, help="where to write the JSON report")
    args = parser.parse_args()
    result = json.loads(args.bench_json.read_text())
    report = analyse(result, args.policy, args.window, args.within)
    print(f"{'phase':<10} {'steps':>6} {'oracle':<18} {'oracle tok/s':>12} {args.policy + ' tok/s':>16} {'ratio':>6} {'steps to ' + format(args.within, '.0%'):>14}")
    for p in report["phases"]:
        print(f"{p['kind']:<10} {p['steps']:>6} {p['oracle']:<18} {p['oracle_tokens_per_s']:>12.1f} "
              f"{p['decode_tokens_per_s'][args.policy]:>16.1f} {p[args.policy + '_vs_oracle']:>6.2f} {str(p['steps_to_within']):>14}")
    if args.out:
        write_json_atomic(args.out, report, "out")
    if args.png:
        plot(result, report, args.png, args.window)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
