"""Sweeps: many simulations of one scenario with different settings, in parallel.

A sweep is a list of *configurations*, each a small dict of overrides applied to a base scenario::

    policy      policy spec                       "static:ngram:4"
    seed        run seed                          3
    replicas    replica count                     4
    rate        initial arrival rate (req/s)      2.5
    mix         initial class mix                 {"open_ended": 1.0}
    mode        serial | batching
    max_batch   slots per replica when batching   32

``grid(policy=[...], rate=[...])`` builds the cartesian product. Runs are independent, so they are
spread over local processes (``concurrent.futures.ProcessPoolExecutor``; one simulation is
single-threaded, so one process per core) or, given ``ray_address``, over a Ray cluster. Ray is
imported only then; the ``simulator`` and ``policies`` packages are shipped to the workers with
``runtime_env={"py_modules": ...}``. Results come back in configuration order either way.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

from simulator.run import RunResult, simulate
from simulator.scenario import MODES, Scenario, with_traffic

KEYS = ("policy", "seed", "replicas", "rate", "mix", "mode", "max_batch")


def grid(**axes: list) -> list[dict]:
    """Cartesian product of the given axes: ``grid(rate=[1, 2], policy=["none", "adaptive"])`` -> 4 dicts."""
    for name in axes:
        if name not in KEYS:
            raise ValueError(f"sweep axis {name!r} is not known (known: {', '.join(KEYS)})")
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]


def apply_config(scenario: Scenario, config: dict) -> Scenario:
    """The scenario with one configuration's overrides (policy and seed are passed to simulate)."""
    for name in config:
        if name not in KEYS:
            raise ValueError(f"sweep field {name!r} is not known (known: {', '.join(KEYS)})")
    scenario = with_traffic(scenario, config.get("rate"), config.get("mix"))
    rep = scenario.replicas
    if "mode" in config and config["mode"] not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got mode={config['mode']!r}")
    for name in ("replicas", "max_batch"):
        value = config.get(name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
    rep = replace(rep, count=config.get("replicas") or rep.count, mode=config.get("mode") or rep.mode,
                  max_batch=config.get("max_batch") or rep.max_batch)
    return scenario.with_(replicas=rep)


def run_config(scenario: Scenario, config: dict, with_timeseries: bool = False) -> RunResult:
    """One sweep point; a top-level function so worker processes can unpickle it."""
    result = simulate(apply_config(scenario, config), config.get("policy"), config.get("seed"),
                      with_timeseries=with_timeseries)
    result.summary["config"] = {k: v for k, v in config.items()}
    return result


def sweep(scenario: Scenario, configs: list[dict], workers: int | None = None, ray_address: str | None = None,
          with_timeseries: bool = False, on_done: Callable[[int, RunResult], None] | None = None) -> list[RunResult]:
    """Run every configuration; ``workers=None`` uses one process per CPU, ``1`` runs in this process.
    ``on_done(index, result)`` hears each configuration as it ends (in the order they end); the
    results come back in the order given."""
    for config in configs:  # fail fast on a bad configuration, before any worker starts
        apply_config(scenario, config)
    done = on_done or (lambda index, result: None)
    if ray_address is not None:
        results = _ray_map(scenario, configs, ray_address, with_timeseries)
        for index, result in enumerate(results):
            done(index, result)
        return results
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(configs) <= 1:
        results = []
        for index, config in enumerate(configs):
            results.append(run_config(scenario, config, with_timeseries))
            done(index, results[-1])
        return results
    with ProcessPoolExecutor(max_workers=min(workers, len(configs))) as pool:
        futures = {pool.submit(run_config, scenario, c, with_timeseries): i for i, c in enumerate(configs)}
        results: list[RunResult | None] = [None] * len(configs)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done(futures[future], results[futures[future]])
        return results


def _ray_map(scenario: Scenario, configs: list[dict], address: str, with_timeseries: bool) -> list[RunResult]:
    """Run the configurations as Ray tasks on the cluster at ``address`` ("auto", "ray://host:10001")."""
    try:
        import ray
    except ImportError:
        raise ValueError(f"ray_address={address!r} needs Ray: pip install 'ray[default]'") from None
    import policies
    import simulator

    modules = [str(Path(simulator.__file__).parent), str(Path(policies.__file__).parent)]
    ray.init(address=address, ignore_reinit_error=True, runtime_env={"py_modules": modules})
    remote = ray.remote(run_config)
    scenario_ref = ray.put(scenario)
    return ray.get([remote.remote(scenario_ref, c, with_timeseries) for c in configs])
