"""Write benchmarks/RESULTS.md, and the README's results summary, from the JSON files of benchmarks/results/.

Every figure in RESULTS.md is computed here from the file it names, so a figure cannot drift from
its file: after a benchmark rewrites a JSON file, commit it, then run this script and commit what it
writes (the date of a result is its file's last commit date, since the files do not record one).

    python benchmarks/make_results.py           # rewrite benchmarks/RESULTS.md and the README block
    python benchmarks/make_results.py --check   # exit 1 if either differs from what would be written

Definitions used in the tables:

- tokens/s: new tokens over wall seconds, prefill included, summed over the prompts of a column;
- best fixed config: the fastest of ``plain`` and the ``static:<drafter>:<k>`` configs in that column
  (the configuration a user would have to find by hand);
- best transformers config: the fastest of the ``hf-*`` configs (transformers' own ``generate``);
- paired ratio: a config's tokens/s over another's on the same prompt in the same round, its median
  over those units and a 95% bootstrap interval over prompts and rounds (``adaptive_spec.paired``);
  an interval that spans 1.0 reads "no difference detected".

Shared pieces: ``benchmarks/results_kit.py``; the ``bench`` sections: ``benchmarks/bench_sections.py``;
``render(results_dir)`` is what the tests call.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.bench_sections import adaptive_rows, bench_section, best, corpus_section, per_round_of
from adaptive_spec.paired import compare
from benchmarks.suffix_sections import present as suffix_workloads, suffix_section
from benchmarks.batching_sections import (batching_section, cap_pace_section, packed_forward_section,
                                          prefill_chunk_section, serve_batching_bounded_section,
                                          serve_batching_c4_section, serve_batching_goodput_section,
                                          serve_batching_section, serve_batching_unbounded_section)
from benchmarks.tradeoff_sections import serve_tradeoff_section
from benchmarks.serve_shift import phase_plan
from benchmarks.results_kit import (BENCH_DIR, NOT_REPORTED, PROMPTS, README, README_BEGIN, README_END, RESULTS_DIR,
                                   RESULTS_MD, load, machine_line, provenance, table)


# --- derived analyses: timeline and replay ------------------------------------------------------

def timeline_section(results_dir: Path, dates: dict | None) -> str:
    data = load(results_dir, "shift_timeline.json")
    policy, window, within = data["policy"], data["window"], data["within"]
    rows = []
    for number, phase in enumerate(data["phases"], start=1):
        first, end = phase["prompts"]
        rows.append([f"{number}: {phase['kind']}", f"{end - first}", str(phase["steps"]), f"`{phase['oracle']}`",
                     f"{phase['oracle_tokens_per_s']:.1f}", f"{phase['decode_tokens_per_s'][policy]:.1f}",
                     f"{phase['adaptive_vs_oracle']:.2f}×", str(phase["steps_to_within"])])
    header = ["phase", "prompts", f"`{policy}` steps", "best fixed config", "its decode tok/s",
              f"`{policy}` decode tok/s", "× it", f"steps to {within:.0%} of it"]
    what = (f"The same run, phase by phase: decode speed from the step records (prefill excluded), the "
            f"phase's best fixed config, and the first step after each shift at which `{policy}`'s rolling "
            f"speed over {window} steps reaches {within:.0%} of that config's "
            f"([timeline](results/shift_timeline.png)).")
    command = (".venv/bin/python benchmarks/shift_timeline.py benchmarks/results/shift.json "
               f"--policy {policy} --window {window} --within {within} \\\n"
               "  --png benchmarks/results/shift_timeline.png --out benchmarks/results/shift_timeline.json")
    machine = "that of `shift.json` (this analyses its step records)"
    return "\n\n".join(["### After each shift", what, table(header, rows),
                        provenance(results_dir, ["shift_timeline.json"], dates, command, machine)])


def replay_section(results_dir: Path, name: str, dates: dict | None) -> str:
    data = load(results_dir, name)
    source = Path(data["source"]).name
    kinds = [k for k in next(iter(data["draws"].values())) if k != "all"]
    rows = []
    for config, draws in data["draws"].items():
        cells = [f"`{config}`", f"{data['configs'][config]['tokens_per_s']:.1f}"]
        cells += [f"{draws[k]['vs_best_static_median']:.2f} / {draws[k]['vs_best_static_worst']:.2f}"
                  for k in ["all"] + kinds]
        rows.append(cells)
    what = (f"The greedy outputs of [`{source}`](results/{source}) replayed offline through the same policy "
            "objects (n-gram drafter only), each step charged the in-service cost of its verify length. "
            "Then replayed again with noise: each step's cost drawn from the run's in-service costs of its "
            "length, each request slowed or sped up as a whole as that run's requests varied. Columns: "
            "tokens/s of the noiseless replay, then the ratio to the best static n-gram config of the same "
            "draw, median / worst over the draws (the file does not record how many).")
    command = (f".venv/bin/adaptive-spec replay benchmarks/results/{source} {PROMPTS[source]} --draws 20 "
               f"--out benchmarks/results/{name}")
    machine = f"not recorded (no model runs: the step costs replayed are those measured in `{source}`)"
    return "\n\n".join([f"## Offline replay of `{source}`", what,
                        table(["config", "replayed tok/s"] + [f"{k}: median / worst" for k in ["all"] + kinds], rows),
                        provenance(results_dir, [name], dates, command, machine)])


# --- simulator, controller and telemetry --------------------------------------------------------

def validation_section(results_dir: Path, names: list[str], dates: dict | None) -> str:
    runs = [load(results_dir, n) for n in names]
    header = ["metric"]
    for run in runs:
        header += [f"`{run['policy']}` measured", "predicted", "error"]
    rows = []
    for i, row in enumerate(runs[0]["comparison"]):
        cells = [row["metric"]]
        for run in runs:
            other = run["comparison"][i]
            cells += [f"{other['measured']:.3f}", f"{other['predicted']:.3f}", f"{other['error']:+.1%}"]
        rows.append(cells)
    first = runs[0]
    budget = max(s["max_new_tokens"] for s in first["served"])
    what = (f"One seeded open-loop trace ({first['requests']} requests, Poisson {first['rate']}/s, the prompts "
            f"of `benchmarks/workloads.jsonl`, up to {budget} tokens each) served by the real engine in wall-clock "
            f"time, then the served trace replayed in the simulator on the profile "
            f"[`{first['profile']}`](../{first['profile']}); measured against predicted.")
    redone = [r["resimulated"]["date"] for r in runs if r.get("resimulated")]
    if redone:
        what += (f" The predictions were redone on {max(redone)} by the simulator of that day on the same served "
                 "traces (`python -m benchmarks.sim_validation --resimulate`); the measurements are the original run's.")
    command = "\n".join(
        f".venv/bin/adaptive-spec validate-sim --policy {r['policy']} --rate {r['rate']} --requests {r['requests']} "
        f"--seed {r['seed']} --output-tokens {budget} \\\n  --profile {r['profile']} --out benchmarks/results/{n}"
        for r, n in zip(runs, names))
    if redone:
        command += "".join(f"\n.venv/bin/python -m benchmarks.sim_validation --resimulate benchmarks/results/{n} "
                           f"--out benchmarks/results/{n}" for r, n in zip(runs, names) if r.get("resimulated"))
    return "\n\n".join(["## Simulator against the real engine", what, table(header, rows),
                        provenance(results_dir, names, dates, command, "not recorded")])


def simulator_speed_section(results_dir: Path, dates: dict | None) -> str:
    data = load(results_dir, "simulator_speed.json")
    rows = [[c["case"], f"{c['requests']:,}", str(c["replicas"]), f"{c['decode_steps']:,}", f"{c['wall_s']:.1f}",
             f"{c['us_per_step']:.1f}", f"{c['tokens_per_step']:.2f}"] for c in data["cases"]]
    requests = data["cases"][0]["requests"]
    what = ("Wall time of one process simulating the same traffic under each policy and replica kind "
            "(generation of the traffic, the simulation and its summary).")
    command = (f".venv/bin/python benchmarks/simulator_speed.py --requests {requests} "
               "--json benchmarks/results/simulator_speed.json")
    header = ["case", "requests", "replicas", "simulated steps", "wall s", "µs per step", "tokens per step"]
    return "\n\n".join(["## Simulator speed", what, table(header, rows),
                        provenance(results_dir, ["simulator_speed.json"], dates, command, machine_line(data))])


def policy_overhead_section(results_dir: Path, dates: dict | None) -> str:
    data = load(results_dir, "policy_overhead.json")
    rows = [[r["case"], f"{r['median_us']:.1f}", f"{r['p90_us']:.1f}", f"{r['p99_us']:.1f}"] for r in data["results"]]
    what = (f"Wall time of the controller's `decide()` + `observe()` per step over {data['steps']} synthetic steps "
            f"(no model), and of the early-stop rules per drafted token; target: a median under "
            f"{data['target_median_us']:g} µs.")
    command = (f".venv/bin/python benchmarks/policy_overhead.py --steps {data['steps']} --seed {data['seed']} "
               "--out benchmarks/results/policy_overhead.json")
    return "\n\n".join(["## Controller overhead", what, table(["case", "median µs", "p90 µs", "p99 µs"], rows),
                        provenance(results_dir, ["policy_overhead.json"], dates, command, machine_line(data))])


def telemetry_section(results_dir: Path, dates: dict | None) -> str:
    real = load(results_dir, "telemetry_overhead_real.json")
    hooks = load(results_dir, "telemetry_overhead.json")
    real_table = table(["tok/s, telemetry off", "tok/s, SQLite store on", "overhead", "observer errors"],
                       [[f"{real['tokens_per_s']['off']:.2f}", f"{real['tokens_per_s']['on']:.2f}",
                         f"{real['overhead']:.2%}", str(real["observer_errors"])]])
    hook_rows = [[name, f"{v['us_per_step']:.1f}", f"{v['us_per_request']:.1f}",
                  f"{v['dropped']:,}" if "dropped" in v else "-"] for name, v in hooks.items()]
    hook_table = table(["observer", "µs per step", "µs per request", "rows dropped (bounded queue)"], hook_rows)
    command_real = (f".venv/bin/python benchmarks/telemetry_overhead_real.py --rounds {real['rounds']} "
                    "--out benchmarks/results/telemetry_overhead_real.json")
    command_hooks = ".venv/bin/python benchmarks/telemetry_overhead.py --out benchmarks/results/telemetry_overhead.json"
    return "\n\n".join([
        "## Telemetry overhead",
        (f"On the real engine: the greedy generations of `benchmarks/engine.jsonl` with and without the SQLite "
         f"store, interleaved in one process, {real['rounds']} rounds."), real_table,
        provenance(results_dir, ["telemetry_overhead_real.json"], dates, command_real, machine_line(real)),
        "The observers' hooks alone, timed without a model:", hook_table,
        provenance(results_dir, ["telemetry_overhead.json"], dates, command_hooks, machine_line(hooks))])


def revisions_section(results_dir: Path, dates: dict | None, name: str, title: str, subject: str,
                      intro: str = "") -> str:
    """A ``compare_revisions`` run: each revision's ratios to plain by round, and their ratio."""
    if not (Path(results_dir) / name).exists():
        return ""
    data = load(results_dir, name)
    before, after = data["before"][:7], data["after"][:7]
    rows = []
    for config, c in data["comparison"].items():
        if config == "plain":
            continue
        lo, hi = c["range_after_over_before"]
        rows.append([f"`{config}`", " ".join(f"{x:.2f}×" for x in c["before_vs_plain"]),
                     " ".join(f"{x:.2f}×" for x in c["after_vs_plain"]),
                     f"{c['median_after_over_before']:.2f} [{lo:.2f}, {hi:.2f}]",
                     "yes" if c["all_equal_plain"] else "**no**"])
    prompts = Path(data["prompts"])
    link = prompts.name if prompts.parent.name == "benchmarks" else f"{prompts.parent.name}/{prompts.name}"
    split = data.get("split")
    what = (f"The same `bench` run on two revisions of {subject}, `{before}` and `{after}`, alternated round by "
            f"round ({len(data['rounds'])} rounds, [`{link}`]({link}){f', its `{split}` split' if split else ''}, "
            f"{data['max_new_tokens']} new tokens). "
            "Each revision is measured by its ratio to `plain` in the same run, so the machine's drift cancels; "
            "a median ratio of ratios near 1, its range straddling 1, means no change beyond the noise.")
    header = ["config", f"`{before}` × plain, by round", f"`{after}` × plain, by round",
              "after / before, median [range]", "all outputs equal plain"]
    prompts_arg = "" if link == "workloads.jsonl" else f"--prompts benchmarks/{link} "
    split_arg = f"--split {split} " if split else ""
    command = (f".venv/bin/python -m benchmarks.compare_revisions --before {before} --after {after} "
               f"{prompts_arg}{split_arg}--configs {','.join(data['comparison'])} --rounds {len(data['rounds'])} "
               f"--max-new-tokens {data['max_new_tokens']} --out benchmarks/results/{name}")
    parts = [f"## {title}", intro, what, table(header, rows),
             provenance(results_dir, [name], dates, command, machine_line(data))]
    return "\n\n".join(p for p in parts if p)


CONTROLLER_AB_INTRO = (
    "A change to how the controller starts each request: the match gate prices prompt lookup with the "
    "request's own lift (as it already cut drafts with it), the previous request's mix of lookup results "
    "weighs as 2 lookups of the new one, and a probe burst that shadow drafting asked for verifies only what "
    "the gate keeps. Measured on the held-out test split, against the revision whose controller the "
    "corpus table above was measured with.")


def server_overhead_section(results_dir: Path, dates: dict | None) -> str:
    if not (Path(results_dir) / "server_overhead.json").exists():
        return ""
    data = load(results_dir, "server_overhead.json")
    lo, hi = data["median_pair_difference_ci95_s"]
    rows = [[f"{data['p50_in_process_s'] * 1e3:.0f}", f"{data['p50_http_s'] * 1e3:.0f}",
             f"{data['p50_difference_s'] * 1e3:+.1f}", f"{data['median_pair_difference_s'] * 1e3:+.1f} "
             f"[{lo * 1e3:+.1f}, {hi * 1e3:+.1f}]", f"{data['budget_s'] * 1e3:.0f}",
             "yes" if data["within_budget"] else "**no**", "yes" if data["all_same_text"] else "**no**"]]
    spec = data["speculation"]
    what = (f"End-to-end latency of the same requests through `adaptive-spec serve` (HTTP, non-streamed) and "
            f"through `generate` in process, on one decoder, paired and interleaved: [`{Path(data['prompts']).name}`]"
            f"({Path(data['prompts']).name}), {data['max_tokens']} new tokens, greedy, `static:{spec['drafter']}:"
            f"{spec['k']}` on both sides, {data['rounds']} rounds. Budget: 5% of the in-process p50 or 10 ms, "
            "whichever is larger.")
    header = ["in process p50 ms", "HTTP p50 ms", "p50 difference ms", "per-pair median ms [95% CI]",
              "budget ms", "within", "same text"]
    command = (f".venv/bin/python -m benchmarks.server_overhead --rounds {data['rounds']} "
               "--out benchmarks/results/server_overhead.json")
    return "\n\n".join(["## Server overhead", what, table(header, rows),
                        provenance(results_dir, ["server_overhead.json"], dates, command, machine_line(data))])


def serve_shift_section(results_dir: Path, dates: dict | None) -> str:
    if not (Path(results_dir) / "serve_shift.json").exists():
        return ""
    data = load(results_dir, "serve_shift.json")
    per_prompt = bool(data.get("per_prompt"))
    suffixes = ("", "_per_prompt") if per_prompt else ("",)
    at_speed = any("speed_factor" in run for run in data["runs"])
    timeline = any("simulated_e2e_s_timeline" in run for run in data["runs"])
    overheads = any("serving_overhead" in run for run in data["runs"])

    def overhead_cell(run: dict) -> str:
        o = run.get("serving_overhead")
        if o is None:
            return "none"
        return (f"{o['request_s'] * 1e3:.0f} + {o['step_s'] * 1e3:.1f}/step + {o['client_s'] * 1e3:.0f} ms"
                + (" †" if "from" in o else ""))

    def predicted(run: dict, speed: str) -> list[str]:
        cells = []
        for suffix in suffixes:
            sim, err = run.get("simulated_e2e_s" + suffix + speed), run.get("simulator_error" + suffix + speed)
            draws = run.get("simulated_e2e_s" + suffix + speed + "_seeds") if data.get("sim_seeds", 1) > 1 else None
            if sim is None:
                cells += ["-"] * 2
                continue
            for q in ("p50", "p95"):
                spread = ""
                if draws:  # the replays' errors, lowest to highest
                    errors = [d[q] / run["e2el_s"][q] - 1 for d in draws]
                    spread = f"; {min(errors):+.1%} to {max(errors):+.1%}"
                cells.append(f"{sim[q]:.2f} ({err[q]:+.1%}{spread})")
        return cells

    rows, calibrated_rows, speed_rows = [], [], []
    for run in data["runs"]:
        cells = [f"`{run['config']}`", f"{run['rate']:g}", str(run["round"] + 1), f"{run['completed']}/{run['requests']}",
                 f"{run['e2el_s']['p50']:.2f}", f"{run['e2el_s']['p95']:.2f}",
                 "-" if run["goodput_rps"] is None else f"{run['goodput_rps']:.3f}"]
        if timeline:
            factors = [f for _, f in run.get("speed_timeline") or ()]
            cells.append(f"×{min(factors):.2f}-{max(factors):.2f} over {len(factors)}" if factors else "none")
            rows.append(cells + ([overhead_cell(run)] if overheads else []) + predicted(run, "_timeline"))
            plain = run.get("plain_steps") or {}
            speed_rows.append(cells[:2] + [f"{plain['mean_s'] * 1e3:.1f} ms (×{run['speed_factor']:.2f})"
                                           if run.get("speed_factor") else "too few plain steps"]
                              + predicted(run, "_at_speed"))
            calibrated_rows.append(cells[:2] + predicted(run, ""))
        elif at_speed:
            plain = run.get("plain_steps") or {}
            cells.append(f"{plain['mean_s'] * 1e3:.1f} ms × {plain['count']:.0f} (×{run['speed_factor']:.2f})"
                         if run.get("speed_factor") else f"{plain.get('count', 0):.0f} steps: too few")
            rows.append(cells + predicted(run, "_at_speed"))
            calibrated_rows.append(cells[:2] + predicted(run, ""))
        else:
            rows.append(cells + predicted(run, ""))
    what = (f"`adaptive-spec loadgen` against one `adaptive-spec serve`: [`{Path(data['prompts']).name}`]"
            f"({Path(data['prompts']).name}) prompts"
            + (f" on `/v1/{'chat/completions' if data['endpoint'] == 'chat' else 'completions'}`" if data.get("endpoint") else "")
            + f", {' → '.join(f'{kind} {seconds:g} s' for kind, seconds in phase_plan(data['phases'], data['phase_s']))}, "
            f"Poisson arrivals, {data['max_tokens']} new tokens, greedy; every config replays the same seeded arrivals. "
            f"Goodput: requests per second meeting `{data['goodput_slos']}` (ms). The simulator replays each run's "
            f"completed requests with [`{Path(data['profile']).name}`](../{data['profile']}) and the same policy"
            + (", calibrated right before serving" if data.get("calibrated_first") else "")
            + (": *by kind* takes each request's class to be its prompt's kind (copy, open), *by prompt* its prompt, "
               "whose acceptance `calibrate --per-prompt` measured offline." if per_prompt else "."))
    if data.get("profile_streams") and per_prompt:
        what += (" The profile also holds each prompt's tokens and greedy answer (`calibrate --streams-only`), so *by "
                 "prompt* the simulator runs the engine's prompt lookup on them instead of drawing its acceptance, "
                 f"with each request's budget of {data['max_tokens']} tokens (an answer that ends sooner leaves the last "
                 "drafts running past its end, as in the engine).")
    if data.get("sim_seeds", 1) > 1:
        what += (f" The simulator draws acceptance at random, so each prediction is the median of {data['sim_seeds']} "
                 "replays with different seeds; in brackets its error, then the lowest and highest replay's.")
    if timeline:
        what += (" The machine's speed moves by a quarter and more within minutes here, so the server recorded every "
                 "decode step (a telemetry store with `steps=1`) and each run is replayed at the speed its own forwards "
                 f"ran, window by window ({data.get('timeline_window_s', 30):g} s windows; a window's factor is the "
                 "seconds its verifies took over what the profile prices the same verifies at: "
                 "`simulator.speed.timeline_from_steps`; the *speed windows* column gives the lowest and highest "
                 "factor and how many windows): one number per window for the machine's speed; acceptance, the "
                 "controller and queueing stay the simulator's to predict."
                 + (" Along the timeline the simulator also prices the server's time outside the forwards (the "
                    "scenario's `overhead`; *overhead* column, ms), measured on the plain requests that open and close "
                    "each run, streamed over an open connection as loadgen sends (none of the run's own requests: "
                    "`simulator.speed.serving_overhead`): each decode step's time besides its draft and verify; the "
                    "rest of the engine's time on a request (setup, wrap-up, the prefill's departure from its price "
                    "at the request's speed); and the time between client and engine (HTTP, chat template, "
                    "tokenizing), which holds nothing. † marks a run served before the benchmark measured it this "
                    "way: it takes the median of the runs that did (`--overhead-from`)." if overheads else "")
                 + " The second table predicts with one factor "
                 "for the whole run, from the plain steps (no draft verified) of its window on `/metrics`, which three "
                 "plain requests open and close; the third with the profile as calibrated.")
    elif at_speed:
        what += (" The machine's speed moves by a quarter and more within minutes here, so each run also measured what "
                 "the server's plain steps (no draft verified) cost over its window (`/metrics`, drafter `none`, after "
                 "minus before; the window opens and closes with three plain requests of open prompts, so a config that "
                 "never decodes plainly is measured too), and the first table's predictions use the profile with every "
                 "cost scaled by that over the profile's plain step (the factor in the *plain step* column): one number "
                 "for the machine's speed, from plain steps only; acceptance, the controller and queueing stay the "
                 "simulator's to predict. The second table predicts with the profile as calibrated.")
    header = ["config", "req/s offered", "round", "completed", "E2EL p50 s", "E2EL p95 s", "goodput req/s"]
    labels = (" by kind", " by prompt") if per_prompt else ("",)
    simulated = [f"simulated{label} {q} s (error)" for label in labels for q in ("p50", "p95")]
    also = "".join(f" --also-rate {r['rate']:g}" for r in data["runs"] if r["rate"] != data["rate"])
    flags = (" --calibrate" if data.get("calibrated_first") else "") + (" --per-prompt" if per_prompt else "")
    flags += f" --endpoint {data['endpoint']}" if data.get("endpoint") else ""
    command = (f".venv/bin/python -m benchmarks.serve_shift --rate {data['rate']:g} --phase-s {data['phase_s']:g} "
               f"--phases {data['phases']} "
               f"--rounds {data['rounds']}{also}{flags}"
               + (f" --sim-seeds {data['sim_seeds']}" if data.get("sim_seeds", 1) > 1 else "")
               + f" --profile {data['profile']} --out benchmarks/results/serve_shift.json")
    if data.get("caveat"):
        what += f" **Caveat:** {data['caveat']}"
    if timeline:
        tables = [table(header + ["speed windows"] + (["overhead"] if overheads else []) + simulated, rows),
                  "At the window's mean speed (its plain steps):",
                  table(["config", "req/s offered", "plain step"] + simulated, speed_rows),
                  "With the profile as calibrated:", table(["config", "req/s offered"] + simulated, calibrated_rows)]
    else:
        tables = [table(header + (["plain step in the window"] if at_speed else []) + simulated, rows)]
    if at_speed and not timeline:
        tables += ["With the profile as calibrated:", table(["config", "req/s offered"] + simulated, calibrated_rows)]
    return "\n\n".join(["## Served traffic through a shift", what, *tables,
                        provenance(results_dir, ["serve_shift.json"], dates, command, machine_line(data))])


def dashboard_section(results_dir: Path, dates: dict | None) -> str:
    if not (Path(results_dir) / "dashboard_render.json").exists():
        return ""
    data = load(results_dir, "dashboard_render.json")
    st, budget = data["store"], data["budget_s"]
    names = {"live": "Live", "controllers": "Controllers", "alerts": "Alerts", "whatif": "What-if (replay)"}
    rows = [[names.get(r["page"], r["page"]), r["window"], f"{r['raw_s']:.2f}", f"{r['rollups_s']:.2f}",
             "yes" if r["rollups_s"] < budget and not r["errors"] else "**no**"] for r in data["pages"]]
    what = (f"Each page rendered whole by Streamlit's `AppTest`, data cache cleared before each render (every "
            f"refresh of the Live page misses it), on a synthetic store of {st['requests']:,} requests, "
            f"{st['interval_rows']:,} `intervals` rows and {st['step_rows']:,} `steps` rows over "
            f"{st['span_days']:g} days ({st['file_mb']:.0f} MB), generated and written through the store's own "
            f"`write_batch` in {st['build_s']:.0f} s (a writer opening the same store without rollups builds them in "
            f"{st['migrate_s']:.0f} s). "
            f"Median of {data['renders']} renders reading the rollups (`adaptive_spec/telemetry/rollup.py`) and of "
            f"{data['raw_renders']} reading the raw rows, as on a store written before them; budget {budget:g} s.")
    header = ["page", "window", "raw rows s", "rollups s", f"under {budget:g} s"]
    latency = {"TTFT", "TPOT", "E2E"}
    odd = [(r["window"], t) for r in data["pages"] for t in r.get("tiles_differing", [])
           if t.split(" ")[0] not in latency]
    from_histograms = [r["window"] for r in data["pages"] if r["page"] == "live"
                       and any(t.split(" ")[0] in latency for t in r.get("tiles_differing", []))]
    tiles = ("The Live page showed the same tiles both ways" + (
        f", but for latency percentiles read from the histograms (windows of more than 10,000 requests: "
        f"{', '.join(from_histograms)})" if from_histograms else "") + ("." if not odd else "; other tiles differed: "
        + ", ".join(f"{t} ({w})" for w, t in odd) + " (the window moves between the two renders)."))
    c, w = data["concurrent"], data["concurrent"]["writer"]
    rate = ", ".join(f"{v:g} {k}" for k, v in c["write_rate_per_s"].items())
    concurrent = (f"While another process wrote to the store through the telemetry writer ({rate} rows/s; "
                  f"{w['written']:,} rows in {w['batches']} transactions, {w['write_errors']} write errors, "
                  f"{w['dropped']} dropped), the Live page rendered {c['renders']} times in {c['seconds']:g} s "
                  f"(windows in turn): median {c['render_s']['median']:.2f} s, p95 {c['render_s']['p95']:.2f} s, "
                  f"max {c['render_s']['max']:.2f} s, {len(c['page_errors'])} page errors.")
    m = data["machine"]
    machine = (f"{m['cpus']} cores, Python {m['python']}, SQLite {m['sqlite']}, Streamlit {m['streamlit']}, "
               f"{m['platform']}; load average {m['load_before'][0]:.2f} before, {m['load_after_pages'][0]:.2f} "
               "after the page renders (others may share the machine)")
    command = (f".venv/bin/python -m benchmarks.dashboard_render --requests {st['requests']} --interval-rows "
               f"{st['interval_rows']} --step-rows {st['step_rows']} --renders {data['renders']} --raw-renders "
               f"{data['raw_renders']} --concurrent-s {c['seconds']:g} --out benchmarks/results/dashboard_render.json")
    return "\n\n".join(["## Dashboard render times", what, table(header, rows), tiles + " " + concurrent,
                        provenance(results_dir, ["dashboard_render.json"], dates, command, machine)])


def not_reported_section(results_dir: Path) -> str:
    present = [n for n in NOT_REPORTED if (Path(results_dir) / n).exists()]
    if not present:
        return ""
    lines = [f"- [`{n}`](results/{n}): {NOT_REPORTED[n]}." for n in present]
    return "## Files not reported\n\n" + "\n".join(lines)


# --- the whole page, and the README's summary ----------------------------------------------------

HEADER = """# Benchmark results

Written by [`make_results.py`](make_results.py) from the JSON files in [`results/`](results/); do not
edit by hand (`python benchmarks/make_results.py --check` fails when this page and the files disagree).
Model: SmolLM2-135M-Instruct (the embedded default), greedy decoding, CPU. Tokens/s are new tokens over
wall seconds, prefill included. *Best fixed config*: the fastest of `plain` and the `static:<drafter>:<k>`
configs on the same prompts, the configuration one would otherwise have to find by hand. *Best
transformers config*: the fastest of transformers' own `generate` (`hf-plain`, `hf-prompt-lookup`:
prompt lookup decoding, `hf-assisted-int8`: assisted generation with the int8 self-draft). *Equal to
plain*: outputs token for token identical to plain decoding's. Each date is the file's last commit date.
Speed on these shared machines varies from second to second: a single run's ratios carry that noise,
a median of rounds less of it."""

SHIFT = ("A stream whose traffic shifts, served by one long-lived controller per config: {prompts} runs "
         "copy-heavy prompts (repeat or copy a given text), then open-ended ones (stories, explanations), then "
         "copy-heavy again; {tokens} new tokens each, every config run prompt by prompt, interleaved, in one process.")
WORKLOADS = ("Three kinds of prompt from {prompts}: copy-heavy, open-ended, and *collapse* prompts (bait text "
             "that prompt lookup matches but the answer does not copy); {tokens} new tokens, one long-lived "
             "controller per config, every config run prompt by prompt, interleaved, in one process.")
ROUNDS = ("The same workloads ({prompts}, {tokens} new tokens), the interleaved sequence run {rounds} times; in the "
          "first table each (config, prompt) is reported by its median round, the paired ratios use every round.")
ENGINE = ("The engine's fixed configs against transformers' `generate` on {prompts} (copy-heavy and open-ended "
          "prompts), {tokens} new tokens.")


def render(results_dir: Path = RESULTS_DIR, dates: dict[str, str] | None = None) -> str:
    """RESULTS.md for the files in ``results_dir``; ``dates`` (file name -> date) replaces git's."""
    results_dir = Path(results_dir)
    sections = [
        HEADER,
        bench_section(results_dir, "shift.json", "Shifting traffic", SHIFT, dates),
        timeline_section(results_dir, dates),
        replay_section(results_dir, "replay_shift.json", dates),
        bench_section(results_dir, "workloads.json", "Per workload", WORKLOADS, dates),
        bench_section(results_dir, "workloads_rounds3.json", "Per workload, median of rounds", ROUNDS, dates),
        replay_section(results_dir, "replay_workloads.json", dates),
        bench_section(results_dir, "engine.json", "Engine against transformers", ENGINE, dates),
        corpus_section(results_dir, dates),
        revisions_section(results_dir, dates, "controller_ab.json",
                          "The controller's request start, before and after", "the controller", CONTROLLER_AB_INTRO),
        policy_overhead_section(results_dir, dates),
        telemetry_section(results_dir, dates),
        validation_section(results_dir, ["sim_validation.json", "sim_validation_adaptive.json"], dates),
        simulator_speed_section(results_dir, dates),
        serve_shift_section(results_dir, dates),
        server_overhead_section(results_dir, dates),
        batching_section(results_dir, dates),
        serve_batching_section(results_dir, dates),
        serve_batching_section(results_dir, dates, "serve_batching_test.json",
                               "Batched serving by concurrency, held-out prompts"),
        serve_batching_c4_section(results_dir, dates),
        serve_batching_section(results_dir, dates, "serve_batching_test_priced.json",
                               "Batched serving by concurrency, held-out prompts, again, at the profile's prices"),
        serve_batching_section(results_dir, dates, "serve_batching_test_perrow.json",
                               "Batched serving by concurrency, held-out prompts, drafts cut row by row"),
        serve_batching_section(results_dir, dates, "serve_batching_test_perrow2.json",
                               "Batched serving by concurrency, held-out prompts, drafts cut row by row, again"),
        serve_batching_bounded_section(results_dir, dates),
        serve_batching_unbounded_section(results_dir, dates),
        cap_pace_section(results_dir, dates),
        serve_batching_goodput_section(results_dir, dates),
        serve_tradeoff_section(results_dir, dates),
        prefill_chunk_section(results_dir, dates),
        packed_forward_section(results_dir, dates),
        suffix_section(results_dir, dates),
        revisions_section(results_dir, dates, "refactor_ab.json",
                          "The step-protocol refactor against the engine before it", "the engine"),
        dashboard_section(results_dir, dates),
        not_reported_section(results_dir),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def lossless_count(results_dir: Path) -> tuple[int, int]:
    """(outputs equal to plain, outputs) over every config and prompt of the `bench` results."""
    equal = total = 0
    for name in PROMPTS:
        for entry in load(results_dir, name)["configs"].values():
            equal += sum(1 for p in entry["prompts"] if p.get("equals_plain"))
            total += len(entry["prompts"])
    return equal, total


def headline(results_dir: Path = RESULTS_DIR) -> str:
    """The README's summary table: a few figures, each from the file it links."""
    results_dir = Path(results_dir)
    link = "[`{0}`](benchmarks/results/{0})".format
    shift = {r["kind"]: r for r in adaptive_rows(load(results_dir, "shift.json"))}
    rounds = adaptive_rows(load(results_dir, "workloads_rounds3.json"))
    per_kind = ", ".join(f"{r['kind']} {r['vs_fixed']:.2f}×" for r in rounds if r["kind"] != "all")
    equal, total = lossless_count(results_dir)
    gate = next(r for r in load(results_dir, "policy_overhead.json")["results"]
                if r["case"] == "adaptive + match gate [3 drafters]")
    real = load(results_dir, "telemetry_overhead_real.json")
    errors = {}
    for name in ("sim_validation_adaptive.json", "sim_validation.json"):
        run = load(results_dir, name)
        worst = max(run["comparison"], key=lambda row: abs(row["error"]))
        errors[run["policy"]] = ({**worst, "metric": worst["metric"].split(" (")[0]}, name)
    (adaptive_worst, adaptive_file), (fixed_worst, fixed_file) = errors["adaptive"], errors["static:ngram:8"]
    rows = [
        ["shifting stream: `adaptive` vs the best fixed config",
         f"**{shift['all']['vs_fixed']:.2f}×** (`{shift['all']['fixed_name']}`); copy phases "
         f"{shift['copy']['vs_fixed']:.2f}×, open phase {shift['open']['vs_fixed']:.2f}×", link("shift.json")],
        ["shifting stream: `adaptive` vs the best transformers config",
         f"**{shift['all']['vs_peer']:.2f}×** (`{shift['all']['peer_name']}`)", link("shift.json")],
        corpus_row(results_dir) or ["per workload, median of rounds: `adaptive` vs the best fixed config of each",
                                    per_kind, link("workloads_rounds3.json")],
        ["greedy outputs equal to plain decoding (every config, prompt, run)", f"{equal}/{total}",
         f"the {len(PROMPTS)} `bench` runs in [`RESULTS.md`](benchmarks/RESULTS.md)"],
        ["controller cost per step (`adaptive` + match gate, 3 drafters, median)", f"{gate['median_us']:.1f} µs",
         link("policy_overhead.json")],
        ["telemetry (SQLite store) on the real engine", f"{real['overhead']:.2%} slower",
         link("telemetry_overhead_real.json")],
        ["simulator vs real engine, largest error",
         f"`adaptive` {adaptive_worst['error']:+.1%} ({adaptive_worst['metric']}); `static:ngram:8` "
         f"{fixed_worst['error']:+.1%} ({fixed_worst['metric']})", f"{link(adaptive_file)}, {link(fixed_file)}"],
    ]
    if (results_dir / "batching.json").exists():
        batching = load(results_dir, "batching.json")
        widest = f"batched {max(batching['max_batch'])}"
        plain = next(r for r in batching["summary"] if r["config"] == "plain" and r["mode"] == widest)
        rows.append([f"{batching['requests']} requests at once, plain: {widest} vs one by one",
                     f"**{plain['throughput_ratio']:.2f}×** output tok/s [{plain['ratio_ci'][0]:.2f}, "
                     f"{plain['ratio_ci'][1]:.2f}]", link("batching.json")])
    workloads = suffix_workloads(results_dir)
    if workloads:  # one row: the README is short
        gains = [compare(load(results_dir, w.bench)["per_round"], "adaptive-suffix", "adaptive", "") for w in workloads]
        rows.append([f"repetitive {'; '.join(w.name.removeprefix('repetitive ') for w in workloads)}: "
                     "`adaptive` with `suffix` vs without",
                     "; ".join(f"**{c.median:.2f}×** [{c.low:.2f}, {c.high:.2f}]" for c in gains),
                     ", ".join(link(w.bench) for w in workloads)])
    return table(["measured", "result", "data"], rows)


def corpus_row(results_dir: Path) -> list[str] | None:
    """The README's row for the public corpus's test split (paired medians and intervals), once it ran."""
    if not (results_dir / "corpus_test.json").exists():
        return None
    data = load(results_dir, "corpus_test.json")
    block = per_round_of(data)
    peer, _ = best(data, None, fixed=False)
    plain, other = compare(block, "adaptive", "plain", ""), compare(block, "adaptive", peer, "")
    return [f"public corpus, test split ({len(block['kinds'])} prompts, {data['rounds']} rounds): `adaptive` vs plain; "
            "vs best transformers config",
            f"**{plain.median:.2f}×** [{plain.low:.2f}, {plain.high:.2f}]; **{other.median:.2f}×** [{other.low:.2f}, "
            f"{other.high:.2f}] (`{peer}`)", "[`corpus_test.json`](benchmarks/results/corpus_test.json)"]


def with_readme_block(readme: str, block: str) -> str:
    """``readme`` with the text between its results markers replaced by ``block``."""
    start, end = readme.find(README_BEGIN), readme.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"README.md lacks the markers {README_BEGIN!r} ... {README_END!r}")
    return readme[:start] + README_BEGIN + "\n" + block + "\n" + readme[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if RESULTS.md or the README block is out of date")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    wanted = {RESULTS_MD: render(args.results_dir),
              README: with_readme_block(README.read_text(), headline(args.results_dir))}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(BENCH_DIR.parent)} is out of date: run python benchmarks/make_results.py",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path.relative_to(BENCH_DIR.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
