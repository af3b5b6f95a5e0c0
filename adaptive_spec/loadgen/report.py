"""The report of a load run: a printed table, and a JSON file in the format below.

JSON format (``"format": "adaptive-spec-loadgen/1"``); times in milliseconds unless named ``_s``::

    {
      "format": "adaptive-spec-loadgen/1",
      "started_at": "2026-01-01T12:00:00+00:00",   # UTC, when the run began
      "origin_unix": 1767268800.25,                 # Unix time of t = 0 for arrival_s, sent_s, finished_s
      "interrupted": false,                         # true when Ctrl-C ended it early
      "model": "smollm2",                           # the served model the requests named
      "config": {"url", "endpoint", "model", "prompts", "rate" ("inf" or a number), "burstiness",
                 "max_concurrency", "num_requests", "duration_s", "schedule" (e.g. "copy:300,open:300",
                 or null), "max_tokens", "temperature", "seed", "goodput_slos_ms", "traffic_key",
                 "extra_body", "timeout_s"},
      "summary": {
        "requests", "completed", "failed",          # counts; failed = requests - completed
        "duration_s",                               # first request sent to last one finished
        "request_throughput",                       # completed / duration_s (requests/s)
        "output_throughput",                        # output tokens of completed requests / duration_s
        "total_token_throughput",                   # (prompt + output tokens) / duration_s
        "prompt_tokens", "output_tokens",           # totals over completed requests (server's usage)
        "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms":  # each {"mean", "p50", "p90", "p95", "p99"} (null if no data)
        "goodput": null | {"slos_ms": {"ttft": 500, ...}, "good_requests", "requests_per_s"},
        "errors": {"429": 3, "timeout": 1, ...}     # failed requests by HTTP status or failure kind
      },
      "speculation": null | {                        # from the server's /metrics, after minus before
        "drafts", "draft_tokens", "accepted_tokens",
        "acceptance_rate",                          # accepted_tokens / draft_tokens
        "mean_acceptance_length"                    # 1 + accepted_tokens / drafts
      },
      "speculation_per_request": {...},             # the same, summed over the responses' own metrics
      "phases": null | [                            # with a schedule: one summary per phase
        {"phase", "schedule", "start_s", "end_s", "requests", "completed", "e2el_ms", "ttft_ms",
         "goodput_requests", "speculation"}
      ],
      "requests": [                                 # one per request, in arrival order: the trace
        {"index", "id", "kind",
         "class",                                   # = kind, the name simulator.replay reads
         "arrival_s",                               # when it was due, from the run's start
         "sent_s", "finished_s",                    # when it went out and when it ended
         "status",                                  # HTTP status, or timeout | connection_error |
                                                    # stream_error | incomplete | cancelled
         "ok", "error",
         "prompt_tokens", "output_tokens",          # the server's usage (chunks if it sent none:
         "usage_reported", "chunks",                #   usage_reported false)
         "ttft_ms", "tpot_ms", "e2el_ms", "itl_ms" (list), "finish_reason",
         "server_metrics"}                          # the response's "metrics" object as sent
      ]
    }

``/metrics`` counts every request the server served while the run went on, the run's or not;
``speculation_per_request`` counts only the run's completed requests. On a server with no other
traffic the two agree. The completed rows of ``requests`` replay in the simulator as they are:
``simulator.replay.requests_from_rows([r for r in report["requests"] if r["ok"]])``.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from adaptive_spec.loadgen.client import RequestRecord
from adaptive_spec.loadgen.run import LoadConfig, LoadResult
from adaptive_spec.loadgen.stats import PERCENTILES, acceptance, distribution_ms, meets_slos, summarize

FORMAT = "adaptive-spec-loadgen/1"


def build_report(config: LoadConfig, result: LoadResult, prompts_path: str | None = None,
                 started_at: _dt.datetime | None = None) -> dict:
    return {
        "format": FORMAT,
        "started_at": (started_at or _dt.datetime.now(_dt.timezone.utc)).isoformat(timespec="seconds"),
        "origin_unix": result.origin_unix,
        "interrupted": result.interrupted,
        "model": result.model,
        "config": _config(config, prompts_path),
        "summary": summarize(result.records, result.duration_s, config.slos_ms),
        "speculation": acceptance(result.spec_before, result.spec_after),
        "speculation_per_request": per_request_acceptance(result.records),
        "phases": _phases(config, result.records),
        "requests": [request_row(r) for r in result.records],
    }


def per_request_acceptance(records: Sequence[RequestRecord]) -> dict:
    """The spec-decode counters summed over the completed responses' ``metrics.speculative_decoding``."""
    zero = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    totals = dict(zero)
    for r in records:
        spec = (r.server or {}).get("speculative_decoding") if r.ok else None
        if spec:
            totals["drafts"] += spec.get("num_spec_steps", 0)
            totals["draft_tokens"] += spec.get("num_draft_tokens", 0)
            totals["accepted_tokens"] += spec.get("num_accepted_draft_tokens", 0)
    return acceptance(zero, totals)


def request_row(r: RequestRecord) -> dict:
    ms = (lambda s: None if s is None else s * 1e3)
    return {
        "index": r.index, "id": r.prompt_id, "kind": r.kind, "class": r.kind,
        "arrival_s": r.arrival_s, "sent_s": r.sent_s, "finished_s": r.finished_s,
        "status": r.status, "ok": r.ok, "error": r.error,
        "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens, "usage_reported": r.usage_reported,
        "chunks": r.chunks, "ttft_ms": ms(r.ttft_s), "tpot_ms": ms(r.tpot_s), "e2el_ms": ms(r.e2el_s),
        "itl_ms": [gap * 1e3 for gap in r.itl_s], "finish_reason": r.finish_reason, "server_metrics": r.server,
    }


def _config(config: LoadConfig, prompts_path: str | None) -> dict:
    return {
        "url": config.url, "endpoint": config.endpoint, "model": config.model, "prompts": prompts_path,
        "rate": "inf" if math.isinf(config.rate) else config.rate, "burstiness": config.burstiness,
        "max_concurrency": config.max_concurrency, "num_requests": config.request_limit,
        "duration_s": config.duration_s, "schedule": config.schedule.describe() if config.schedule else None,
        "max_tokens": config.max_tokens, "temperature": config.temperature, "seed": config.seed,
        "goodput_slos_ms": dict(config.slos_ms), "traffic_key": config.traffic_key,
        "extra_body": config.extra_body, "timeout_s": config.timeout_s,
    }


def _phases(config: LoadConfig, records: Sequence[RequestRecord]) -> list[dict] | None:
    if config.schedule is None:
        return None
    rows = []
    for i, phase in enumerate(config.schedule.phases):
        start = config.schedule.ends[i] - phase.seconds
        inside = [r for r in records if config.schedule.phase_at(r.arrival_s) == i]
        done = [r for r in inside if r.ok]
        rows.append({
            "phase": i, "schedule": phase.describe(), "start_s": start, "end_s": config.schedule.ends[i],
            "requests": len(inside), "completed": len(done),
            "e2el_ms": distribution_ms([r.e2el_s for r in done]), "ttft_ms": distribution_ms([r.ttft_s for r in done]),
            "goodput_requests": sum(meets_slos(r, config.slos_ms) for r in done) if config.slos_ms else None,
            "speculation": per_request_acceptance(inside),
        })
    return rows


def render(report: dict) -> Group:
    """The tables printed after a run: the summary, the latency percentiles, and the phases if any."""
    s, c = report["summary"], report["config"]
    title = (f"{report['model']} · {c['endpoint']} · rate {c['rate']}/s (burstiness {c['burstiness']:g}) · "
             f"concurrency {c['max_concurrency'] or 'unbounded'} · max_tokens {c['max_tokens']}"
             + (" · INTERRUPTED" if report["interrupted"] else ""))
    summary = Table(show_header=False)
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    rows = [
        ("requests completed / sent", f"{s['completed']} / {s['requests']}"),
        ("duration (s)", _num(s["duration_s"], 2)),
        ("prompt tokens / output tokens", f"{s['prompt_tokens']} / {s['output_tokens']}"),
        ("request throughput (req/s)", _num(s["request_throughput"], 3)),
        ("output token throughput (tok/s)", _num(s["output_throughput"], 2)),
        ("total token throughput (tok/s)", _num(s["total_token_throughput"], 2)),
    ]
    if s["goodput"]:
        slos = " ".join(f"{k}:{v:g}" for k, v in s["goodput"]["slos_ms"].items())
        rows.append((f"goodput (req/s, {slos} ms)",
                     f"{_num(s['goodput']['requests_per_s'], 3)} ({s['goodput']['good_requests']} good)"))
    rows.append(("errors", ", ".join(f"{k}: {n}" for k, n in s["errors"].items()) or "none"))
    spec, source = report["speculation"], "/metrics"
    if spec is None:  # a server without the counters: what its responses said, if anything
        spec, source = report["speculation_per_request"], "responses"
    rows += [
        (f"draft tokens accepted / proposed ({source})",
         f"{spec['accepted_tokens']} / {spec['draft_tokens']} in {spec['drafts']} drafts"),
        ("acceptance rate", _num(spec["acceptance_rate"], 3)),
        ("mean acceptance length", _num(spec["mean_acceptance_length"], 2)),
    ]
    for row in rows:
        summary.add_row(*row)

    latency = Table(title="latency (ms)", title_justify="left")
    latency.add_column("")
    for name in ("mean", *(f"p{q}" for q in PERCENTILES)):
        latency.add_column(name, justify="right")
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2EL", "e2el_ms")):
        latency.add_row(label, *(_num(v, 1) for v in s[key].values()))
    parts = [Text(title), summary, latency]
    if report["phases"]:
        phases = Table(title="by phase of the schedule", title_justify="left")
        for name in ("phase", "mix:s", "completed/sent", "E2EL p50", "E2EL p95", "TTFT p50", "acceptance"):
            phases.add_column(name, justify="right" if name not in ("mix:s",) else "left")
        for p in report["phases"]:
            phases.add_row(str(p["phase"]), p["schedule"], f"{p['completed']}/{p['requests']}",
                           _num(p["e2el_ms"]["p50"], 1), _num(p["e2el_ms"]["p95"], 1), _num(p["ttft_ms"]["p50"], 1),
                           _num(p["speculation"]["acceptance_rate"], 3))
        parts.append(phases)
    return Group(*parts)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
