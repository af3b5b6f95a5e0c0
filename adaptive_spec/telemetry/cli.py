"""CLI commands over the telemetry store: ``adaptive-spec telemetry summary``, ``telemetry batches``
and ``adaptive-spec alerts``.

Mount them in the main app::

    from adaptive_spec.telemetry.cli import alerts_command, telemetry_app
    app.add_typer(telemetry_app, name="telemetry")
    app.command("alerts")(alerts_command)
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from adaptive_spec.errors import InvalidParameterError

telemetry_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Read the embedded telemetry store.")



@telemetry_app.callback()
def _group() -> None:
    """Read the embedded telemetry store."""  # a callback keeps `telemetry` a group of its commands


DB_HELP = "Telemetry store (default: $ADAPTIVE_SPEC_TELEMETRY_DB or the user data directory's telemetry.sqlite)."


def _store(db: Optional[Path]) -> Path:
    from adaptive_spec.telemetry.spec import default_store_path

    path = db or default_store_path()
    if not path.exists():
        raise InvalidParameterError("db", str(path), "no telemetry store there yet (generate with --telemetry sqlite:PATH first)")
    return path


@contextmanager
def _store_errors(path: Path, hint: str = ""):
    """Whatever is wrong with the store becomes one error naming --db (``access.py``'s list)."""
    from adaptive_spec.telemetry.access import classify

    try:
        yield
    except (sqlite3.Error, OSError) as exc:  # access.StoreError is an sqlite3.Error
        error = classify(path, exc)
        raise InvalidParameterError("db", str(path), error.reason + (hint if error.kind == "locked" else "")) from None


def _window(window: str) -> float:
    from adaptive_spec.telemetry.summary import parse_window

    try:
        return parse_window(window)
    except ValueError as exc:
        raise InvalidParameterError("window", window, "expected a positive duration such as 90s, 15m, 2h or 7d") from exc


def _f(x, fmt: str = ".2f", scale: float = 1.0) -> str:
    return "-" if x is None else format(x * scale, fmt)


# the options every `telemetry` command reading a window of the store takes
WINDOW = typer.Option("1h", "--window", help="How far back: 90s, 15m, 2h, 7d.")
AS_JSON = typer.Option(False, "--json", help="Print a JSON list of rows instead of a table.")


def _window_rows(db: Optional[Path], window: str, as_json: bool, read) -> list | None:
    """``read(path, window_s)``'s rows of the store; printed as JSON (then None) with ``as_json``."""
    path, window_s = _store(db), _window(window)
    with _store_errors(path):
        rows = read(path, window_s)
    if as_json:
        print(json.dumps([r.to_dict() for r in rows]))
        return None
    return rows


@telemetry_app.command("summary")
def summary_command(db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP), window: str = WINDOW,
                    as_json: bool = AS_JSON) -> None:
    """Acceptance, mean acceptance length, tokens/s and TTFT/TPOT percentiles per model and drafter."""
    from adaptive_spec.telemetry.summary import summary

    rows = _window_rows(db, window, as_json, summary)
    if rows is None:
        return
    table = Table(title=f"last {window} · acceptance = accepted/draft tokens · MAL = 1 + accepted/drafts")
    for col in ("model", "drafter", "requests", "acceptance", "MAL", "decode tok/s", "tok/s",
                "TTFT p50/p99 ms", "TPOT p50/p99 ms"):
        table.add_column(col, justify="left" if col in ("model", "drafter") else "right")
    for r in rows:
        table.add_row(r.model, r.drafter, str(r.requests), _f(r.acceptance_rate), _f(r.mean_acceptance_length),
                      _f(r.decode_tokens_per_s, ".1f"), _f(r.tokens_per_s, ".1f"),
                      f"{_f(r.ttft_p50, '.1f', 1e3)}/{_f(r.ttft_p99, '.1f', 1e3)}",
                      f"{_f(r.tpot_p50, '.1f', 1e3)}/{_f(r.tpot_p99, '.1f', 1e3)}")
    Console().print(table if rows else f"no telemetry in the last {window}")


@telemetry_app.command("batches")
def batches_command(db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP), window: str = WINDOW,
                    as_json: bool = AS_JSON) -> None:
    """Continuous batching (serve --max-batch): decode forwards per model and rows in the forward,
    the share of rows' steps that drafted, seconds per forward, and what the batch cap cut."""
    from adaptive_spec.telemetry.summary import batch_summary

    rows = _window_rows(db, window, as_json, batch_summary)
    if rows is None:
        return
    table = Table(title=f"last {window} · drafting = rows' steps that verified a draft · "
                        f"cut = forwards whose drafts the batch cap cut, of those it priced")
    for col in ("model", "rows", "forwards", "drafting", "s/forward", "cut", "cut tokens", "prompt tokens riding"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(r.model, str(r.rows), str(r.forwards), _f(r.drafting_share, ".1%"),
                      _f(r.seconds_per_forward, ".3f"), _f(r.cut_share, ".1%"), str(r.cut_tokens), str(r.prompt_tokens))
    Console().print(table if rows else f"no batched decode forwards in the last {window} (serve --max-batch above 1 records them)")


def alerts_command(
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP),
    window: str = typer.Option("24h", "--window", help="Show alerts resolved within this window too."),
    evaluate: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Evaluate the rules now before listing."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of alert rows."),
) -> None:
    """Firing and recent alerts (acceptance collapse, speculation off, TPOT regression)."""
    from adaptive_spec.telemetry import access
    from adaptive_spec.telemetry.alerts import AlertEvaluator
    from adaptive_spec.telemetry.store import read_alerts

    path = _store(db)
    now = time.time()
    since = now - _window(window)
    with _store_errors(path, hint="; --no-evaluate lists the recorded alerts without the write lock"):
        # first as a reader: a foreign, incomplete or locked store is one error before anything is written
        access.open_reader(path, ("alerts", "intervals", "decisions")).close()
        if evaluate:
            try:
                AlertEvaluator().evaluate_path(path, now, timeout_s=access.LOCK_TIMEOUT_S)
            except (sqlite3.Error, OSError) as exc:
                if access.classify(path, exc).kind != "readonly":
                    raise
                Console(stderr=True).print(f"note: {path} cannot be written here: listing the alerts recorded, "
                                           "without evaluating the rules now", markup=False, highlight=False, soft_wrap=True)
        rows = [r for r in read_alerts(path) if r["state"] == "firing" or (r["resolved_at"] or 0) >= since]
    rows.sort(key=lambda r: (r["state"] != "firing", -r["fired_at"]))
    if as_json:
        print(json.dumps(rows))
        return
    if not rows:
        Console().print(f"no alerts firing or resolved in the last {window}")
        return
    table = Table(title="alerts")
    for col in ("state", "rule", "model", "key", "drafter", "fired", "resolved", "message"):
        table.add_column(col)
    stamp = lambda t: "-" if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")  # noqa: E731
    for r in rows:
        state = "[red]firing[/red]" if r["state"] == "firing" else "resolved"
        table.add_row(state, r["rule"], r["model"], r["key"] or "-", r["drafter"] or "-", stamp(r["fired_at"]),
                      stamp(r["resolved_at"]), r["message"] or "")
    Console().print(table)
