"""Planning questions answered by repeated simulation: capacity and policy comparison.

*Capacity*: the fewest replicas whose latencies meet the SLO at a given arrival rate and mix.
"Meet" means: for every target set in the scenario's ``slo`` (TTFT, TPOT, end-to-end), the
``slo.percentile`` (95 by default) of that latency over the run is at or under the target;
requests still unfinished when the run stops count as infinitely late. The search doubles the
replica count until the SLO holds, then bisects between the last failure and the first success
(``O(log n)`` runs). It assumes more replicas never hurt, true for the routers offered here.
Every candidate is simulated on the same seed, so the traffic is identical.

*Compare*: several policies side by side on the same seeded traffic, typically with a shift, so
the only difference between the rows is the controller. Per-phase summaries show what happened
before and after each shift.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.policy_factory import policy_builder
from simulator.run import RunResult, simulate
from simulator.scenario import Scenario, with_traffic
from simulator.sweep import sweep


@dataclass
class CapacityResult:
    replicas: int | None  # fewest replicas meeting the SLO; None: not met within max_replicas
    policy: str
    rate: float | None
    tried: list[dict] = field(default_factory=list)  # one row per simulated replica count

    def to_dict(self) -> dict:
        return {"replicas": self.replicas, "policy": self.policy, "rate": self.rate, "tried": self.tried}


def _row(n: int, result: RunResult) -> dict:
    s = result.summary
    return {"replicas": n, "ok": s["slo_check"]["ok"], "slo_check": s["slo_check"],
            "goodput_rps": s["goodput_rps"], "throughput_rps": s["throughput_rps"],
            "queue_mean": s["queue"]["mean"], "unfinished": s["requests"]["unfinished"]}


def capacity(scenario: Scenario, rate: float | None = None, mix: dict[str, float] | None = None,
             policy: str | None = None, max_replicas: int | None = None, seed: int | None = None,
             on_tried: Callable[[dict], None] | None = None) -> CapacityResult:
    """The fewest replicas meeting the scenario's SLO percentile at ``rate`` and ``mix``.

    ``on_tried(row)`` sees each replica count's row as its run ends (the CLI's progress)."""
    slo = scenario.slo
    if slo.ttft_s is None and slo.tpot_s is None and slo.e2e_s is None:
        raise ValueError("slo: capacity search needs at least one of slo.ttft_s, slo.tpot_s, slo.e2e_s")
    scenario = with_traffic(scenario, rate, mix)
    limit = max_replicas or scenario.max_replicas
    policy = policy or scenario.policy
    results: dict[int, bool] = {}
    tried = []

    def ok(n: int) -> bool:
        if n not in results:
            run = simulate(scenario, policy, seed, replicas=n, with_timeseries=False)
            if not run.summary["requests"]["arrived"]:  # the same traffic at every n: no answer to search for
                raise ValueError(f"capacity: the workload released no request to measure (after "
                                 f"metrics.warmup_s={scenario.metrics.warmup_s:g}); raise its rate or duration_s")
            tried.append(_row(n, run))
            if on_tried is not None:
                on_tried(tried[-1])
            results[n] = run.summary["slo_check"]["ok"]
        return results[n]

    low, high = 0, 1  # invariant once found: low fails (0 trivially), high meets the SLO
    while not ok(high):
        low = high
        if high >= limit:
            return CapacityResult(None, policy, rate, sorted(tried, key=lambda r: r["replicas"]))
        high = min(2 * high, limit)
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return CapacityResult(high, policy, rate, sorted(tried, key=lambda r: r["replicas"]))


def compare(scenario: Scenario, policies: list[str] | None = None, seed: int | None = None,
            workers: int | None = 1, ray_address: str | None = None,
            on_done: Callable[[int, RunResult], None] | None = None) -> list[RunResult]:
    """Simulate each policy on the same seeded traffic; results in the order given.

    ``workers`` > 1 runs the policies in local processes, ``ray_address`` on a Ray cluster;
    ``on_done(index, result)`` hears each policy's run as it ends.
    """
    specs = list(policies or scenario.compare_policies or [scenario.policy])
    for i, spec in enumerate(specs):  # reject a bad spec before spending time on the others
        policy_builder(spec, scenario.drafters, f"policies[{i}]")
    if (workers or 1) <= 1 and ray_address is None:
        results = []
        for index, spec in enumerate(specs):
            results.append(simulate(scenario, spec, seed))
            if on_done is not None:
                on_done(index, results[-1])
        return results
    return sweep(scenario, [{"policy": spec, "seed": seed} for spec in specs], workers=workers,
                 ray_address=ray_address, with_timeseries=True, on_done=on_done)
