"""``telemetry summary``: acceptance and latency per model and drafter over a time window.

One row per (model, drafter), drafter ``none`` being plain decoding. Speculation figures come
from the ``intervals`` counters of that drafter; latency figures from the ``requests`` whose main
drafter (the one that proposed the most draft tokens) it is::

    acceptance_rate         = sum(accepted_tokens) / sum(draft_tokens)
    mean_acceptance_length  = 1 + sum(accepted_tokens) / sum(drafts)
    decode_tokens_per_s     = sum(emitted_tokens) / sum(draft_s + verify_s)     (its steps only)
    tokens_per_s            = sum(new_tokens) / sum(ttft_s + decode_s)          (whole requests)
    ttft_p50/p90/p99, tpot_p50/p90/p99: nearest-rank percentiles over the requests

Rates over no data are None, never 0: "no drafts" and "nothing accepted" are different answers.

``batch_summary``: the batched engine's decode forwards per model and rows in the forward, from
the ``batch_intervals`` counters (``SCHEMA.md``)::

    drafting_share       = sum(drafting) / sum(rows * forwards)     (rows' steps that verified a draft)
    seconds_per_forward  = sum(seconds) / sum(forwards)
    cut_share            = (shortened + plain) / (kept + shortened + plain)   (forwards the cap priced)
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from adaptive_spec.telemetry import store

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(text: str) -> float:
    """``"90"``, ``"90s"``, ``"15m"``, ``"2h"``, ``"7d"`` -> seconds; a clear error otherwise.

    >>> parse_window("15m"), parse_window("2h"), parse_window("30")
    (900.0, 7200.0, 30.0)
    """
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"window must be a positive duration such as 90s, 15m, 2h or 7d, got window={text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (no interpolation: every answer is a measured value).

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 99), percentile([], 50)
    (2.0, 4.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class SummaryRow:
    model: str
    drafter: str
    requests: int
    steps: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    decode_tokens_per_s: float | None
    tokens_per_s: float | None
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p90: float | None
    tpot_p99: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(intervals: list[dict], requests: list[dict]) -> list[SummaryRow]:
    """The summary of these rows (pure; ``summary`` reads them from a store)."""
    counters: dict[tuple[str, str], dict] = {}
    for r in intervals:
        c = counters.setdefault((r["model"], r["drafter"]), dict(steps=0, drafts=0, draft=0, accepted=0, emitted=0, s=0.0))
        c["steps"] += r["steps"]
        c["drafts"] += r["drafts"]
        c["draft"] += r["draft_tokens"]
        c["accepted"] += r["accepted_tokens"]
        c["emitted"] += r["emitted_tokens"]
        c["s"] += r["draft_s"] + r["verify_s"]
    by_main: dict[tuple[str, str], list[dict]] = {}
    for r in requests:
        by_main.setdefault((r["model"], r["main_drafter"] or "none"), []).append(r)
    rows = []
    for model, drafter in sorted(set(counters) | set(by_main)):
        c = counters.get((model, drafter), dict(steps=0, drafts=0, draft=0, accepted=0, emitted=0, s=0.0))
        reqs = [r for r in by_main.get((model, drafter), []) if r["error"] is None]
        seconds = sum((r["ttft_s"] or 0.0) + (r["decode_s"] or 0.0) for r in reqs)
        ttft = [r["ttft_s"] for r in reqs if r["ttft_s"] is not None]
        tpot = [r["tpot_s"] for r in reqs if r["tpot_s"] is not None]
        rows.append(SummaryRow(
            model=model, drafter=drafter, requests=len(by_main.get((model, drafter), [])), steps=c["steps"],
            drafts=c["drafts"], draft_tokens=c["draft"], accepted_tokens=c["accepted"],
            acceptance_rate=c["accepted"] / c["draft"] if c["draft"] else None,
            mean_acceptance_length=1 + c["accepted"] / c["drafts"] if c["drafts"] else None,
            decode_tokens_per_s=c["emitted"] / c["s"] if c["s"] > 0 else None,
            tokens_per_s=sum(r["new_tokens"] for r in reqs) / seconds if seconds > 0 else None,
            ttft_p50=percentile(ttft, 50), ttft_p90=percentile(ttft, 90), ttft_p99=percentile(ttft, 99),
            tpot_p50=percentile(tpot, 50), tpot_p90=percentile(tpot, 90), tpot_p99=percentile(tpot, 99),
        ))
    return rows


def summary(path: str | Path, window_s: float = 3600.0, now: float | None = None) -> list[SummaryRow]:
    """Summary rows of the store at ``path`` over the last ``window_s`` seconds."""
    now = time.time() if now is None else now
    since = now - window_s
    return summarize(store.read_intervals(path, since, now), store.read_requests(path, since, now))


@dataclass
class BatchRow:
    model: str
    rows: int
    forwards: int
    row_steps: int
    drafting_share: float | None
    seconds_per_forward: float | None
    cut_share: float | None
    cut_tokens: int
    prompt_tokens: int

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_batches(intervals: list[dict]) -> list[BatchRow]:
    """Per (model, rows in the forward) over ``batch_intervals`` rows (pure; ``batch_summary`` reads them).

    >>> row = dict(model="m", rows=4, forwards=10, drafting=8, seconds=1.5, cut_tokens=12, prompt_tokens=0,
    ...            cap_none=0, cap_kept=6, cap_shortened=1, cap_plain=3)
    >>> b, = summarize_batches([row, {**row, "drafting": 2}])
    >>> b.row_steps, b.drafting_share, b.seconds_per_forward, b.cut_share
    (80, 0.125, 0.15, 0.4)
    """
    sums: dict[tuple[str, int], dict] = {}
    for r in intervals:
        c = sums.setdefault((r["model"], r["rows"]), dict.fromkeys(
            ("forwards", "drafting", "seconds", "cut_tokens", "prompt_tokens", "priced", "cut"), 0))
        for name in ("forwards", "drafting", "seconds", "cut_tokens", "prompt_tokens"):
            c[name] += r[name]
        c["priced"] += r["cap_kept"] + r["cap_shortened"] + r["cap_plain"]
        c["cut"] += r["cap_shortened"] + r["cap_plain"]
    return [BatchRow(model=model, rows=rows, forwards=c["forwards"], row_steps=rows * c["forwards"],
                     drafting_share=c["drafting"] / (rows * c["forwards"]) if c["forwards"] else None,
                     seconds_per_forward=c["seconds"] / c["forwards"] if c["forwards"] else None,
                     cut_share=c["cut"] / c["priced"] if c["priced"] else None,
                     cut_tokens=c["cut_tokens"], prompt_tokens=c["prompt_tokens"])
            for (model, rows), c in sorted(sums.items())]


def batch_summary(path: str | Path, window_s: float = 3600.0, now: float | None = None) -> list[BatchRow]:
    """Batch rows of the store at ``path`` over the last ``window_s`` seconds (none from a store
    written before the table existed, schema 4)."""
    now = time.time() if now is None else now
    return summarize_batches(store.read_batch_intervals(path, now - window_s, now))
