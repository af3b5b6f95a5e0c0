"""Reports: the answers of a run as a printed table and as JSON.

Tables use ``rich`` when it is installed and fall back to aligned plain text. JSON output
replaces NaN and infinities with ``null`` (JSON has neither) so any tool can read it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from simulator.capacity import CapacityResult
from simulator.run import RunResult


def jsonable(value):
    """Recursively convert to JSON-safe values (NaN / inf -> None, tuples -> lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    if hasattr(value, "item"):  # numpy scalars
        return jsonable(value.item())
    return value


def write_json(obj, path: str | Path, param: str = "json") -> None:
    """``obj`` as JSON at ``path``, through a temporary file and a rename (``adaptive_spec/outputs.py``):
    a failed or interrupted write leaves no half file; a ``ValueError`` naming ``param`` says what failed."""
    from adaptive_spec.outputs import write_text_atomic  # torch-free

    write_text_atomic(path, json.dumps(jsonable(obj), indent=2) + "\n", param)


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int):
        return f"{value:,}"
    if unit == "ms":
        return f"{value * 1000:,.1f}"
    if unit == "%":
        return f"{value * 100:.1f}%"
    return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"


def metric_rows(summary: dict) -> list[tuple[str, str]]:
    """(label, value) pairs of a summary, in reading order."""
    rows = [("requests completed / arrived",
             f"{_fmt(summary['requests']['completed'])} / {_fmt(summary['requests']['arrived'])}")]
    for name, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        p = summary[name]
        rows.append((f"{label} p50 / p95 / p99 (ms)", " / ".join(_fmt(p[q], "ms") for q in ("p50", "p95", "p99"))))
    acc = summary["acceptance"]
    rows += [
        ("throughput (req/s)", _fmt(summary["throughput_rps"])),
        ("throughput (tokens/s)", _fmt(summary["throughput_tokens_s"])),
        ("goodput (req/s meeting SLO)", _fmt(summary["goodput_rps"])),
        ("SLO attainment", _fmt(summary["slo_attainment"], "%")),
        (f"SLO p{summary['slo_check']['percentile']:g} met", _fmt(summary["slo_check"]["ok"])),
        ("queue mean / max", f"{_fmt(summary['queue']['mean'])} / {_fmt(summary['queue']['max'])}"),
        ("acceptance rate", _fmt(acc["acceptance_rate"], "%")),
        ("tokens per step", _fmt(acc["tokens_per_step"])),
    ]
    return rows


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        print(title)
        for row in [header, *rows]:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        return
    table = Table(title=title)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*[str(c) for c in row])
    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze columns into 80 characters
        console = Console(width=160)
    console.print(table)


def print_run(result: RunResult, series: bool = True) -> None:
    title = f"{result.scenario}: policy {result.policy}, {result.replicas} x {result.mode}, seed {result.seed}"
    _table(title, ["metric", "value"], [list(r) for r in metric_rows(result.summary)])
    if result.phases:
        print_phases([result])
    ts = result.timeseries
    if series and ts:
        rows = [[f"{t:,.0f}", _fmt(a), _fmt(q), _fmt(s, "%"), _fmt(k), _fmt(r, "%"), _fmt(tps)]
                for t, a, q, s, k, r, tps in zip(ts["t_s"], ts["arrivals"], ts["queue_len_end"], ts["spec_fraction"],
                                                 ts["mean_draft_len"], ts["acceptance_rate"], ts["tokens_per_step"])]
        _table("over time", ["t (s)", "arrivals", "queue", "spec on", "mean k", "acceptance", "tokens/step"], rows)


def print_phases(results: list[RunResult]) -> None:
    rows = []
    for r in results:
        for ph in r.phases:
            rows.append([r.policy, f"{ph['start_s']:,.0f}-{ph['end_s']:,.0f}", _fmt(ph["e2e_s"]["p95"], "ms"),
                         _fmt(ph["tpot_s"]["p50"], "ms"), _fmt(ph["acceptance"]["acceptance_rate"], "%"),
                         _fmt(ph["acceptance"]["tokens_per_step"]), _fmt(ph["slo_attainment"], "%")])
    _table("per phase (by arrival time)", ["policy", "phase (s)", "E2E p95 ms", "TPOT p50 ms", "acceptance",
                                           "tokens/step", "SLO met"], rows)


def print_compare(results: list[RunResult]) -> None:
    header = ["metric", *[r.policy for r in results]]
    columns = [dict(metric_rows(r.summary)) for r in results]
    labels = [label for label, _ in metric_rows(results[0].summary)]
    _table(f"{results[0].scenario}: policies on the same traffic (seed {results[0].seed})", header,
           [[label, *[c[label] for c in columns]] for label in labels])
    if any(r.phases for r in results):
        print_phases(results)


def print_capacity(result: CapacityResult) -> None:
    rows = []
    for t in result.tried:
        checks = {k: v for k, v in t["slo_check"].items() if isinstance(v, dict)}
        detail = ", ".join(f"{k} {_fmt(v['value'], 'ms')}/{_fmt(v['target'], 'ms')} ms" for k, v in checks.items())
        rows.append([_fmt(t["replicas"]), _fmt(t["ok"]), detail, _fmt(t["goodput_rps"]), _fmt(t["queue_mean"])])
    answer = result.replicas if result.replicas is not None else "not met"
    _table(f"capacity for policy {result.policy}: {answer} replicas", ["replicas", "SLO met", "percentile / target",
                                                                     "goodput", "queue mean"], rows)
