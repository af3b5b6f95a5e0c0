"""Latency percentiles, throughput and goodput of a load run, as ``vllm bench serve`` reports them.

- Percentiles interpolate linearly between the closest ranks (numpy's default), over completed
  requests: TTFT, TPOT and E2EL one value per request, ITL every gap of every request pooled.
- Throughput divides by the run's duration, from the first request sent to the last one finished:
  ``request_throughput = completed / duration``, ``output_throughput = output tokens / duration``.
- Goodput (Zhong et al. 2024, DistServe): completed requests that meet *every* given SLO, per second
  of the run. A request with one output token has no decode phase, so no TPOT, and meets a TPOT SLO.
- Acceptance, from the server's counters read before and after the run (vLLM's definitions):
  ``acceptance_rate = accepted_tokens / draft_tokens``, ``mean_acceptance_length = 1 + accepted_tokens / drafts``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.loadgen.client import RequestRecord

PERCENTILES = (50, 90, 95, 99)
SLO_METRICS = ("ttft", "tpot", "e2el")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values`` by linear interpolation (numpy's default); None if empty.

    >>> percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90)
    9.1
    >>> percentile([4.0], 99), percentile([], 50)
    (4.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def distribution_ms(values_s: Sequence[float]) -> dict[str, float | None]:
    """Mean and percentiles, in milliseconds, of values in seconds."""
    ms = [v * 1e3 for v in values_s]
    out: dict[str, float | None] = {"mean": sum(ms) / len(ms) if ms else None}
    out.update({f"p{q}": percentile(ms, q) for q in PERCENTILES})
    return out


def parse_slos(specs: Iterable[str], param: str = "goodput") -> dict[str, float]:
    """``ttft:MS``-style SLOs (several per string, separated by spaces or commas) as metric -> ms.

    >>> parse_slos(["ttft:500 tpot:50", "e2el:2000"])
    {'ttft': 500.0, 'tpot': 50.0, 'e2el': 2000.0}
    """
    slos: dict[str, float] = {}
    for spec in specs:
        for item in spec.replace(",", " ").split():
            name, sep, value = item.partition(":")
            name = name.strip().lower()
            if not sep or name not in SLO_METRICS:
                raise InvalidParameterError(param, item, f"expected METRIC:MS with METRIC one of {', '.join(SLO_METRICS)}")
            try:
                ms = float(value)
            except ValueError:
                raise InvalidParameterError(param, item, f"{value!r} is not a number of milliseconds") from None
            if not (ms > 0 and math.isfinite(ms)):
                raise InvalidParameterError(param, item, "the SLO must be > 0 ms")
            slos[name] = ms
    return slos


def meets_slos(record: RequestRecord, slos: Mapping[str, float]) -> bool:
    """A completed request within every SLO (milliseconds)."""
    if not record.ok:
        return False
    values = {"ttft": record.ttft_s, "tpot": record.tpot_s, "e2el": record.e2el_s}
    return all(values[name] is None or values[name] * 1e3 <= limit for name, limit in slos.items())


def error_counts(records: Iterable[RequestRecord]) -> dict[str, int]:
    """Failed requests by HTTP status (``"429"``) or by what went wrong without one (``"timeout"``)."""
    counts = Counter(str(r.status) for r in records if not r.ok)
    return dict(sorted(counts.items()))


def acceptance(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> dict | None:
    """Counter increments over the run and the rates derived from them; None without both reads."""
    if before is None or after is None:
        return None
    delta = {name: after[name] - before[name] for name in after}
    return {
        **{name: int(round(value)) for name, value in delta.items()},
        "acceptance_rate": delta["accepted_tokens"] / delta["draft_tokens"] if delta["draft_tokens"] else None,
        "mean_acceptance_length": 1 + delta["accepted_tokens"] / delta["drafts"] if delta["drafts"] else None,
    }


def summarize(records: Sequence[RequestRecord], duration_s: float, slos: Mapping[str, float]) -> dict:
    """The run's summary: counts, throughput, latency distributions, goodput and errors."""
    done = [r for r in records if r.ok]
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: None)
    output_tokens = sum(r.output_tokens for r in done)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in done)
    good = sum(meets_slos(r, slos) for r in done) if slos else None
    return {
        "requests": len(records),
        "completed": len(done),
        "failed": len(records) - len(done),
        "duration_s": duration_s,
        "request_throughput": per_s(len(done)),
        "output_throughput": per_s(output_tokens),
        "total_token_throughput": per_s(output_tokens + prompt_tokens),
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "ttft_ms": distribution_ms([r.ttft_s for r in done]),
        "tpot_ms": distribution_ms([r.tpot_s for r in done if r.tpot_s is not None]),
        "itl_ms": distribution_ms([gap for r in done for gap in r.itl_s]),
        "e2el_ms": distribution_ms([r.e2el_s for r in done]),
        "goodput": None if not slos else {"slos_ms": dict(slos), "good_requests": good, "requests_per_s": per_s(good)},
        "errors": error_counts(records),
    }
