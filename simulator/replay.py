"""Replay of recorded traffic.

Instead of drawing arrivals from a law, replay the requests an engine actually served. A trace is
a list of rows, one per request, each with

    arrival_s      seconds (any origin: the earliest row is moved to 0); ``arrival_time`` also read
    class          request class name, which must be a class of the scenario
    prompt_tokens  prompt length in tokens (>= 1)
    output_tokens  tokens generated (>= 1)
    max_tokens     optional: the budget the request was sent with (>= output_tokens); an answer
                   that ended sooner leaves the engine's last drafts running past its end

``read_trace_jsonl`` reads such rows from a JSON-lines file. ``requests_from_rows`` takes rows
from anywhere - a JSONL file, or ``sqlite3`` rows of the telemetry store turned into dicts - so the
store can feed the simulator without the simulator knowing its schema.

``time_scale`` replays faster or slower: 2.0 halves every gap (twice the rate), which is how one
asks "what if this exact traffic doubled?".

Example line::

    {"arrival_s": 12.5, "class": "chat", "prompt_tokens": 310, "output_tokens": 95}
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from simulator.entities import Request

REQUIRED = ("class", "prompt_tokens", "output_tokens")


def read_trace_jsonl(path: str | Path) -> list[dict]:
    """Rows of a JSON-lines trace; blank lines are skipped, a bad line is reported by number."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: each line must be a JSON object, got {row!r}")
            rows.append(row)
    return rows


def requests_from_rows(
    rows: Iterable[Mapping], class_names: Iterable[str] | None = None, time_scale: float = 1.0
) -> list[Request]:
    """Requests from trace rows, sorted by arrival, the first arrival moved to t = 0.

    ``class_names``: when given, a row whose class is not among them is rejected (it would have no
    length or acceptance model). ``time_scale`` > 1 compresses time (a higher rate).
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got time_scale={time_scale}")
    known = set(class_names) if class_names is not None else None
    parsed = []
    for i, row in enumerate(rows):
        arrival = row.get("arrival_s", row.get("arrival_time"))
        if arrival is None:
            raise ValueError(f"trace row {i}: arrival_s is required, got {dict(row)!r}")
        for name in REQUIRED:
            if name not in row:
                raise ValueError(f"trace row {i}: {name} is required, got {dict(row)!r}")
        klass = str(row["class"])
        if known is not None and klass not in known:
            raise ValueError(f"trace row {i}: class={klass!r} is not a scenario class (known: {sorted(known)})")
        prompt, output = row["prompt_tokens"], row["output_tokens"]
        for name, value in (("prompt_tokens", prompt), ("output_tokens", output)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"trace row {i}: {name} must be an integer >= 1, got {value!r}")
        if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or not math.isfinite(arrival):
            raise ValueError(f"trace row {i}: arrival_s must be a finite number, got {arrival!r}")
        budget = row.get("max_tokens", 0)
        if budget and (isinstance(budget, bool) or not isinstance(budget, int) or budget < output):
            raise ValueError(f"trace row {i}: max_tokens must be an integer >= output_tokens ({output}), got {budget!r}")
        parsed.append((float(arrival), klass, prompt, output, budget or 0))
    parsed.sort(key=lambda r: r[0])
    origin = parsed[0][0] if parsed else 0.0
    return [
        Request(i, klass, prompt, output, (arrival - origin) / time_scale, max_tokens=budget)
        for i, (arrival, klass, prompt, output, budget) in enumerate(parsed)
    ]


def write_trace_jsonl(requests: Iterable[Request], path: str | Path) -> None:
    """Write requests as a trace (e.g. to replay a synthetic run, or to hand-edit one)."""
    with open(path, "w", encoding="utf-8") as handle:
        for r in requests:
            row = {"arrival_s": r.arrival_s, "class": r.klass, "prompt_tokens": r.prompt_tokens,
                   "output_tokens": r.output_tokens, **({"max_tokens": r.max_tokens} if r.max_tokens else {})}
            handle.write(json.dumps(row) + "\n")
