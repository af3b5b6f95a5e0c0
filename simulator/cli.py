"""``adaptive-spec simulate``: the simulator's command line (a Typer sub-app).

    simulate run       SCENARIO [--policy P] [--seed N] [--replicas N] [--rate R] [--json OUT]
    simulate compare   SCENARIO [--policy P ...] [--seed N] [--workers N] [--ray-address A] [--json OUT]
    simulate capacity  SCENARIO [--rate R] [--policy P] [--max-replicas N] [--seed N] [--json OUT]
    simulate sweep     SCENARIO [--policy P ...] [--rate R ...] [--replicas N ...] [--max-batch N ...]
                       [--seed N ...] [--workers N] [--ray-address A] [--json OUT]
    every command also takes [--max-requests N] [--force] [--time-limit SECONDS]

A bad scenario (or option) prints one line naming the field and exits with status 2. So does a
run too large to finish: before it starts, every command estimates its requests, memory and (for
large runs, from a timed pilot) wall time, and refuses what will not fit, naming the estimate and
the overrides ``--max-requests N`` (simulate the first N arrivals) and ``--force``
(``simulator/budget.py``). ``run`` shows progress on stderr once a run lasts more than a moment;
``capacity`` says there each replica count's verdict as its run ends, ``compare`` and ``sweep``
each run's as it ends.
Mount with ``app.add_typer(simulator.cli.app, name="simulate")``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(help="Capacity simulator: the same policies, a cost model fitted on measured profiles.",
                  no_args_is_help=True)

# what simulator.scenario.shipped_scenarios() lists, without importing it (every command would pay for it)
_SHIPPED = sorted(p.stem for p in (Path(__file__).parent / "scenarios").glob("*.yaml"))
ScenarioArg = typer.Argument(..., help="Scenario file (YAML or JSON; see simulator/scenarios/example_shift.yaml), or the "
                             f"name of a shipped one: {', '.join(_SHIPPED)}.")
JsonOpt = typer.Option(None, "--json", help="Also write the full result as JSON to this path.")
SeedOpt = typer.Option(None, help="Seed for traffic, acceptance draws and policies (default: the scenario's).")
MaxRequestsOpt = typer.Option(None, "--max-requests", min=1, help="Simulate only the first N arrivals of each run "
                              "(lowers the scenario's workload.max_requests): how a too-large run is made to fit.")
ForceOpt = typer.Option(False, "--force", help="Run even when the estimate says it will not fit in memory or in "
                        "--time-limit.")
TimeLimitOpt = typer.Option(3600.0, "--time-limit", min=0, help="Refuse what a timed pilot says will take longer "
                            "than this many wall seconds in all (0: no limit).")


def _load(path: Path):
    from simulator.scenario import load_scenario

    try:
        return load_scenario(path)
    except ValueError as err:
        _fail(err)


def _check_out(json_out: Optional[Path]) -> None:
    """Refuse an unwritable ``--json`` path before the run, not after it."""
    from adaptive_spec.outputs import check_writable  # torch-free

    if json_out is not None:
        try:
            check_writable(json_out, "json")
        except ValueError as err:
            _fail(err)


def _write(obj, json_out: Optional[Path]) -> None:
    from simulator.report import write_json

    if json_out is not None:
        try:
            write_json(obj, json_out)
        except ValueError as err:
            _fail(err)


def _tried(row: dict) -> str:
    """A capacity search's progress line for one replica count as its run ends."""
    n, ok = row["replicas"], row["ok"]
    verb = ("meets" if ok else "misses") if n == 1 else ("meet" if ok else "miss")
    return f"capacity: {n} replica{'' if n == 1 else 's'} {verb} the SLO"


def _finished(command: str, names: list[str]):
    """An ``on_done`` callback: one line on stderr as each of the runs ``names`` ends (a long
    compare or sweep otherwise shows nothing until its table)."""
    done = []

    def report(index: int, result) -> None:
        done.append(index)
        typer.echo(f"{command}: {len(done)} of {len(names)} done ({names[index]})", err=True)
    return report


def _fail(err: Exception):
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(2)


def _sized(s, max_requests, force, time_limit, policy=None, seed=None, replicas=None, runs=1, parallel=1):
    """The scenario capped at ``max_requests``, and its size; exits with one line when it will not fit."""
    from simulator.budget import check, estimate, with_max_requests

    try:
        s = with_max_requests(s, max_requests)
        size = estimate(s, policy, seed, replicas, measure=not force and time_limit > 0)
        check(size, runs, parallel, time_limit or None, force)
    except ValueError as err:
        _fail(err)
    return s, size


@app.command()
def run(
    scenario: Path = ScenarioArg,
    policy: Optional[str] = typer.Option(None, help="Policy spec overriding the scenario's (e.g. static:ngram:4)."),
    seed: Optional[int] = SeedOpt,
    replicas: Optional[int] = typer.Option(None, min=1, help="Replica count overriding the scenario's."),
    rate: Optional[float] = typer.Option(None, help="Initial arrival rate (req/s) overriding the scenario's."),
    timeseries: bool = typer.Option(True, help="Print the per-bin table (spec on/off, acceptance, queue)."),
    json_out: Optional[Path] = JsonOpt,
    max_requests: Optional[int] = MaxRequestsOpt,
    force: bool = ForceOpt,
    time_limit: float = TimeLimitOpt,
) -> None:
    """Simulate one scenario and print latency, throughput, goodput, queueing and acceptance."""
    from simulator.progress import Progress
    from simulator.report import print_run
    from simulator.run import simulate
    from simulator.scenario import with_traffic

    _check_out(json_out)
    s = _load(scenario)
    try:
        s = with_traffic(s, rate)
    except ValueError as err:
        _fail(err)
    s, size = _sized(s, max_requests, force, time_limit, policy, seed, replicas)
    progress = Progress(s.workload.duration_s, size.requests)
    try:
        result = simulate(s, policy, seed, replicas=replicas, on_arrival=progress)
    except ValueError as err:
        _fail(err)
    except KeyboardInterrupt:
        typer.echo(f"interrupted after {progress.arrived:,} of ~{size.requests:,} requests", err=True)
        raise typer.Exit(130) from None
    finally:
        progress.close()
    print_run(result, series=timeseries)
    _write(result, json_out)


@app.command()
def compare(
    scenario: Path = ScenarioArg,
    policy: Optional[list[str]] = typer.Option(None, "--policy", help="Policy spec; repeat for several "
                                               "(default: the scenario's compare.policies)."),
    seed: Optional[int] = SeedOpt,
    workers: int = typer.Option(1, min=1, help="Local processes to run policies in parallel."),
    ray_address: Optional[str] = typer.Option(None, help="Run on this Ray cluster instead (e.g. auto)."),
    json_out: Optional[Path] = JsonOpt,
    max_requests: Optional[int] = MaxRequestsOpt,
    force: bool = ForceOpt,
    time_limit: float = TimeLimitOpt,
) -> None:
    """Several policies side by side on the same seeded traffic (and its shifts)."""
    from simulator.capacity import compare as compare_policies
    from simulator.report import print_compare

    _check_out(json_out)
    s = _load(scenario)
    specs = policy or list(s.compare_policies or [s.policy])
    parallel = 1 if ray_address else min(workers, len(specs))  # a cluster's resources are not known here
    s, _ = _sized(s, max_requests, force, time_limit, specs[0], seed, runs=len(specs), parallel=parallel)
    try:
        results = compare_policies(s, policy or None, seed, workers, ray_address,
                                   on_done=_finished("compare", specs))
    except ValueError as err:
        _fail(err)
    print_compare(results)
    _write(results, json_out)


@app.command()
def capacity(
    scenario: Path = ScenarioArg,
    rate: Optional[float] = typer.Option(None, help="Arrival rate (req/s) to plan for (default: the scenario's)."),
    policy: Optional[str] = typer.Option(None, help="Policy spec (default: the scenario's)."),
    max_replicas: Optional[int] = typer.Option(None, min=1, help="Give up above this many replicas."),
    seed: Optional[int] = SeedOpt,
    json_out: Optional[Path] = JsonOpt,
    max_requests: Optional[int] = MaxRequestsOpt,
    force: bool = ForceOpt,
    time_limit: float = TimeLimitOpt,
) -> None:
    """The fewest replicas whose SLO percentile latencies meet the scenario's slo targets."""

    from simulator.capacity import capacity as search
    from simulator.report import print_capacity
    from simulator.budget import with_max_requests
    from simulator.scenario import with_traffic

    _check_out(json_out)
    s = _load(scenario)
    try:
        s = with_max_requests(s, max_requests)
        planned = with_traffic(s, rate)  # the traffic every candidate replica count sees
    except ValueError as err:
        _fail(err)
    runs = 2 * math.ceil(math.log2(max_replicas or s.max_replicas)) + 1  # doubling, then bisection
    _sized(planned, None, force, time_limit, policy, seed, runs=runs)
    try:
        result = search(s, rate=rate, policy=policy, max_replicas=max_replicas, seed=seed,
                        on_tried=lambda row: typer.echo(_tried(row), err=True))
    except ValueError as err:
        _fail(err)
    print_capacity(result)
    _write(result, json_out)
    if result.replicas is None:
        raise typer.Exit(1)


@app.command()
def sweep(
    scenario: Path = ScenarioArg,
    policy: Optional[list[str]] = typer.Option(None, "--policy", help="Policy specs to sweep (repeat)."),
    rate: Optional[list[float]] = typer.Option(None, "--rate", help="Arrival rates to sweep (repeat)."),
    replicas: Optional[list[int]] = typer.Option(None, "--replicas", help="Replica counts to sweep (repeat)."),
    max_batch: Optional[list[int]] = typer.Option(None, "--max-batch", help="Batch slots to sweep (repeat)."),
    seed: Optional[list[int]] = typer.Option(None, "--seed", help="Seeds to sweep (repeat)."),
    workers: Optional[int] = typer.Option(None, min=1, help="Local processes (default: one per CPU)."),
    ray_address: Optional[str] = typer.Option(None, help="Run on this Ray cluster instead (e.g. auto)."),
    json_out: Optional[Path] = JsonOpt,
    max_requests: Optional[int] = MaxRequestsOpt,
    force: bool = ForceOpt,
    time_limit: float = TimeLimitOpt,
) -> None:
    """Every combination of the given values, run in parallel; one table row per configuration."""
    import os

    from simulator.budget import expected_requests, with_max_requests
    from simulator.report import _fmt, _table
    from simulator.sweep import apply_config, grid, sweep as run_sweep

    _check_out(json_out)
    s = _load(scenario)
    axes = dict(policy=policy, rate=rate, replicas=replicas, max_batch=max_batch, seed=seed)
    axes = {k: v for k, v in axes.items() if v}
    try:
        s = with_max_requests(s, max_requests)
        configs = grid(**axes) if axes else [{}]
        largest = max(configs, key=lambda c: expected_requests(apply_config(s, c)))  # sized for the worst
    except ValueError as err:
        _fail(err)
    parallel = 1 if ray_address else min(workers or os.cpu_count() or 1, len(configs))
    _sized(apply_config(s, largest), None, force, time_limit, largest.get("policy"), largest.get("seed"),
           runs=len(configs), parallel=parallel)
    try:
        names = [", ".join(f"{k}={v}" for k, v in c.items()) or "(scenario)" for c in configs]
        results = run_sweep(s, configs, workers, ray_address, on_done=_finished("sweep", names))
    except ValueError as err:
        _fail(err)
    rows = []
    for r in results:
        sm = r.summary
        config = ", ".join(f"{k}={v}" for k, v in sm["config"].items())
        rows.append([config or "(scenario)", _fmt(sm["e2e_s"]["p95"], "ms"), _fmt(sm["tpot_s"]["p50"], "ms"),
                     _fmt(sm["throughput_tokens_s"]), _fmt(sm["goodput_rps"]), _fmt(sm["slo_check"]["ok"])])
    _table(f"sweep of {s.name}", ["configuration", "E2E p95 ms", "TPOT p50 ms", "tokens/s", "goodput", "SLO met"], rows)
    _write(results, json_out)


if __name__ == "__main__":
    app()
