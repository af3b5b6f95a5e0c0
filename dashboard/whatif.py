"""What-if runs for the dashboard: a scenario built from the page's inputs, every policy simulated
on the same seeded traffic, and latency over time per policy.

Pure Python over the simulator's public API (no Streamlit here), so the test can build the same
scenario and compare the page's table with ``simulator.simulate`` called directly.

The scenario is built as a scenario *file* would be written (a base file's fields, with the
page's traffic, replicas and SLO put in) and validated by ``scenario_from_dict``: a bad input is
the same one-line error the CLI gives for a bad file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator import RunResult, Scenario, scenario_from_dict, simulate
from simulator.budget import expected_requests
from simulator.metrics import DraftingByBatch
from simulator.scenario import BATCHING_ONLY
from simulator.report import metric_rows

SCENARIOS = Path(__file__).resolve().parents[1] / "simulator" / "scenarios"
DEFAULT_BASE = SCENARIOS / "smollm2_cpu_shift.yaml"  # measured on this kind of machine, not illustrative
# a page run is meant to answer in seconds: beyond this many arrivals per policy, use `adaptive-spec simulate`
MAX_REQUESTS = 20_000


@dataclass(frozen=True)
class WhatIf:
    """The page's inputs. Mixes are class name -> weight; a shift at ``shift_at_s`` (None: none)."""

    base: str = str(DEFAULT_BASE)  # scenario file giving the profile and the request classes
    rate: float = 0.15  # requests/s at t = 0
    mix: dict[str, float] = field(default_factory=lambda: {"copy": 1.0})
    duration_s: float = 3600.0
    shift_at_s: float | None = 1800.0
    shift_rate: float | None = None  # None: the rate does not change at the shift
    shift_mix: dict[str, float] | None = field(default_factory=lambda: {"open": 1.0})
    replicas: int = 1
    mode: str = "serial"
    max_batch: int = 8
    policies: tuple[str, ...] = ("none", "static:ngram:8", "adaptive")
    slo_ttft_s: float | None = 2.0
    slo_tpot_s: float | None = None
    slo_e2e_s: float | None = 10.0
    slo_percentile: float = 95.0
    seed: int = 11
    bin_s: float = 300.0  # latency over time: one point per bin of arrival time
    profile: dict | None = None  # an uploaded profile (JSON object); None: the base file's
    # replay instead of synthetic traffic: trace rows (``simulator/replay.py``), e.g. ``trace_rows``
    # of the telemetry store's requests; rate, mix, duration and shift are then unused
    replay: tuple[dict, ...] | None = None
    time_scale: float = 1.0  # replay only: 2.0 replays the same requests twice as fast


def load_base(path: str | Path) -> dict:
    """The raw fields of a scenario file."""
    path = Path(path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not a scenario (a mapping of fields)")
    return raw


def class_names(path: str | Path) -> list[str]:
    return list(load_base(path).get("classes") or {})


def build_scenario(w: WhatIf) -> Scenario:
    """The scenario for these inputs; ``ValueError`` naming the field on a bad one."""
    raw = load_base(w.base)
    arrival = dict((raw.get("workload") or {}).get("arrival") or {"process": "poisson"})
    arrival["rate"] = w.rate
    workload = {"arrival": arrival, "mix": dict(w.mix), "duration_s": w.duration_s}
    if w.replay is not None:
        workload = {"replay": [dict(r) for r in w.replay], "time_scale": w.time_scale}
    elif w.shift_at_s is not None and (w.shift_mix or w.shift_rate):
        shift = {"at_s": w.shift_at_s}
        if w.shift_mix:
            shift["mix"] = dict(w.shift_mix)
        if w.shift_rate:
            shift["rate"] = w.shift_rate
        workload["shifts"] = [shift]
    replicas = {**(raw.get("replicas") or {}), "count": w.replicas, "mode": w.mode, "max_batch": w.max_batch}
    if w.mode != "batching":  # a batching base's batch settings mean nothing to serial replicas
        replicas = {k: v for k, v in replicas.items() if k not in BATCHING_ONLY}
    raw.update(
        workload=workload, seed=w.seed, replicas=replicas,
        slo={"ttft_s": w.slo_ttft_s, "tpot_s": w.slo_tpot_s, "e2e_s": w.slo_e2e_s, "percentile": w.slo_percentile},
        # a replayed window starts mid-traffic, not from an empty system, and may be shorter than the
        # base's warm-up: every replayed request counts
        metrics={**(raw.get("metrics") or {}), "bin_s": w.bin_s, **({"warmup_s": 0.0} if w.replay is not None else {})},
        compare={"policies": list(w.policies)}, drain_s=None,
    )
    if w.profile is not None:
        raw["profile"] = w.profile
    scenario = scenario_from_dict(raw, Path(w.base).parent, Path(w.base).stem)
    if expected_requests(scenario) > MAX_REQUESTS:
        raise ValueError(f"about {expected_requests(scenario):,} requests per policy (rate x duration): more than "
                         f"the page runs ({MAX_REQUESTS:,}); lower the rate or the duration, or use "
                         "`adaptive-spec simulate compare` on a scenario file")
    return scenario


def trace_rows(requests: pd.DataFrame, classes: dict[str, str]) -> tuple[dict, ...]:
    """Replay rows from the store's requests (``start_time, key, prompt_tokens, new_tokens``): each
    traffic key becomes the scenario class ``classes[key]`` (keys left out are not replayed); the
    tokens a request generated are its output length."""
    rows = requests[requests["key"].isin(list(classes))]
    return tuple({"arrival_s": float(r.start_time), "class": classes[r.key], "prompt_tokens": int(r.prompt_tokens),
                  "output_tokens": int(r.new_tokens)} for r in rows.itertuples())


def parse_rates(text: str) -> list[float]:
    """``"0.1, 0.2,0.4"`` -> [0.1, 0.2, 0.4]; empty -> []; one clear error otherwise."""
    try:
        rates = [float(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"capacity rates must be numbers separated by commas, got {text!r}") from None
    if any(not r > 0 for r in rates):
        raise ValueError(f"capacity rates must be > 0, got {text!r}")
    return sorted(set(rates))


def latency_over_time(requests: list, policy: str, bin_s: float, slo) -> pd.DataFrame:
    """Per bin of arrival time: E2E and TTFT p50 / p95 (s) of finished requests, SLO attainment.

    Unfinished requests count as SLO misses, as in the simulator's summary.
    """
    if not requests:
        return pd.DataFrame(columns=["t_s", "policy", "metric", "value"])
    arrival = np.array([r.arrival_s for r in requests])
    first = np.array([r.first_token_s for r in requests])
    finish = np.array([r.finish_s for r in requests])
    tokens = np.array([r.output_tokens for r in requests])
    done = np.isfinite(finish)
    e2e, ttft = finish - arrival, first - arrival
    tpot = np.where(tokens > 1, (finish - first) / np.maximum(tokens - 1, 1), 0.0)
    meets = done.copy()
    for value, target in ((ttft, slo.ttft_s), (tpot, slo.tpot_s), (e2e, slo.e2e_s)):
        if target is not None:
            meets &= np.where(done, value, math.inf) <= target
    bins = (arrival // bin_s).astype(int)
    rows = []
    for b in np.unique(bins):
        inside = bins == b
        finished = inside & done
        t = float(b * bin_s)
        for name, values in (("E2E", e2e), ("TTFT", ttft)):
            if finished.any():
                for q in (50, 95):
                    rows.append((t, policy, f"{name} p{q}", float(np.percentile(values[finished], q))))
        rows.append((t, policy, "SLO attainment", float(meets[inside].mean())))
    return pd.DataFrame(rows, columns=["t_s", "policy", "metric", "value"])


@dataclass
class PolicyRun:
    result: RunResult
    over_time: pd.DataFrame
    drafting: DraftingByBatch = field(default_factory=DraftingByBatch)  # its decode steps by batch size


def run_policies(scenario: Scenario, progress=None) -> list[PolicyRun]:
    """Each of the scenario's compare policies on the same seeded traffic, in order.

    ``progress(fraction, text)`` is called now and then (every 1 % of the whole) as requests arrive.
    """
    policies = list(scenario.compare_policies) or [scenario.policy]
    duration = scenario.workload.duration_s
    runs = []
    for i, policy in enumerate(policies):
        arrived: list = []  # the Request objects: the simulator stamps their times as they are served
        shown = [-1]

        def tap(request, i=i, policy=policy, arrived=arrived, shown=shown):
            arrived.append(request)
            fraction = (i + min(1.0, request.arrival_s / duration if duration else 1.0)) / len(policies)
            if progress is not None and int(fraction * 100) > shown[0]:
                shown[0] = int(fraction * 100)
                progress(fraction, f"simulating {policy} ({i + 1} of {len(policies)}): {len(arrived):,} requests")

        drafting = DraftingByBatch()
        result = simulate(scenario, policy, on_arrival=tap, extra_hooks=[drafting])
        runs.append(PolicyRun(result, latency_over_time(arrived, policy, scenario.metrics.bin_s, scenario.slo), drafting))
    if progress is not None:
        progress(1.0, "done")
    return runs


def drafting_by_batch(runs: list[PolicyRun]) -> pd.DataFrame:
    """Per policy and sequences in the iteration: the share of decode steps that verified a draft
    (``share``) over ``steps`` decode steps; empty where no run decoded a step."""
    rows = [(run.result.policy, int(n), drafted / steps, steps)
            for run in runs for n, (drafted, steps) in run.drafting.by_batch().items() if steps]
    return pd.DataFrame(rows, columns=["policy", "batch", "share", "steps"])


def summary_table(runs: list[PolicyRun]) -> pd.DataFrame:
    """One row per metric (``simulate compare``'s table), one column per policy."""
    columns = {run.result.policy: dict(metric_rows(run.result.summary)) for run in runs}
    labels = [label for label, _ in metric_rows(runs[0].result.summary)]
    return pd.DataFrame({"metric": labels, **{p: [c[label] for label in labels] for p, c in columns.items()}})


def capacity_curve(scenario: Scenario, rates: list[float], progress=None) -> pd.DataFrame:
    """Fewest replicas meeting the SLO at each arrival rate (the mix and shifts as in the scenario),
    per compare policy: ``simulator.capacity`` at each rate. ``replicas`` is None where even
    ``max_replicas`` does not meet it."""
    from simulator import capacity, with_traffic

    for rate in rates:
        n = expected_requests(with_traffic(scenario, rate=rate))
        if n > MAX_REQUESTS:
            raise ValueError(f"capacity rates: {rate:g} requests/s means about {n:,} requests per run, more than "
                             f"the page runs ({MAX_REQUESTS:,}); use `adaptive-spec simulate capacity`")
    policies = list(scenario.compare_policies) or [scenario.policy]
    rows, total = [], len(policies) * len(rates)
    for i, policy in enumerate(policies):
        for j, rate in enumerate(rates):
            if progress is not None:
                progress((i * len(rates) + j) / total, f"capacity of {policy} at {rate:g} requests/s")
            found = capacity(scenario, rate=rate, policy=policy, max_replicas=scenario.max_replicas)
            rows.append((policy, rate, found.replicas))
    if progress is not None:
        progress(1.0, "done")
    return pd.DataFrame(rows, columns=["policy", "rate", "replicas"])
