"""RESULTS.md's batching sections: the batched engine against batch-1, the batched server by
concurrency (with the simulator's predictions of each run), and chunked prefill."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmarks.results_kit import load, machine_line, provenance, table
from benchmarks.rounds import compare_best_fixed
from benchmarks.serve_batching import arrivals_seen, pooled_by_rows, recorded_cut
from policies.batch_cap import BatchDraftCap


def batching_section(results_dir: Path, dates: dict | None) -> str:
    if not (Path(results_dir) / "batching.json").exists():
        return ""
    data = load(results_dir, "batching.json")
    rows = []
    for row in data["summary"]:
        ratio = (f"{row['throughput_ratio']:.2f}× [{row['ratio_ci'][0]:.2f}, {row['ratio_ci'][1]:.2f}]"
                 if "throughput_ratio" in row else "1")
        rows.append([f"`{row['config']}`", row["mode"], f"{row['tokens_per_s']:.1f}", ratio, f"{row['e2e_p50_s']:.2f}",
                     f"{row['e2e_p95_s']:.2f}", f"{row['speculative_step_share']:.0%}",
                     "yes" if row["identical"] else "**no**"])
    sizes = ", ".join(str(n) for n in data["max_batch"])
    what = (f"{data['requests']} requests arriving at once ([`{Path(data['prompts']).name}`]({Path(data['prompts']).name}), "
            f"copy-heavy and open-ended alternating), {data['max_tokens']} new tokens each, greedy, each request "
            "with a controller of its own, in one process: served one after another by `generate` (*batch-1*) and "
            f"together by `BatchedDecoder` with up to {sizes} rows (*batched N*; each config keeps one draft cap "
            f"for the run, as a server does), the modes interleaved over {data['rounds']} rounds. Output tok/s: all "
            "output tokens over the set's wall time, median of rounds; ratio: against batch-1 in the same round, "
            "median and 95% bootstrap interval over rounds; E2E: each request's latency from the common arrival, "
            "pooled over rounds; *drafting*: share of decode steps that verified a draft; *same tokens*: every "
            "request's tokens equal its batch-1 tokens.")
    header = ["config", "mode", "output tok/s", "vs batch-1 [95% CI]", "E2E p50 s", "E2E p95 s", "drafting", "same tokens"]
    command = (f".venv/bin/python -m benchmarks.batching --configs {','.join(data['configs'])} --max-batch "
               f"{','.join(str(n) for n in data['max_batch'])} --rounds {data['rounds']} --requests {data['requests']} "
               f"--max-tokens {data['max_tokens']} --out benchmarks/results/batching.json --plot benchmarks/results/batching.png")
    plot = "![throughput and drafting by batch size](results/batching.png)"
    return "\n\n".join(["## Continuous batching", what, table(header, rows), plot,
                        provenance(results_dir, ["batching.json"], dates, command, machine_line(data))])


def serve_batching_section(results_dir: Path, dates: dict | None, name: str = "serve_batching.json",
                           heading: str = "Batched serving by concurrency") -> str:
    if not (Path(results_dir) / name).exists():
        return ""
    data = load(results_dir, name)
    image = name.replace(".json", ".png")
    prompts = Path(data["prompts"])
    link = prompts.relative_to("benchmarks").as_posix() if prompts.parts[0] == "benchmarks" else f"../{prompts.as_posix()}"
    bound = "off" if data.get("plain_slowdown", 0) is None else f"{data.get('plain_slowdown', 0):g}"
    rounds = data.get("rounds", 1)
    predicted = data.get("profile") is not None
    at_speed = predicted and all("simulator_error_at_speed" in r for r in data["runs"])
    timeline = predicted and any("simulator_error_timeline" in r for r in data["runs"])
    replica_drafting = timeline and any(r.get("simulated_drafting_timeline") is not None for r in data["runs"])
    priced = any(r.get("priced_tokens_per_s") for r in data["runs"])
    rows = []
    for round_, level in ((r, c) for r in range(rounds) for c in data["concurrency"]):
        mine = [r for r in data["runs"] if r["concurrency"] == level and r.get("round", 0) == round_]
        best_fixed = max((r for r in mine if r["config"] != "adaptive"), key=lambda r: r["output_tokens_per_s"])
        for run in sorted(mine, key=lambda r: data["configs"].index(r["config"])):
            simulated, fast = run.get("simulator_error"), run.get("simulator_error_at_speed")
            rows.append([*([str(round_ + 1)] if rounds > 1 else []), str(level), f"`{run['config']}`",
                         f"{run['completed']}/{run['requests']}",
                         f"{run['output_tokens_per_s']:.1f}",
                         *([f"{run['priced_tokens_per_s']:.1f}" if run.get("priced_tokens_per_s") else "-"] if priced else []),
                         f"{run['e2el_s']['p50']:.2f}", f"{run['e2el_s']['p95']:.2f}",
                         f"{run['speculative_step_share']:.0%}",
                         *(_errors(simulated) if predicted else []),
                         *([f"{run['plain_step']['mean_s'] * 1e3:.1f} ms", f"{fast['p50']:+.0%}", f"{fast['p95']:+.0%}"]
                           if at_speed else []),
                         *(_errors(run.get("simulator_error_timeline")) if timeline else []),
                         *([_share(run.get("simulated_drafting_timeline"))] if replica_drafting else []),
                         "best fixed" if run is best_fixed else ""])
    runs_text = (f"{rounds} rounds: every config at every concurrency once a round, configs rotating within each "
                 "concurrency and from round to round; each run on a traffic key of its own (controllers start fresh)"
                 if rounds > 1 else "One run per config and concurrency, configs rotating within each concurrency")
    drawn = (f"its `{data['split']}` split, prompts no tuning looked at, of every kind" if data.get("split")
             else "copy-heavy and open-ended")
    what = (f"`adaptive-spec loadgen` against one `adaptive-spec serve --max-batch {data['max_batch']} --drafters ngram"
            + (f" --plain-slowdown {bound}" if "plain_slowdown" in data else "")
            + (f" --batch-objective {data['batch_objective']}" if "batch_objective" in data else "")
            + (f" --batch-cut {recorded_cut(data)}" if "batch_objective" in data else "")
            + (f" --profile {Path(data['profile']).name}`" if data.get("cap_warmed") else "`")
            + (" (its batch cap's costs warm-started from the profile below): " if data.get("cap_warmed") else ": ")
            + f"{data['requests']} requests per run from [`{prompts.name}`]({link}) "
            f"({drawn}, the same seeded choice every run) on `/v1/chat/completions`, sent as fast "
            f"as the concurrency allows, {data['max_tokens']} new tokens, greedy. A config is a per-request "
            "`speculation` override on a traffic key of its own (`static:ngram:8`: ngram, k = 8; `plain`: off; "
            f"`adaptive`: the server's controllers, their drafts cut to what pays in the batch). {runs_text}. *Drafting*: "
            "share of decode steps that verified a draft, from the responses' own statistics.")
    if predicted:
        what += (f" *Simulated*: the simulator's batching replica (max batch {data['max_batch']}, prefill chunk "
                 f"{data['prefill_chunk']}) replaying each run's completed requests as the client sent them "
                 "(in order, at most the run's concurrency in flight: each goes once the simulated server finishes "
                 f"one), each with its own prompt's acceptance, on [`{Path(data['profile']).name}`]"
                 f"(../{data['profile']}) (calibrated with `--batch-sizes` right before the runs): its p50 and p95 "
                 "end-to-end latency against the measured ones.")
        if data.get("profile_streams"):
            what += (" The profile also holds each prompt's tokens and greedy answer, so the replica runs the engine's "
                     f"prompt lookup on them, with each request's budget of {data['max_tokens']} tokens, instead of "
                     "drawing acceptance")
            what += (" (added after the runs: `adaptive-spec calibrate --prompts "
                     f"{Path(data['prompts']).as_posix()} --per-prompt --max-new-tokens {data['max_tokens']} "
                     f"--streams-only --out {data['profile']}`, then the same command with `--resimulate "
                     "benchmarks/results/" + name + _forwards_option(data) + "`)." if data.get("resimulated", _before_live_streams(data))
                     else " (`calibrate --per-prompt` records them).")
    if predicted and data.get("repredicted"):
        created = data.get("profile_created")
        ride = data.get("profile_ride_calibrated")
        what += (" The predictions were redone after the runs, " + (f"on the profile as calibrated at {created} "
                 "(by the `--calibrate` step of the same command), " if created else "on the same profile, ")
                 + (f"with its `ride` samples (what a prompt riding in a batched step adds to it) from a "
                    f"calibration at {ride}, " if ride else "")
                 + f"by the same command with `--resimulate benchmarks/results/{name}{_forwards_option(data)}`.")
    if at_speed:
        what += (" *Plain step*: the machine's batch-1 speed around the run, from the server's /metrics over a few "
                 "plain requests sent alone just before and just after it; *at speed*: the same replay with every "
                 "cost of the profile scaled so that its plain step costs that (the machine's speed drifts between "
                 "the calibration and a run).")
    if timeline:
        what += (" *Timeline*: the same replay at the speed the run's own forwards ran, window by window (the "
                 "server records every decode step; each window's forwards, a batch's rows together, against what "
                 "the profile prices them at: `simulator.speed.timeline_from_steps`)" +
                 ("; prefill, a one-sequence forward, there at the speed of the plain probes around the run instead "
                  "(the timeline's windows are batched forwards, whose price the profile's batched fit sets)."
                  if any("prefill_speed_timeline" in r for r in data["runs"]) else "."))
        overheads = [r["serving_overhead"] for r in data["runs"] if "serving_overhead" in r and "simulator_error_timeline" in r]
        if overheads:
            steps, wrap = ([1e3 * o[k] for o in overheads] for k in ("step_s", "request_s"))
            what += (" It also holds the replica for the time the server spent between forwards, as each run's steps "
                     "recorded it (`simulator.speed.batched_overhead`): per batched step the median gap between "
                     f"forwards ({min(steps):.1f} to {max(steps):.1f} ms over the runs), and per request what a "
                     f"forward from which requests left took beyond it ({min(wrap):.1f} to {max(wrap):.1f} ms: the "
                     "answer's wrap-up), charged as each request joins." + _overhead_effect(data["runs"]))
        warmed = [r["cap_steps_timeline"] for r in data["runs"] if r.get("cap_steps_timeline")]
        if warmed:
            what += (" Its batch cap starts where the server's was when the run began: one server serves every run, "
                     "and its cap, warmed from the same profile, has learned from every forward before, so the "
                     "replica's, warmed alike, learns the forwards the server ran before the run (its step records, "
                     f"{min(warmed)} to {max(warmed)} forwards) before its first request." + _cap_effect(data["runs"]))
        if replica_drafting:
            what += (" *Timeline drafting*: the share of the replay's decode steps that verified a draft, as "
                     "*drafting* counts the run's: where the replica's batch cap drafts otherwise than the server's "
                     + ("(the two start alike, then each learns from the forwards it runs), " if warmed else
                        "(the replica's starts from the profile, the server's had learned from every run before), ")
                     + "their latencies part.")
    if priced:
        what += (" *Priced tok/s*: the run's output tokens over what its decode forwards cost at the profile's prices "
                 "(`simulator.speed.priced_seconds`: each forward as the engine laid it out, every row at its own "
                 "width over the slot axis the engine kept): the seconds they would have taken at the calibration's "
                 "speed throughout. It holds the controllers' choices without the machine's swings in speed, which "
                 "move a run's wall-clock figures by more than most differences between configs; prefill, drafting "
                 "and the time between forwards are not in it.")
    header = [*(["round"] if rounds > 1 else []), "concurrency", "config", "completed", "output tok/s",
              *(["priced tok/s"] if priced else []), "E2EL p50 s",
              "E2EL p95 s", "drafting", *(["simulated p50", "simulated p95"] if predicted else []),
              *(["plain step", "at speed p50", "at speed p95"] if at_speed else []),
              *(["timeline p50", "timeline p95"] if timeline else []),
              *(["timeline drafting"] if replica_drafting else []), ""]
    command = (".venv/bin/python -m benchmarks.serve_batching "
               + (f"--prompts {prompts.as_posix()} " if prompts.as_posix() != "benchmarks/shift.jsonl" else "")
               + (f"--split {data['split']} " if data.get("split") else "")
               + f"--concurrency {','.join(map(str, data['concurrency']))} "
               f"--requests {data['requests']} --max-tokens {data['max_tokens']} "
               + (f"--rounds {rounds} " if rounds > 1 else "")
               + f"--out benchmarks/results/{name} --plot benchmarks/results/{image}"
               + (f" --prefill-chunk {data['prefill_chunk']}" if "prefill_chunk" in data else "")
               + (f" --plain-slowdown {bound}" if "plain_slowdown" in data and data["plain_slowdown"] != BatchDraftCap.plain_slowdown else "")
               + (f" --batch-objective {data['batch_objective']}" if data.get("batch_objective", BatchDraftCap.objective)
                  != BatchDraftCap.objective else "")
               + (f" --batch-cut {recorded_cut(data)}" if recorded_cut(data) != BatchDraftCap.cut else "")
               + (f" --profile {data['profile']} --calibrate" if predicted else "") + _forwards_out(results_dir, name))
    plot = f"![throughput, latency and drafting by concurrency](results/{image})"
    parts = [f"## {heading}", what, table(header, rows)]
    if data.get("comparisons") and rounds > 1:
        compared = _with_best_fixed(data)
        at_prices = any("priced_throughput" in c for c in compared)
        parts += ["`adaptive` against each fixed config, round by round: output tok/s of `adaptive` over the "
                  "config's, and the config's E2EL p95 over `adaptive`'s (above 1: `adaptive` better in both); "
                  "the median of the rounds, the lowest and highest round in brackets, and a verdict only where "
                  "every round agrees." + (" *Priced*: the same for priced tok/s." if at_prices else ""),
                  table(["concurrency", "against", "tok/s ratio", "", "p95 ratio", "",
                         *(["priced tok/s ratio", ""] if at_prices else [])],
                        [[str(c["concurrency"]), f"`{c['config']}`" if c["config"] != "best fixed" else "the round's best fixed",
                          ratio_spread(c["throughput"]), c["throughput"]["verdict"], ratio_spread(c["e2el_p95"]),
                          c["e2el_p95"]["verdict"],
                          *([ratio_spread(c["priced_throughput"]), c["priced_throughput"]["verdict"]]
                            if "priced_throughput" in c else ["-", ""] if at_prices else [])] for c in compared])]
        parts += [_arrivals(data)]
    if any("drafting_by_rows" in r for r in data["runs"]):
        parts += [_by_rows(data)]
    parts += [plot, provenance(results_dir, [name, *_forwards_file(results_dir, name)], dates, command, machine_line(data))]
    return "\n\n".join(parts)


def _with_best_fixed(data: dict) -> list[dict]:
    """The file's comparisons, each concurrency's followed by ``adaptive`` against the round's best
    fixed config (the one marked *best fixed* above, by output tok/s)."""
    out = []
    for level in data["concurrency"]:
        out += [c for c in data["comparisons"] if c["concurrency"] == level]
        best = compare_best_fixed(data["runs"], level)
        out += [best] if best else []
    return out


def _arrivals(data: dict) -> str:
    """What the slowest requests waited for: other requests' prompts going in (``arrivals_seen``)."""
    def cell(level: int, config: str) -> str:
        seen = [arrivals_seen(r) for r in data["runs"] if r["concurrency"] == level and r["config"] == config]
        seen = [n for n in seen if n is not None]
        return f"{statistics.mean(seen):.1f}" if seen else "none completed"

    header = ["concurrency", *(f"`{c}`" for c in data["configs"])]
    rows = [[str(level), *(cell(level, c) for c in data["configs"])] for level in data["concurrency"] if level > 1]
    return ("Requests that arrived while the slowest quarter of a run's requests ran, mean over those requests "
            "and over rounds. The client keeps the concurrency's number of requests in flight, so a config "
            "whose answers end sooner sends the next requests sooner, and every newcomer's prompt makes the running "
            "rows wait (riding in their step's forward, it adds what its tokens cost). The slowest requests are those that drafts barely speed up, such "
            "as open-ended ones, so under a config that speeds up the others they wait for more prefills than "
            "under plain decoding.\n\n" + table(header, rows))


def _by_rows(data: dict) -> str:
    """Speculation kept by how full the batch was (``drafting_by_rows``), what the kept drafts won,
    and what the profile's costs say a draft must win there (``draft_break_even``)."""
    drafting = [c for c in data["configs"] if c != "plain"]
    pooled = {c: pooled_by_rows(data["runs"], c) for c in drafting}
    seen = sorted({n for counts in pooled.values() for n in counts})
    won = all(v[2] is not None for counts in pooled.values() for v in counts.values())
    be = data.get("draft_break_even")
    # the replica's own iterations, replayed at the runs' speed (files predicted before it was counted: none)
    replayed = pooled_by_rows(data["runs"], "adaptive", "simulated_drafting_by_rows_timeline") \
        if "adaptive" in drafting else {}

    def cells(config: str, n: int) -> list[str]:
        drafted, total, accepted = pooled[config].get(n, (0, 0, None))
        share = f"{drafted / total:.0%} ({total})" if total else "-"
        return [share, *([f"{accepted / drafted:.2f}" if drafted else "-"] if won else [])]

    def simulated(n: int) -> list[str]:
        if not replayed:
            return []
        drafted, total, _ = replayed.get(n, (0, 0, None))
        return [f"{drafted / total:.0%} ({total})" if total else "-"]

    rows = [[str(n), *(cell for c in drafting for cell in cells(c, n)), *simulated(n),
             *([f"{be['tokens'][str(n)]:.2f}"] if be else [])] for n in seen]
    text = ("Speculation by how full the batch was: the server's record of every decode step, the rows grouped by "
            "the forward that scored them; per number of rows in the forward, the share of those rows' steps that "
            "verified a draft (the row-steps in brackets), over every run of the config, all concurrencies and "
            "rounds together" + ("; *won*: the draft tokens accepted per step that verified one." if won else "."))
    if be:
        text += (f" *Must win*: from the profile's cost fit, at the runs' mean context ({be['context']:.0f} tokens), "
                 f"the tokens beyond its next one that one row's {be['k']}-token draft must get accepted for the "
                 "step to bring more tokens per second than a plain step of the same rows (the other rows' tokens "
                 "are the same either way). A row alone is never cut: its own controller weighs its drafts.")
    if replayed:
        text += (" *Simulated*: the same share in the simulator's timeline replays of the `adaptive` runs (above), "
                 "per number of sequences its iterations decoded: whether the replica's batch cap, the server's "
                 "code on the profile's costs, keeps drafts at the batch sizes where the server's kept them.")
    header = ["rows in the forward", *(h for c in drafting for h in [f"`{c}` drafting", *([f"`{c}` won"] if won else [])]),
              *(["`adaptive` simulated"] if replayed else []), *(["must win (tokens)"] if be else [])]
    return "\n\n".join([text, table(header, rows)])


def _before_live_streams(data: dict) -> bool:
    # files from before a live run recorded whether its profile had streams got them by --resimulate
    return "plain_slowdown" not in data


def ratio_spread(ratio: dict) -> str:
    return f"{ratio['median']:.2f}× [{ratio['low']:.2f}, {ratio['high']:.2f}]"


def _errors(error: dict | None) -> list[str]:
    """A run's simulated p50 and p95 error cells ("not replayed" where the simulator could not)."""
    return [f"{error['p50']:+.0%}", f"{error['p95']:+.0%}"] if error else ["not replayed", ""]


def prefill_chunk_section(results_dir: Path, dates: dict | None) -> str:
    if not (Path(results_dir) / "prefill_chunk.json").exists():
        return ""
    data = load(results_dir, "prefill_chunk.json")
    rows = [[row.get("way", "alone"), row["chunk"], f"{row['join_steps']:.0f}",
             f"{row['worst_step_s']:.2f} [{row['worst_step_ci'][0]:.2f}, {row['worst_step_ci'][1]:.2f}]",
             f"{row['median_step_s']:.2f}", f"{row['ttft_s']:.2f} [{row['ttft_ci'][0]:.2f}, {row['ttft_ci'][1]:.2f}]",
             "yes" if row["identical"] else "**no**"] for row in data["summary"]]
    what = (f"A {data['long_tokens']}-token prompt (the public corpus's RAG and summarization prompts, one after "
            f"another) arrives while {data['rows']} short requests decode together in `BatchedDecoder` (plain "
            f"decoding, {data['max_tokens']} new tokens each). *prefill_chunk*: prompt tokens a step may prefill "
            "while rows decode (`none`: the whole prompt in one step). *prompt*: how each chunk goes in: `rides` "
            "in the step's decode forward (the engine's default), or `alone`, a prefill forward of its own before "
            "it (the `padded` layout, which cannot carry riders; with every row one token wide its decode forward "
            "is the same). *Longest step*: the worst gap the decoding "
            "rows saw between two tokens while the prompt joined; *newcomer TTFT*: from its arrival to the end "
            f"of the step that gave its first token (that step's decode forward included, alike for every setting). Median of {data['rounds']} rounds with the settings' order rotated, 95% bootstrap interval "
            "over rounds; *same tokens*: every request's tokens equal the same request served alone.")
    header = ["prompt", "prefill_chunk", "steps to join", "longest step s [95% CI]", "median step s", "newcomer TTFT s [95% CI]",
              "same tokens"]
    command = (f".venv/bin/python -m benchmarks.prefill_chunk --chunks {','.join(data['chunks'])}"
               + (f" --ways {','.join(data['ways'])}" if "ways" in data else "") + " --rounds "
               f"{data['rounds']} --long-tokens {data['long_tokens']} --rows {data['rows']} --max-tokens "
               f"{data['max_tokens']} --out benchmarks/results/prefill_chunk.json")
    return "\n\n".join(["## Chunked prefill", what, table(header, rows),
                        provenance(results_dir, ["prefill_chunk.json"], dates, command, machine_line(data))])


def packed_forward_section(results_dir: Path, dates: dict | None) -> str:
    if not (Path(results_dir) / "packed_forward.json").exists():
        return ""
    data = load(results_dir, "packed_forward.json")
    blocks = data["results"]
    first = blocks[0]
    contexts = sorted({b["context"] for b in blocks})
    what = (f"What one row's draft costs the other rows of a batch. A padded forward scores rows × the widest row's "
            f"tokens, so a row verifying {first['k']} drafts makes every row's step {first['k'] + 1} tokens wide. A "
            "packed forward scores only each row's own tokens, in one sequence. *Dense packed* (transformers' own "
            "forward, no engine code) lays the rows' histories side by side in one cache, every token attending over "
            "all of them through a 4-D mask; *copied*, it first lays them there from the padded layout. *Engine before* is "
            "the batched engine's packed step as it was: dense packed, copied, with its mask built and the new keys "
            "and values put back into the rows (its code kept in the benchmark). *Engine packed* (`SlotCache`, what the "
            "engine runs now) sends the packed tokens through the model but spreads them back into their rows for "
            "attention, over each row's own cache as the padded forward attends: nothing copied, no attention across "
            "rows. "
            f"{', '.join(str(c) for c in contexts)} tokens of history a row; median of {data['rounds']} calls per "
            "forward, the forwards rotated; × is against the padded one-token forward of the same rows.")
    header = ["rows", "context", "forward", "tokens scored", "median ms", "× padded one-token"]
    rows = [[str(block["rows"]), str(block.get("context", first["context"])), case["case"], str(case["tokens"]),
             f"{case['median_ms']:.1f}", f"{case['vs_padded_plain']:.2f}×"]
            for block in blocks for case in block["cases"]]

    def check(b: dict) -> str:
        forms = b.get("checks") or {"packed": b}
        return ", ".join(f"{form} largest logit difference {c['max_abs_logit_diff']:.1e}, argmax "
                         f"{'equal at every position' if c['argmax_agrees'] else '**differs**'}" for form, c in forms.items())

    checks = "; ".join(f"{b['rows']} rows at {b.get('context', first['context'])}: {check(b)}" for b in blocks)
    command = (f".venv/bin/python -m benchmarks.packed_forward --rows {','.join(str(r) for r in sorted({b['rows'] for b in blocks}))} "
               f"--context {','.join(str(c) for c in contexts)} --k {first['k']} --rounds {data['rounds']} "
               "--out benchmarks/results/packed_forward.json")
    return "\n\n".join(["## Padded against packed batch forwards", what, table(header, rows),
                        f"Packed against padded, every row's logits: {checks}.",
                        provenance(results_dir, ["packed_forward.json"], dates, command, machine_line(data))])


def serve_batching_goodput_section(results_dir: Path, dates: dict | None) -> str:
    """The same served benchmark with the batch cap's plain-row bound off (the batch's goodput alone)."""
    return _served_summary(
        results_dir, dates, "serve_batching_goodput.json",
        "Batched serving without the bound on plain requests' slowdown",
        "The shift stream's command with `--plain-slowdown off`"
        + (" (the server's default)" if BatchDraftCap.plain_slowdown is None else "") + ": the batch cap maximises "
        "the batch's goodput alone, with no bound on what the others' drafts cost a request decoding plainly (the "
        "packed forward already runs).", "goodput alone")


def serve_batching_c4_section(results_dir: Path, dates: dict | None) -> str:
    """The held-out run again at 4 requests in flight alone, over more rounds: where the three rounds
    above left ``adaptive`` against the best fixed config inside the noise."""
    name, before = "serve_batching_test_c4.json", "serve_batching_test.json"
    if not ((Path(results_dir) / name).exists() and (Path(results_dir) / before).exists()):
        return ""
    data, earlier = load(results_dir, name), load(results_dir, before)
    levels = ", ".join(map(str, data["concurrency"]))
    said = [f"{c['throughput']['median']:.2f}× at {c['concurrency']} requests ({c['throughput']['verdict']})"
            for level in data["concurrency"] for c in [compare_best_fixed(earlier["runs"], level)] if c is not None]
    return _served_summary(
        results_dir, dates, name,
        f"Batched serving on held-out prompts, {levels} requests at once, {data['rounds']} rounds",
        f"The held-out command above at {levels} requests in flight only, with {data['rounds']} rounds instead of "
        f"{earlier['rounds']}, on a server of its own and a profile calibrated for it (so as to leave the one above as "
        f"it was). In those {earlier['rounds']} rounds `adaptive`'s throughput over each round's best fixed config was "
        + "; ".join(said) + ".",
        f"held-out prompts, {levels} at once")


def serve_batching_bounded_section(results_dir: Path, dates: dict | None) -> str:
    """An earlier held-out run at the same bound, on the same engine and cap: a second measurement."""
    return _served_summary(
        results_dir, dates, "serve_batching_test_b005.json",
        "Batched serving on held-out prompts, bound 0.05, an earlier run",
        "The held-out command above with `--plain-slowdown 0.05`, run earlier the same day on the same engine and "
        "batch cap (before the bound was chosen on dev prompts: [how](#choosing-the-objective)): a second measurement "
        "of the same settings, shown beside the one above rather than in place of either (the profile named below "
        "has since been calibrated again, by the later runs). Requests decoding plainly are kept within 5% of plain "
        "decoding's cost per token, widened by their own accepted drafts.",
        "held-out prompts, bound 0.05, earlier run")


def serve_batching_unbounded_section(results_dir: Path, dates: dict | None) -> str:
    """The held-out run without the bound: the server's default for a while, until the rule that
    weighs plain decoding too chose the bound again."""
    return _served_summary(
        results_dir, dates, "serve_batching_test_off.json",
        "Batched serving on held-out prompts, without the bound",
        "The held-out command above with `--plain-slowdown off`, the server's default while the first rule "
        "([how](#choosing-the-default-bound)) had chosen it, until the rule that weighs plain decoding too chose "
        "0.05 ([how](#choosing-the-objective)): the batch cap maximises the batch's goodput alone (the profile named "
        "below has since been calibrated again, by the later runs).",
        "held-out prompts, without the bound")


def _served_summary(results_dir: Path, dates: dict | None, name: str, heading: str, intro: str, caption: str) -> str:
    """A ``serve_batching`` file in brief: per config and concurrency the median of the rounds, then
    ``adaptive`` against each fixed config."""
    if not (Path(results_dir) / name).exists():
        return ""
    data = load(results_dir, name)
    rows = []
    for level in data["concurrency"]:
        for config in data["configs"]:
            mine = [r for r in data["runs"] if r["concurrency"] == level and r["config"] == config]
            rows.append([str(level), f"`{config}`", median_of(mine, lambda r: r["output_tokens_per_s"], "{:.1f}"),
                         median_of(mine, lambda r: r["e2el_s"]["p95"], "{:.2f}"),
                         median_of(mine, lambda r: r["speculative_step_share"], "{:.0%}")])
    what = (f"{intro} {data['rounds']} rounds; per config and concurrency the median of the rounds, the lowest and "
            "highest in brackets; then `adaptive` against each fixed config as above.")
    if data.get("cap_warmed"):
        what += (f" The server's batch cap starts from [`{Path(data['profile']).name}`](../{data['profile']}) "
                 "(`serve --profile`), calibrated by the same command right before the runs.")
    errors = [r["simulator_error_timeline"][q] for r in data["runs"] if "simulator_error_timeline" in r
              for q in ("p50", "p95")]
    if errors:
        between = any("serving_overhead" in r for r in data["runs"])
        what += (" The simulator's batching replica, replaying each run at the speed its own forwards ran"
                 + (" and with the time its server spent between them" if between else "")
                 + (", its batch cap started where the server's was" if any(r.get("cap_steps_timeline")
                                                                            for r in data["runs"]) else "")
                 + " (as above), "
                 f"predicts p50 and p95 end-to-end latency within 10% in {sum(abs(e) <= 0.10 for e in errors)} of "
                 f"{len(errors)} cases ({min(errors):+.1%} to {max(errors):+.1%})." + _overhead_effect(data["runs"])
                 + _cap_effect(data["runs"]))
        if _forwards_option(data):
            what += (" The predictions were redone after the runs by the same command with `--resimulate "
                     f"benchmarks/results/{name}{_forwards_option(data)}`.")
    comparisons = table(["concurrency", "against", "tok/s ratio", "", "p95 ratio", ""],
                        [[str(c["concurrency"]), f"`{c['config']}`", ratio_spread(c["throughput"]), c["throughput"]["verdict"],
                          ratio_spread(c["e2el_p95"]), c["e2el_p95"]["verdict"]] for c in data["comparisons"]])
    image = name.replace(".json", ".png")
    bound = "off" if data.get("plain_slowdown") is None else f"{data['plain_slowdown']:g}"
    prompts = data["prompts"]
    command = (".venv/bin/python -m benchmarks.serve_batching "
               + (f"--prompts {prompts} " if prompts != "benchmarks/shift.jsonl" else "")
               + (f"--split {data['split']} " if data.get("split") else "")
               + f"--concurrency {','.join(map(str, data['concurrency']))} "
               f"--requests {data['requests']} --max-tokens {data['max_tokens']} --rounds {data['rounds']} "
               f"--prefill-chunk {data['prefill_chunk']} --plain-slowdown {bound} "
               + (f"--batch-objective {data['batch_objective']} " if "batch_objective" in data else "")
               + (f"--batch-cut {recorded_cut(data)} " if recorded_cut(data) != BatchDraftCap.cut else "")
               + f"--out benchmarks/results/{name} "
               f"--plot benchmarks/results/{image}"
               + (f" --profile {data['profile']} --calibrate" if data.get("profile") else "") + _forwards_out(results_dir, name))
    return "\n\n".join([f"## {heading}", what,
                        table(["concurrency", "config", "output tok/s", "E2EL p95 s", "drafting"], rows), comparisons,
                        f"![throughput, latency and drafting by concurrency, {caption}](results/{image})",
                        provenance(results_dir, [name, *_forwards_file(results_dir, name)], dates, command,
                                   machine_line(data))])


def median_of(runs: list[dict], value, fmt: str) -> str:
    values = sorted(value(r) for r in runs)
    mid = values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
    return f"{fmt.format(mid)} [{fmt.format(values[0])}, {fmt.format(values[-1])}]"


def _beside(runs: list[dict], other: str) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The timeline replays' p50 and p95 errors and those of the same replays made otherwise
    (``simulator_error_timeline`` + ``other``), over the runs that have both; None where none has."""
    pairs = [(r["simulator_error_timeline"][q], r["simulator_error_timeline" + other][q])
             for r in runs if "simulator_error_timeline" + other in r for q in ("p50", "p95")]
    return tuple(zip(*pairs)) if pairs else None


def _within(errors: Sequence[float]) -> str:
    return (f"within 10% in {sum(abs(e) <= 0.10 for e in errors)} of {len(errors)} cases, mean error "
            f"{statistics.mean(errors):+.1%}")


def _overhead_effect(runs: list[dict]) -> str:
    """The timeline replays with the time between forwards against the same replays without it."""
    both = _beside(runs, "_without_overhead")
    if both is None:
        return ""
    with_, without = both
    return f" Without that time the same replays are {_within(without)}; with it, {_within(with_)}."


def _cap_effect(runs: list[dict]) -> str:
    """The timeline replays whose cap started where the server's was against the same replays from the profile alone."""
    both = _beside(runs, "_cold")
    if both is None:
        return ""
    warm, cold = both
    return (f" Over the {len(warm) // 2} runs with forwards before them: with the cap started from the profile alone, "
            f"{_within(cold)}; started as the server's was, {_within(warm)}.")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _forwards_option(data: dict) -> str:
    """``--forwards FILE`` where the predictions were redone with a server's forwards (``serve_batching
    --resimulate``); a live run's own forwards need none."""
    history = data.get("cap_history")
    return f" --forwards {Path(history).as_posix()}" if history and history != "the server's own" else ""


def _forwards_file(results_dir: Path, name: str) -> list[str]:
    """The run's forwards (cap_pace's input), where the file is there."""
    forwards = f"{Path(name).stem}_forwards.json"
    return [forwards] if (Path(results_dir) / forwards).exists() else []


def _forwards_out(results_dir: Path, name: str) -> str:
    """The option that wrote the run's forwards (cap_pace's input), where the file is there."""
    forwards = f"{Path(name).stem}_forwards.json"
    return f" --forwards-out benchmarks/results/{forwards}" if (Path(results_dir) / forwards).exists() else ""


PACE_FILES = {"cap_pace.json": "shift stream", "cap_pace_test.json": "held-out prompts",
              "cap_pace_goodput.json": "shift stream, goodput alone"}


def cap_pace_section(results_dir: Path, dates: dict | None) -> str:
    """The batch cap's prices against the served runs' own forwards, with its pace and without."""
    present = [n for n in PACE_FILES if (Path(results_dir) / n).exists()]
    if not present:
        return ""
    rows, names, commands = [], [], []
    for name in present:
        data = load(results_dir, name)
        shape = data["shape"]
        for variant, v in data["variants"].items():
            errors = [r["ratio_error"] for r in v["adaptive_runs"].values()]
            spread = (f"{statistics.median(errors):.2f} [{min(errors):.2f}, {max(errors):.2f}]" if errors else "-")
            rows.append([PACE_FILES[name], variant, f"{v['start_ratio']['low']:.2f} to {v['start_ratio']['high']:.2f}",
                         spread, f"{statistics.median(abs(e - 1) for e in errors):.3f}" if errors else "-",
                         f"{v['median_abs_log_error']:.3f}"])
        forwards = Path(data["forwards_file"]).name
        names += [name, forwards]
        commands.append(f".venv/bin/python -m benchmarks.cap_pace benchmarks/results/{forwards} --profile {data['profile']} "
                        f"--rows {shape['rows']} --width {shape['width']:g} --out benchmarks/results/{name}")
    what = ("The bound weighs what a wider forward costs against a plain one of the same rows, so the batch cap "
            "needs the ratio of the two prices, and each of its cost fits learns from its own kind of forward, at "
            "whatever speed the machine ran when that kind last came. The cap's *pace* (the seconds forwards of any "
            "kind take per second their fits price them at, over the last forward or two) takes that common speed "
            "out of what the fits learn. Each run above also wrote every forward its server ran (`--forwards-out`); "
            "here they are replayed, in order, through a cap warmed from the same profile, once as the server ran "
            "it (*with pace*) and once without (`pace_decay=1`). Before each forward the cap prices it. *At run "
            f"starts*: the price of a forward of {shape['rows']} rows each {shape['width']:g} tokens wide over a "
            "plain one's, lowest and highest over the runs (the machine's shapes do not change between runs, so a "
            "wide range is the cap's drift). *Ratio error*: per `adaptive` run, the median of seconds over price "
            "on its wider forwards over the same on its plain ones (1: the cap priced drafts against plain steps as "
            "the machine ran them; below 1: too dear, so the bound refused drafts it could afford), the median over "
            "runs, lowest and highest in brackets, and the median distance from 1. *Error*: median |log(seconds / "
            "price)| over every forward of two rows or more.")
    header = ["set", "cap", "ratio at run starts", "ratio error", "its median distance from 1", "error"]
    return "\n\n".join(["## The batch cap's prices against the served runs' forwards", what, table(header, rows),
                        provenance(results_dir, names, dates, "\n".join(commands), "that of the runs above "
                                   "(this replays their records)")])
