"""``adaptive-spec serve``: the OpenAI-compatible server on one model."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

import typer

from adaptive_spec.config import PREFILL_CHUNK
from adaptive_spec.errors import InvalidParameterError
from policies.batch_cap import CUTS, OBJECTIVES, BatchDraftCap


def format_plain_slowdown(value: float | None) -> str:
    """The ``--plain-slowdown`` that ``parse_plain_slowdown`` reads back as ``value``.

    >>> format_plain_slowdown(None), format_plain_slowdown(0.05)
    ('off', '0.05')
    """
    return "off" if value is None else f"{value:g}"


def serve(
    model: str = typer.Option("smollm2", help="smollm2 | gemma3 | a local Hugging Face folder. Served as this name."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (a non-loopback address needs --api-key)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    policy: str = typer.Option("adaptive", help="Policy spec for every traffic key: adaptive, static:<drafter>:<k>, ..."),
    drafters: Optional[str] = typer.Option(None, help="Comma-separated drafters (default: what the device runs)."),
    api_key: Optional[str] = typer.Option(None, envvar="ADAPTIVE_SPEC_API_KEY", help="Require 'Authorization: Bearer KEY' on /v1 routes."),
    allow_unauthenticated: bool = typer.Option(False, help="Serve a non-loopback address without an API key."),
    max_queue: int = typer.Option(64, help="Requests waiting for the engine at most; beyond it, 429."),
    max_batch: int = typer.Option(1, help="Requests decoded together (continuous batching above 1; drafters must "
                                  "then be lookups: ngram, the default, or suffix)."),
    prefill_chunk: Optional[int] = typer.Option(None, help="With --max-batch above 1: prompt tokens that ride in each step "
                                                f"while other requests decode, in the same forward (default {PREFILL_CHUNK}; a long prompt "
                                                "joins over several steps)."),
    profile: Optional[Path] = typer.Option(None, help="With --max-batch above 1: a profile from `adaptive-spec calibrate "
                                           "--batch-sizes ...` whose timed steps start the batch's cost model."),
    plain_slowdown: str = typer.Option(format_plain_slowdown(BatchDraftCap.plain_slowdown), "--plain-slowdown",
                                       help="With --max-batch above 1: the most others' drafts may slow a request, "
                                       "as a fraction of plain decoding, per token it expects from the step, widened "
                                       "by what its own accepted drafts saved it (0.05: 5%); 'off': the batch's "
                                       "goodput alone decides, faster copying requests, slower open-ended ones."),
    batch_objective: str = typer.Option(BatchDraftCap.objective, "--batch-objective",
                                        help="With --max-batch above 1: what the batch's drafts maximise: 'goodput' "
                                        "(tokens per second of the batch) or 'power' (that over the seconds per token "
                                        "of the step's slowest request: drafts that slow requests drafting nothing "
                                        "must pay twice; on CPU it drafted too little at 4 requests, "
                                        "benchmarks/RESULTS.md)."),
    batch_cut: str = typer.Option(BatchDraftCap.cut, "--batch-cut",
                                  help="With --max-batch above 1: how the batch cuts its requests' drafts: 'per-row' "
                                  "(each request's own length, the draft tokens that add the most expected tokens "
                                  "first) or 'common' (one longest length for every request)."),
    max_body_bytes: int = typer.Option(1 << 20, help="Largest request body accepted; beyond it, 413."),
    suffix_max_tokens: int = typer.Option(100_000, help="With the suffix drafter: tokens of past outputs kept per "
                                          "traffic key (oldest dropped first)."),
    suffix_shared: bool = typer.Option(False, "--suffix-shared", help="One suffix history for all traffic keys "
                                       "(drafts then learn from other keys' outputs: a timing side channel between tenants)."),
    suffix_persist: bool = typer.Option(False, "--suffix-persist", help="Load the suffix history from the cache "
                                        "directory at start and save it there at shutdown."),
    grace_s: float = typer.Option(30.0, "--grace-s", help="SIGTERM: seconds for in-flight requests to finish."),
    telemetry: str = typer.Option("sqlite", help="As for generate; /metrics is always served."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N."),
    dtype: str = typer.Option("float32", help="float32 | bfloat16 | float16."),
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API (completions, chat, streaming, /metrics)."""
    from adaptive_spec.cli import _observers, _runtime_and_drafters
    from adaptive_spec.preflight import check_positive_int as _check_positive_int
    from adaptive_spec.server.app import Settings, create_app
    from adaptive_spec.server.run import check_bind, run
    from adaptive_spec.telemetry.spec import build_prometheus_observer
    from policies.registry import PolicyRegistry

    check_bind(host, api_key, allow_unauthenticated)
    if not 0 <= port <= 65535:
        raise InvalidParameterError("port", port, "must be in [0, 65535]")
    _check_positive_int("max_queue", max_queue)
    _check_positive_int("max_batch", max_batch)
    parse_plain_slowdown(plain_slowdown)  # refused before the model loads
    if batch_objective not in OBJECTIVES:
        raise InvalidParameterError("batch_objective", batch_objective, f"expected one of {', '.join(OBJECTIVES)}")
    if batch_cut not in CUTS:
        raise InvalidParameterError("batch_cut", batch_cut, f"expected one of {', '.join(CUTS)}")
    if prefill_chunk is not None:
        _check_positive_int("prefill_chunk", prefill_chunk)
        if max_batch == 1:  # one request at a time: nothing decodes while it prefills
            raise InvalidParameterError("prefill_chunk", prefill_chunk, "applies with --max-batch above 1 only")
    prefill_chunk = PREFILL_CHUNK if prefill_chunk is None else prefill_chunk
    step_costs = _step_costs(profile, max_batch, model)
    _check_positive_int("max_body_bytes", max_body_bytes)
    if not grace_s >= 0:
        raise InvalidParameterError("grace_s", grace_s, "must be >= 0")
    if max_batch > 1 and drafters is None:
        drafters = "ngram"  # the batched engine drafts with lookups only
    torch_device, torch_dtype, names = _runtime_and_drafters(device, dtype, drafters, "drafters")
    unbatchable = [d for d in names if d not in ("none", "ngram", "suffix")]
    if max_batch > 1 and unbatchable:
        raise InvalidParameterError("drafters", drafters, f"{', '.join(unbatchable)} keep a cache per request; with "
                                    "--max-batch above 1 only lookups (ngram, suffix) are batched")
    history = _suffix_history(suffix_max_tokens, suffix_shared)
    if "suffix" not in names:  # options for a drafter that is not loaded would do nothing, silently
        given = [(n, v) for n, v, on in (("suffix_persist", suffix_persist, suffix_persist),
                                         ("suffix_shared", suffix_shared, suffix_shared),
                                         ("suffix_max_tokens", suffix_max_tokens, suffix_max_tokens != 100_000)) if on]
        if given:
            raise InvalidParameterError(*given[0], "needs the suffix drafter: add suffix to --drafters")
    loaded_names = [d for d in names if d != "none"]
    try:
        registry = PolicyRegistry(policy, loaded_names)
    except ValueError as exc:
        raise InvalidParameterError("policy", policy, str(exc)) from None
    observers = _observers(telemetry)
    if not any(o is build_prometheus_observer([]) for o in observers):
        observers.append(build_prometheus_observer([]))  # /metrics serves the shared registry

    def load():
        from adaptive_spec.decoder import SpeculativeDecoder
        from adaptive_spec.drafters import build_drafter
        from adaptive_spec.models import load_model

        target = load_model(model, device=torch_device, dtype=torch_dtype)
        if suffix_persist and "suffix" in loaded_names:
            loaded = history.load(_suffix_file(model), model)
            logging.getLogger("adaptive_spec.server").info("suffix history: %d outputs loaded from %s", loaded,
                                                           _suffix_file(model))
        built = [build_drafter(d, target, history) for d in dict.fromkeys(loaded_names)]
        return SpeculativeDecoder(target, built, policy=registry, observers=observers)

    def save_history() -> None:
        if suffix_persist and "suffix" in loaded_names:
            history.save(_suffix_file(model), model)

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings(api_key=api_key, max_queue=max_queue, max_batch=max_batch, max_body_bytes=max_body_bytes,
                        grace_s=grace_s, prefill_chunk=prefill_chunk, step_costs=step_costs,
                        plain_slowdown=parse_plain_slowdown(plain_slowdown), batch_objective=batch_objective,
                        batch_cut=batch_cut)
    run(create_app(load, model, settings, on_shutdown=save_history), host, port)


def parse_plain_slowdown(value: str) -> float | None:
    """``--plain-slowdown``: a fraction >= 0, or 'off'."""
    if value.strip().lower() == "off":
        return None
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not 0 <= number < float("inf"):
        raise InvalidParameterError("plain_slowdown", value, "expected a number >= 0 (0.05: 5%) or 'off'")
    return number


def _step_costs(profile: Path | None, max_batch: int, model: str) -> tuple:
    """(rows, width, seconds, context) of the profile's timed steps, batched ones among them, for the batch's cap:
    a profile measured on ``model`` (another model's costs would mislead the cap until they decay)."""
    if profile is None:
        return ()
    if max_batch == 1:
        raise InvalidParameterError("profile", str(profile), "warms the batch's cost model: it needs --max-batch above 1")
    from simulator.profile import load_profile

    try:
        loaded = load_profile(profile)
    except (OSError, ValueError) as exc:
        raise InvalidParameterError("profile", str(profile), f"cannot be read as a profile: {exc}") from None
    if loaded.metadata.get("illustrative"):
        raise InvalidParameterError("profile", str(profile), "is illustrative, not measured: calibrate this machine")
    measured_on = loaded.metadata.get("model")
    if measured_on is not None and measured_on != model:
        raise InvalidParameterError("profile", str(profile), f"was measured on {measured_on!r}, not on {model!r}")
    samples = loaded.verify
    if not any(s.batch > 1 for s in samples):
        raise InvalidParameterError("profile", str(profile), "has no batched steps; write one with "
                                    "`adaptive-spec calibrate --batch-sizes 2,4,8`")
    return tuple((s.batch, s.width, s.seconds, s.context_len) for s in samples)  # the cap's width: tokens scored a row


def _suffix_history(max_tokens: int, shared: bool):
    from adaptive_spec.drafters import HistoryLimits, HistoryStore

    try:
        return HistoryStore(HistoryLimits(max_tokens=max_tokens, shared=shared))
    except InvalidParameterError as exc:
        raise InvalidParameterError("suffix_max_tokens", max_tokens, exc.reason) from None


def _suffix_file(model: str):
    """Where ``--suffix-persist`` keeps the history: the cache directory, one file per served model."""
    from adaptive_spec.models import default_cache_dir

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    return default_cache_dir() / "suffix" / f"{safe}.json"
