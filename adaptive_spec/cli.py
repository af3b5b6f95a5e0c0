"""The ``adaptive-spec`` command line: generate, bench, demo, calibrate, validate-sim, replay, and the
mounted ``serve``, ``loadgen``, ``dashboard``, ``telemetry``, ``alerts`` and ``simulate`` commands.

Layers load only what they need: this module imports neither torch nor transformers at the top,
so ``simulate``, ``telemetry`` and ``alerts`` run without them; each engine command imports the
engine when it runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from adaptive_spec.errors import AdaptiveSpecError, InvalidParameterError
from adaptive_spec.preflight import (check_drafters, check_model_cache, check_positive_int, check_prompt_text, check_seed,
                                     check_writable, read_prompts, reworded)

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="Lossless speculative decoding with a self-tuning controller.")
err = Console(stderr=True)
DTYPES = ("float32", "bfloat16", "float16")


def _setup_runtime(device: str, dtype: str):
    """Quiet, offline-first runtime; returns the torch device and dtype."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    if dtype not in DTYPES:
        raise InvalidParameterError("dtype", dtype, f"expected one of {', '.join(DTYPES)}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidParameterError("device", device, "CUDA is not available on this machine")
    elif device != "cpu" and not device.startswith("cuda"):
        raise InvalidParameterError("device", device, "expected auto, cpu, cuda or cuda:N")
    return torch.device(device), getattr(torch, dtype)


PROGRESS_DELAY_S = 2.0  # work that ends sooner prints no progress: a refused input stays one error line
PROGRESS_INTERVAL_S = 10.0  # then a line this often in a log: it shows the run is alive, not every step


@contextmanager
def _progress(text: str):
    """Long work's progress on stderr; yields ``say(message)``, which replaces ``text``. On a
    terminal rich's spinner; elsewhere (a log, a pipe), where the spinner prints nothing, the latest
    message as a line every ``PROGRESS_INTERVAL_S``, from ``PROGRESS_DELAY_S`` on (a thread: a
    model load says nothing while it runs). Both are text, not markup: a model path or a prompt id
    may hold brackets."""
    if err.is_terminal:
        with err.status(escape(text)) as status:
            yield lambda message: status.update(escape(message))
        return
    latest, done = [text], threading.Event()

    def report() -> None:
        wait = PROGRESS_DELAY_S
        while not done.wait(wait):
            err.print(latest[0], markup=False, highlight=False, soft_wrap=True)
            wait = PROGRESS_INTERVAL_S

    reporter = threading.Thread(target=report, name="progress", daemon=True)
    reporter.start()
    try:
        yield lambda message: latest.__setitem__(0, message)
    finally:
        done.set()
        reporter.join()


TELEMETRY_HELP = ("sqlite | sqlite:PATH | prometheus:[HOST:]PORT (HOST default 127.0.0.1; 0.0.0.0 = all interfaces) | otlp | off, comma-separated to combine. Default: the embedded "
                  "SQLite store at $ADAPTIVE_SPEC_TELEMETRY_DB or ~/.local/share/adaptive-spec/telemetry.sqlite.")


def _observers(spec: str) -> list:
    from adaptive_spec.telemetry import build_observers

    return build_observers(spec)


def _split(names: str) -> list[str]:
    return [n.strip() for n in names.split(",") if n.strip()]


def _runtime_and_drafters(device: str, dtype: str, drafters: str | None, name: str):
    """The torch device and dtype, then the drafters to load there: the device's default set when
    ``drafters`` is None, else the given ones, refused at once (before any model loads) if the
    device cannot run one (``int8`` on CUDA), is unknown, or is a model that is not there.
    ``name`` is the option, for the error."""
    from adaptive_spec.drafters import default_drafters

    torch_device, torch_dtype = _setup_runtime(device, dtype)
    given = None if drafters is None else (_split(drafters) or ["none"])
    chosen = default_drafters(torch_device.type, given, name)
    check_drafters(chosen, name)
    return torch_device, torch_dtype, chosen


def _load_decoder(model: str, drafters: list[str], torch_device, torch_dtype, chat_template: bool | None,
                  observers: list | None = None):
    """The decoder; a drafter that fails to load is an error about ``drafters`` (``generate``
    renames it to its own option, ``drafter``)."""
    from adaptive_spec.decoder import SpeculativeDecoder
    from adaptive_spec.drafters import build_drafter
    from adaptive_spec.models import load_model

    check_model_cache(model)
    with _progress(f"loading {model} ..."):
        target = load_model(model, device=torch_device, dtype=torch_dtype)
        built = []
        for spec in dict.fromkeys(drafters):
            if spec == "none":
                continue
            try:
                built.append(build_drafter(spec, target))
            except AdaptiveSpecError as exc:  # a drafter model's errors name `model`: name the option given
                raise reworded(exc, "drafters", spec) from exc
    try:
        return SpeculativeDecoder(target, built, chat_template=chat_template, observers=observers)
    except InvalidParameterError as exc:
        if exc.name != "drafter":
            raise
        raise reworded(exc, "drafters", exc.value) from exc


SHORTHANDS = ("static", "heuristic", "adaptive")
POLICY_HELP = ("static | heuristic (over the first --drafter; static with --k) | adaptive (chooses drafter and k "
               "every step) | a full spec: plain, static:<drafter>:<k>, heuristic:<drafter>, adaptive, each "
               "with optional +<option>=<value> (e.g. adaptive+max_k=8, static:int8:8+early_stop=learned).")


def _spec_drafter(policy: str) -> str | None:
    """The drafter a full spec names (static and heuristic), else None; malformed specs are left
    to ``_make_policy``, which names the error."""
    from policies.registry import parse_spec

    if policy in SHORTHANDS:
        return None
    try:
        parsed = parse_spec(policy)
    except ValueError:
        return None
    return parsed.drafter if parsed.kind in ("static", "heuristic") else None


def _make_policy(policy: str, drafters: list[str], k: int):
    """The controller for ``--policy``: a shorthand, completed by ``--drafter`` and ``--k``, or a
    full spec of ``policies/registry.py``."""
    from policies.registry import make_policy

    spec = {"static": f"static:{drafters[0]}:{k}", "heuristic": f"heuristic:{drafters[0]}",
            "adaptive": "adaptive"}.get(policy, policy)
    try:
        return make_policy(spec, [d for d in drafters if d != "none"])
    except ValueError as exc:
        raise InvalidParameterError("policy", policy, str(exc)) from exc


@app.command()
def generate(
    prompt: str = typer.Option(..., "--prompt", "-p", help="Prompt text (a chat template is applied for chat models). Text that is not valid UTF-8 is rejected, not replaced."),
    model: str = typer.Option("smollm2", help="smollm2 | gemma3 | a local Hugging Face folder | a hub id."),
    policy: str = typer.Option("adaptive", help=POLICY_HELP),
    drafter: Optional[str] = typer.Option(None, help="Comma-separated drafters: none | ngram | suffix | int8 | model:<path>. static and heuristic use the first. Default: what the device runs, ngram,int8 on CPU, ngram on CUDA (int8 is CPU only)."),
    k: int = typer.Option(8, help="Draft length for the static policy (0 = plain decoding)."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Tokens to generate at most."),
    temperature: float = typer.Option(0.0, help="0 = greedy; > 0 samples (exact rejection sampling)."),
    top_k: int = typer.Option(0, "--top-k", help="Keep the k most likely tokens (0 = off)."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass in (0, 1]."),
    seed: Optional[int] = typer.Option(None, help="Sampler seed, an integer in [-2**63, 2**64 - 1]."),
    stop: list[str] = typer.Option([], "--stop", help="Stop string (repeatable)."),
    chat_template: Optional[bool] = typer.Option(None, "--chat-template/--no-chat-template", help="Apply the model's chat template (default: when it has one)."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N."),
    dtype: str = typer.Option("float32", help="float32 | bfloat16 | float16."),
    stream: bool = typer.Option(False, help="Print text as it is accepted."),
    telemetry: str = typer.Option("sqlite", help=TELEMETRY_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: text, token_ids, finish_reason, stats."),
) -> None:
    """Generate a completion with speculative decoding."""
    from adaptive_spec.config import GenerationConfig, validate_draft_len

    check_prompt_text("prompt", prompt)
    validate_draft_len(k)
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=temperature > 0, temperature=temperature or 1.0,
                           top_k=top_k, top_p=top_p, seed=seed, stop_strings=tuple(stop))
    # a spec that names its drafter loads it when --drafter is not given
    torch_device, torch_dtype, drafters = _runtime_and_drafters(device, dtype, drafter or _spec_drafter(policy),
                                                                "drafter")
    controller = _make_policy(policy, drafters, k)
    observers = _observers(telemetry)
    try:
        decoder = _load_decoder(model, drafters, torch_device, torch_dtype, chat_template, observers)
    except InvalidParameterError as exc:
        raise reworded(exc, "drafter", exc.value) if exc.name == "drafters" else exc
    if stream and not as_json:
        for piece in decoder.stream(prompt, cfg, policy=controller):
            print(piece, end="", flush=True)
        print()
        return
    result = decoder.generate(prompt, cfg, policy=controller)
    if as_json:
        print(json.dumps(result.to_dict()))
        return
    print(result.text)
    s = result.stats
    acc = f"{s.acceptance_rate:.2f}" if s.acceptance_rate is not None else "-"
    mal = f"{s.mean_acceptance_length:.2f}" if s.mean_acceptance_length is not None else "-"
    err.print(f"[dim]{s.new_tokens} tokens · {s.tokens_per_s:.1f} tok/s · acceptance {acc} · mean acceptance length {mal} · {s.steps} steps · {result.finish_reason}[/dim]")


@app.command()
def bench(
    prompts: Path = typer.Option(..., "--prompts", help="JSONL, one object a line: id (unique), prompt (UTF-8 text), optional kind, split and source."),
    split: str | None = typer.Option(None, "--split", help="Only the prompts of this split (dev: tuning may look at it; test: published tables), e.g. of benchmarks/corpus/corpus.jsonl."),
    configs: str = typer.Option("plain,static:ngram:8,hf-plain,hf-prompt-lookup", help="Comma-separated configs: plain, static:<drafter>:<k>, heuristic:<drafter>, adaptive, adaptive-suffix (adaptive with the suffix drafter, drafting from earlier prompts' outputs), hf-plain, hf-prompt-lookup, hf-assisted-int8."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens"),
    model: str = typer.Option("smollm2"),
    out: Path = typer.Option(Path("bench.json"), "--out", help="Where to write the JSON results."),
    device: str = typer.Option("auto"),
    dtype: str = typer.Option("float32"),
    markdown: bool = typer.Option(False, help="Also print the table as Markdown (for the README)."),
    steps: bool = typer.Option(False, "--steps", help="Keep every step's record in the JSON (for timelines)."),
    telemetry: str = typer.Option("sqlite", help=TELEMETRY_HELP),
    rounds: int = typer.Option(1, "--rounds", help="Run the interleaved sequence this many times, the configs' order rotated each round; paired ratios with 95% bootstrap intervals over prompts and rounds."),
    checkpoint: Path | None = typer.Option(None, "--checkpoint", help="Save the run's state here after every prompt; the same command run again resumes from it (a long run survives being stopped). A pickle: resume only from files you wrote."),
) -> None:
    """Run configs side by side on the same prompts (greedy) and compare with plain decoding."""
    from adaptive_spec import bench_checkpoint
    from adaptive_spec.bench import bench_configs, markdown_paired, markdown_table, render_paired, render_table, run_bench
    from adaptive_spec.models import load_model
    from adaptive_spec.outputs import write_json_atomic
    from adaptive_spec.prompts import select_split

    # everything that can fail without the model fails now, not after the run
    check_positive_int("max_new_tokens", max_new_tokens)
    check_positive_int("rounds", rounds)
    rows = read_prompts(prompts)
    if split is not None:
        rows = select_split(rows, split, str(prompts))
    check_writable(out, "out")
    names = [c.strip() for c in configs.split(",") if c.strip()]
    measured = bench_configs(names)
    for config in measured:
        check_drafters(config.drafters, "configs", config.name)
    if checkpoint is not None:
        check_writable(checkpoint, "checkpoint")
        # a checkpoint that is not one, or another command's, is refused now, not once the model has loaded
        bench_checkpoint.load(checkpoint, bench_checkpoint.signature(
            model, rows, [c.name for c in measured], max_new_tokens, rounds, steps))
    observers = _observers(telemetry)
    torch_device, torch_dtype = _setup_runtime(device, dtype)
    check_model_cache(model)
    with _progress(f"loading {model} ..."):
        target = load_model(model, device=torch_device, dtype=torch_dtype)
    with _progress("benchmarking ...") as say:
        result = run_bench(target, rows, names, max_new_tokens, progress=lambda msg: say(f"benchmarking {msg}"),
                           record_steps=steps, observers=observers, rounds=rounds, checkpoint=checkpoint)
    result["prompts_file"] = str(prompts)  # RESULTS.md names the file a result was run on
    if split is not None:
        result["split"] = split
    console = Console(width=200)
    console.print(render_table(result))  # before the file: a failed write loses no result
    console.print(render_paired(result))
    if markdown:
        print(markdown_table(result))
        print(markdown_paired(result))
    write_json_atomic(out, result, "out")
    err.print(f"wrote {out}", soft_wrap=True)


@app.command()
def demo(
    model: str = typer.Option("smollm2", help="Model to demo on."),
    max_new_tokens: int = typer.Option(40, "--max-new-tokens", help="Tokens per request at most (40: about one copied paragraph)."),
    requests_per_phase: int = typer.Option(2, "--requests-per-phase", help="Requests in each of the three phases "
                                           "(copy-heavy, open-ended, copy-heavy)."),
    drafters: str = typer.Option("ngram", help="Comma-separated drafters the adaptive controller chooses among. "
                                 "Prompt lookup only by default: the int8 self-drafter costs seconds to build and "
                                 "on CPU its drafts rarely pay (try ngram,int8)."),
    telemetry: str = typer.Option("sqlite", help=TELEMETRY_HELP),
) -> None:
    """Serve a stream that shifts from copy-heavy to open-ended requests and back under the adaptive
    controller, a fixed n-gram config and plain decoding, interleaved; print the speed-ups and check
    every output against plain decoding's."""
    from adaptive_spec.demo import run_demo
    from adaptive_spec.telemetry.spec import SqliteSpec, parse_spec

    check_positive_int("max_new_tokens", max_new_tokens)
    check_positive_int("requests_per_phase", requests_per_phase)
    torch_device, torch_dtype, names = _runtime_and_drafters("auto", "float32", drafters, "drafters")
    observers = _observers(telemetry)
    store = next((str(p.path) for p in parse_spec(telemetry) if isinstance(p, SqliteSpec)), None)
    decoder = _load_decoder(model, names, torch_device, torch_dtype, None, observers)
    summary = run_demo(decoder, [d for d in names if d != "none"], requests_per_phase, max_new_tokens,
                       Console(), store)
    for observer in observers:  # the store has what the dashboard is pointed at before we exit
        getattr(observer, "flush", lambda: None)()
    if not summary["identical"]:
        raise typer.Exit(1)


@app.command()
def calibrate(
    model: str = typer.Option("smollm2"),
    prompts: Path = typer.Option(Path("benchmarks/workloads.jsonl"), "--prompts", help="JSONL prompts; their kind is the request class."),
    split: Optional[str] = typer.Option(None, "--split", help="Only the prompts of this split (dev | test)."),
    drafters: Optional[str] = typer.Option(None, help="Comma-separated drafters to profile. Default: what the device runs, ngram,int8 on CPU, ngram on CUDA."),
    out: Path = typer.Option(Path("simulator/profiles/smollm2_cpu.json"), "--out", help="Profile JSON to write (simulator/PROFILE.md)."),
    repeats: int = typer.Option(5, help="Timed repeats per sample (the median is kept)."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Tokens per generation when measuring acceptance."),
    per_prompt: bool = typer.Option(False, "--per-prompt", help="Also one acceptance class per prompt, named by its id "
                                    "(to replay a trace that records each request's prompt)."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="Comma-separated row counts (>= 2) at which to "
                                              "also time the batched engine's step, for the simulator's batching mode."),
    streams_only: bool = typer.Option(False, "--streams-only", help="Only record each prompt's tokens and greedy "
                                      "answer into the existing --out profile's `streams` (no timing; costs and "
                                      "acceptance kept, so a run predicted with the profile still lines up)."),
    device: str = typer.Option("auto"),
    dtype: str = typer.Option("float32"),
) -> None:
    """Time prefill, verify and drafting on this device and measure acceptance: a simulator profile."""
    from adaptive_spec.calibrate import calibrate as run_calibration, check_per_prompt
    from adaptive_spec.outputs import write_json_atomic

    check_positive_int("repeats", repeats)
    check_positive_int("max_new_tokens", max_new_tokens)
    sizes = _batch_sizes(batch_sizes)
    rows = read_prompts(prompts)
    if split is not None:
        from adaptive_spec.prompts import select_split

        rows = select_split(rows, split, str(prompts))
    if per_prompt:
        check_per_prompt(rows, prompts)
    check_writable(out, "out")
    if streams_only and sizes:
        raise InvalidParameterError("batch_sizes", batch_sizes, "--streams-only times nothing: drop one of the two")
    existing = _profile_for_streams(out, rows, model) if streams_only else None
    torch_device, torch_dtype, names = _runtime_and_drafters(device, dtype, drafters, "drafters")
    decoder = _load_decoder(model, names, torch_device, torch_dtype, None)
    if existing is not None:
        from adaptive_spec.calibrate import record_streams

        with _progress(f"recording {len(rows)} prompts' greedy answers ..."):
            existing.setdefault("streams", {}).update(record_streams(decoder, rows, max_new_tokens))
        write_json_atomic(out, existing, "out")
        err.print(f"wrote streams of {len(rows)} prompts into {out}", soft_wrap=True)
        return
    with _progress("calibrating ...") as say:
        profile = run_calibration(decoder, rows, repeats, max_new_tokens, progress=lambda m: say(f"calibrating: {m}"),
                                  per_prompt=per_prompt, batch_sizes=sizes)
    plain = next(v["seconds"] for v in profile["verify"] if v["tokens"] == 1)
    classes = list(profile["acceptance"])
    shown = ", ".join(classes) if len(classes) <= 12 else f"{', '.join(classes[:12])}, ... ({len(classes)} in all)"
    err.print(f"plain step {plain * 1000:.1f} ms; acceptance classes: {shown}", soft_wrap=True)
    write_json_atomic(out, profile, "out")
    err.print(f"wrote {out}", soft_wrap=True)


def _profile_for_streams(out: Path, rows: list, model: str) -> dict:
    """The profile ``--streams-only`` adds to: it must exist, load, be ``model``'s (its streams are
    token ids of the model's tokenizer) and have a class per prompt id."""
    import json

    from simulator.profile import profile_from_dict

    if not out.is_file():
        raise InvalidParameterError("out", str(out), "--streams-only adds to an existing profile: no such file")
    try:
        raw = json.loads(out.read_text(encoding="utf-8"))
        profile = profile_from_dict(raw, str(out))
    except ValueError as exc:  # JSONDecodeError included
        raise InvalidParameterError("out", str(out), f"not a profile ({exc})") from None
    calibrated_on = profile.metadata.get("model")
    if calibrated_on is not None and calibrated_on != model:
        raise InvalidParameterError("model", model, f"{out} was calibrated on {calibrated_on!r}: its streams would "
                                    "hold another tokenizer's ids; record them with that model")
    missing = sorted({r.id for r in rows} - set(profile.acceptance))
    if missing:
        raise InvalidParameterError("out", str(out), f"has no class for prompt id {missing[0]!r}: calibrate it with "
                                    "--per-prompt on these prompts first")
    return raw


def _batch_sizes(raw: str | None) -> list[int]:
    if raw is None:
        return []
    try:
        sizes = sorted({int(n) for n in raw.split(",") if n.strip()})
    except ValueError:
        raise InvalidParameterError("batch_sizes", raw, "must be comma-separated integers") from None
    if not sizes or sizes[0] < 2:
        raise InvalidParameterError("batch_sizes", raw, "each must be >= 2 (batch 1 is always timed)")
    return sizes


@app.command("validate-sim")
def validate_sim(
    profile: Path = typer.Option(Path("simulator/profiles/smollm2_cpu.json"), help="Profile from `adaptive-spec calibrate`."),
    prompts: Path = typer.Option(Path("benchmarks/workloads.jsonl"), "--prompts", help="Prompts; their kind is the request class."),
    policy: str = typer.Option("static:ngram:8", help="Policy spec used by both the engine and the simulator."),
    rate: float = typer.Option(0.25, help="Poisson arrival rate, requests/s (moderate load: about half the capacity)."),
    requests: int = typer.Option(40, help="Requests in the trace."),
    output_tokens: int = typer.Option(64, "--output-tokens", help="Token budget per request (end of sequence stops "
                                      "it earlier; the simulator replays the lengths the engine produced)."),
    seed: int = typer.Option(0, help="Seeds the trace and the simulator, an integer in [0, 2**64 - 1]."),
    model: str = typer.Option("smollm2"),
    drafters: Optional[str] = typer.Option(None, help="Comma-separated drafters the engine loads. Default: what the device runs, ngram,int8 on CPU, ngram on CUDA."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N."),
    out: Path = typer.Option(Path("benchmarks/results/sim_validation.json"), "--out"),
) -> None:
    """Run one seeded open-loop workload on the real engine and in the simulator; compare latency and throughput."""
    from rich.table import Table

    from adaptive_spec.outputs import write_json_atomic
    from benchmarks.sim_validation import compare, make_trace, run_real, simulate_trace, summarize_real
    from policies.registry import make_policy

    if not rate > 0:  # also refuses nan
        raise InvalidParameterError("rate", rate, "must be > 0")
    check_positive_int("requests", requests)
    check_positive_int("output_tokens", output_tokens)
    check_seed(seed, signed=False)  # it seeds numpy and the simulator too
    if not profile.exists():
        raise InvalidParameterError("profile", str(profile), "file not found; run `adaptive-spec calibrate` first")
    rows = read_prompts(prompts)
    check_writable(out, "out")
    torch_device, torch_dtype, names = _runtime_and_drafters(device, "float32", drafters, "drafters")
    try:
        make_policy(policy, [d for d in names if d != "none"])  # fail before loading the model
    except ValueError as exc:
        raise InvalidParameterError("policy", policy, str(exc)) from exc
    sim_profile = _check_simulator_inputs(profile, rows, policy, seed)
    decoder = _load_decoder(model, names, torch_device, torch_dtype, None)
    trace = make_trace(decoder, rows, rate, requests, output_tokens, seed)
    with _progress("serving the trace on the real engine ...") as say:
        served = run_real(decoder, trace, policy, progress=lambda m: say(f"real engine: {m}"))
    measured = summarize_real(served)
    predicted = simulate_trace(served, sim_profile, policy, seed)  # what was served, at the lengths produced
    table = Table(title=f"simulator vs real engine · {requests} requests · Poisson {rate}/s · {policy}")
    for col in ("metric", "measured", "predicted", "error"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    comparison = compare(measured, predicted)
    for row in comparison:
        table.add_row(row["metric"], f"{row['measured']:.3f}", f"{row['predicted']:.3f}", f"{row['error']:+.1%}")
    Console(width=120).print(table)
    write_json_atomic(out, {"policy": policy, "rate": rate, "requests": requests, "seed": seed, "profile": str(profile),
                            "comparison": comparison, "measured": measured, "predicted": predicted, "served": served}, "out")
    err.print(f"wrote {out}", soft_wrap=True)


def _check_simulator_inputs(profile: Path, rows: list, policy: str, seed: int):
    """The loaded profile, once the simulator has replayed a two-token request of every class with
    it: a profile without the policy's drafter or a class fails now, not after the real run."""
    from benchmarks.sim_validation import simulate_trace
    from simulator.profile import load_profile

    try:
        loaded = load_profile(profile)
    except (OSError, ValueError) as exc:
        raise InvalidParameterError("profile", str(profile), str(exc)) from exc
    probe = [{"arrival_s": float(i), "class": kind, "prompt_tokens": 8, "output_tokens": 2}
             for i, kind in enumerate(sorted({r.kind for r in rows}))]
    try:
        simulate_trace(probe, loaded, policy, seed)
    except (KeyError, ValueError) as exc:
        raise InvalidParameterError("profile", str(profile), f"the simulator cannot replay this workload with it ({exc})") from exc
    return loaded


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False)
def replay(ctx: typer.Context) -> None:
    """Replay a `bench --steps` result through controllers offline (benchmarks/replay.py; --help: its options)."""
    from benchmarks.replay import main as replay_main

    replay_main(list(ctx.args))  # every argument, --help included, is the script's


def _mount_subcommands() -> None:
    from adaptive_spec.telemetry.cli import alerts_command, telemetry_app
    from adaptive_spec.server.cli import serve
    from adaptive_spec.loadgen.cli import loadgen
    from simulator.cli import app as simulate_app
    from dashboard.cli import dashboard

    app.command("serve")(serve)
    app.command("loadgen")(loadgen)
    app.command("dashboard")(dashboard)

    app.add_typer(telemetry_app, name="telemetry", help="Read the telemetry store: summary per model and drafter, batched forwards.")
    app.command("alerts", help="Firing and recent alerts from the telemetry store.")(alerts_command)
    app.add_typer(simulate_app, name="simulate", help="Capacity simulator: run, compare, capacity, sweep.")


_mount_subcommands()


def _print_error(message: str) -> None:
    """One line on stderr whatever the terminal's width, piped or not: a log or a script reads an
    error as a line. The message is text, not markup."""
    line = " ".join(message.split("\n"))
    err.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)


def main() -> None:
    try:
        # not standalone: typer's own errors come back here instead of its boxed panel, which wraps
        # at 80 columns when stderr is not a terminal
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # click's errors: usage, bad values, missing options
        if type(exc).__name__ != "NoArgsIsHelpError":  # for a bare command typer has printed its help
            ctx = getattr(exc, "ctx", None)
            _print_error(exc.format_message() + (f" (see '{ctx.command_path} --help')" if ctx is not None else ""))
        sys.exit(exc.exit_code)
    except typer.Abort:
        _print_error("aborted")
        sys.exit(1)
    except AdaptiveSpecError as exc:
        _print_error(str(exc))
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
