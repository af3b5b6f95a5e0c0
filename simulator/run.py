"""Putting a scenario together and running it.

``build_simulation(env, scenario, ...)`` wires the SimPy processes into an environment you own:
the arrival process (one timeout per request, then routing to a replica; requests are drawn
lazily, a block ahead, see ``workload.py``) and one process per replica. Tests use it directly to
add their own hooks or probes; ``simulate`` is the one call that builds, runs and summarises.

Randomness comes from three independent streams derived from ``seed`` (numpy SeedSequence):
traffic, acceptance draws per replica, and policy seeds. Because traffic is drawn first and
separately, two policies simulated with the same seed see the very same requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import simpy

from simulator.batching import BatchingReplica
from simulator.cost_model import FittedCostModel, fit_cost_model
from simulator.entities import Request
from simulator.metrics import HookList, MetricsCollector, summarize, timeseries
from simulator.policy_factory import PolicyBuilder, PolicyPool, engine_cost_steps, policy_builder
from simulator.replica import Replica, SerialReplica
from simulator.scenario import Scenario
from simulator.speed import SpeedTimeline, TimedCost

TRAFFIC, ACCEPTANCE, POLICY = 0, 1, 2  # SeedSequence spawn keys of the three streams


def _stream_seed(seed: int, stream: int, index: int = 0) -> int:
    return int(np.random.SeedSequence([seed, stream, index]).generate_state(1)[0])


@dataclass
class Simulation:
    env: simpy.Environment
    scenario: Scenario
    replicas: list[Replica]
    metrics: MetricsCollector  # every request that has arrived so far: ``metrics.table()``
    cost: object


class ClientSlots:
    """The client's limit on requests in flight (a closed loop, as ``loadgen --max-concurrency``
    runs): ``arrivals`` takes a slot before sending, a completion gives it back. A hook."""

    def __init__(self, env: simpy.Environment, limit: int) -> None:
        self.env = env
        self.slots = simpy.Resource(env, capacity=limit)
        self.held: dict[int, object] = {}  # request id -> its slot

    def take(self, request: Request):
        slot = self.slots.request()
        self.held[request.id] = slot
        return slot

    def on_request_completion(self, request: Request, now: float) -> None:
        slot = self.held.pop(request.id)
        later = request.finish_s - now  # the client hears of it after the scenario's overhead.client_s
        if later > 0:
            self.env.process(self._release(slot, later))
        else:
            self.slots.release(slot)

    def _release(self, slot, after_s: float):
        yield self.env.timeout(after_s)
        self.slots.release(slot)

    def on_request_arrival(self, request, now): ...
    def on_request_start(self, request, now): ...
    def on_first_token(self, request, now): ...
    def on_step(self, outcome, batch_size): ...


def arrivals(env: simpy.Environment, requests: Iterable[Request], replicas: list[Replica], router: str, hooks,
             seed: int, client: ClientSlots | None = None):
    """SimPy process: release each request at its arrival time (with a ``client`` limit, once it
    also has a slot; its latency then counts from that moment, as the client's does) and route it
    to a replica."""
    rng = np.random.default_rng(seed)
    for i, request in enumerate(requests):
        if request.arrival_s > env.now:
            yield env.timeout(request.arrival_s - env.now)
        if client is not None:
            yield client.take(request)
            request.arrival_s = env.now
        hooks.on_request_arrival(request, env.now)
        if router == "least_loaded":
            target = min(replicas, key=lambda r: r.outstanding)  # ties: lowest index
        elif router == "round_robin":
            target = replicas[i % len(replicas)]
        else:
            target = replicas[int(rng.integers(len(replicas)))]
        target.submit(request)


def build_simulation(env: simpy.Environment, scenario: Scenario, policy: str | PolicyBuilder | None = None,
                     seed: int | None = None, cost=None, extra_hooks: list | None = None,
                     on_arrival: Callable[[Request], None] | None = None) -> Simulation:
    """Create replicas and the arrival process in ``env`` (nothing runs, nothing is drawn, until ``env.run``).

    ``policy`` overrides the scenario's spec (a spec string or a ``seed -> Policy`` callable);
    ``cost`` overrides the cost model fitted on the scenario's profile (any object with
    ``prefill_s``, ``verify_s`` and ``draft_s``, e.g. an exponential service time for queueing tests).
    ``on_arrival`` sees each request as it is released (progress reports); unlike a hook it costs
    nothing per step.
    """
    seed = scenario.seed if seed is None else seed
    build = policy_builder(policy if policy is not None else scenario.policy, scenario.drafters)
    cost = cost if cost is not None else fit_cost_model(scenario.profile)
    fitted = isinstance(cost, FittedCostModel)
    if scenario.speed or scenario.prefill_speed is not None:
        cost = TimedCost(cost, SpeedTimeline(scenario.speed), lambda: env.now, scenario.prefill_speed)
    metrics = MetricsCollector(scenario.metrics.bin_s)
    limit = getattr(scenario.workload, "concurrency", None)
    client = ClientSlots(env, limit) if limit else None
    extra = [*(extra_hooks or []), *([client] if client else [])]
    hooks = HookList([metrics, *extra]) if extra else metrics
    requests = scenario.workload.stream(scenario.classes, np.random.default_rng(_stream_seed(seed, TRAFFIC)))
    if on_arrival is not None:
        requests = _tapped(requests, on_arrival)
    warm_steps = engine_cost_steps(cost, scenario.drafters) if fitted else ()
    replicas: list[Replica] = []
    for index in range(scenario.replicas.count):
        pool = PolicyPool(build, scenario.policy_scope, _stream_seed(seed, POLICY, index) % 2**31, warm_steps)
        args = (env, index, cost, scenario.classes, pool, hooks, _stream_seed(seed, ACCEPTANCE, index))
        if scenario.replicas.mode == "batching":
            replicas.append(BatchingReplica(*args, max_batch=scenario.replicas.max_batch,
                                            draft_cap=scenario.replicas.draft_cap,
                                            plain_slowdown=scenario.replicas.plain_slowdown,
                                            objective=scenario.replicas.batch_objective,
                                            cut=scenario.replicas.batch_cut,
                                            cap_steps=scenario.replicas.cap_steps,
                                            prefill_chunk=scenario.replicas.prefill_chunk,
                                            prefill_rides=scenario.replicas.prefill_rides, overhead=scenario.overhead))
        else:
            replicas.append(SerialReplica(*args, overhead=scenario.overhead))
    env.process(arrivals(env, requests, replicas, scenario.replicas.router, hooks, _stream_seed(seed, TRAFFIC, 1),
                         client))
    return Simulation(env, scenario, replicas, metrics, cost)


def _tapped(requests: Iterable[Request], on_arrival: Callable[[Request], None]):
    for request in requests:
        on_arrival(request)
        yield request


@dataclass
class RunResult:
    """What one run answers, ready for JSON (``to_dict``) or a table (``simulator/report.py``)."""

    scenario: str
    policy: str
    seed: int
    replicas: int
    mode: str
    summary: dict
    phases: list[dict] = field(default_factory=list)  # one summary per workload phase (before/after shifts)
    timeseries: dict = field(default_factory=dict)
    wall_s: float = 0.0  # wall seconds the simulation took (not simulated time)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def simulate(scenario: Scenario, policy: str | PolicyBuilder | None = None, seed: int | None = None,
             cost=None, replicas: int | None = None, with_timeseries: bool = True,
             on_arrival: Callable[[Request], None] | None = None, extra_hooks: list | None = None) -> RunResult:
    """Run a scenario to the end (all requests done, or ``drain_s`` after arrivals stop).

    ``on_arrival(request)`` is called as each request arrives (``simulator/progress.py`` uses it);
    ``extra_hooks`` see every event beside the metrics (``build_simulation``).
    """
    import time

    if replicas is not None:
        scenario = scenario.with_(replicas=type(scenario.replicas)(**{**vars(scenario.replicas), "count": replicas}))
    batching = scenario.replicas.mode == "batching" and scenario.replicas.max_batch > 1
    if cost is None and batching and not any(v.batch > 1 for v in scenario.profile.verify):
        # the replica would fail at its first batched forward, deep in the run: say so before it starts
        raise ValueError(f"replicas.mode=batching (max_batch={scenario.replicas.max_batch}): the profile times "
                         "forwards of one sequence only, so a batch's forward has no price; use a profile calibrated "
                         "with --batch-sizes (such as simulator/profiles/smollm2_cpu_batched.json) or "
                         "replicas.max_batch=1")
    started = time.perf_counter()
    env = simpy.Environment()
    sim = build_simulation(env, scenario, policy, seed, cost, extra_hooks=extra_hooks, on_arrival=on_arrival)
    horizon = None if scenario.drain_s is None else scenario.workload.duration_s + scenario.drain_s
    # replicas idle on a wake-up event nothing will trigger, so with no horizon the event queue
    # runs dry exactly when the last request has finished
    env.run(until=horizon)
    slo, warmup = scenario.slo, scenario.metrics.warmup_s
    table = sim.metrics.table()
    bounds = [0.0, *scenario.workload.boundaries(), float("inf")]
    phases = []
    if len(bounds) > 2:
        for lo, hi in zip(bounds, bounds[1:]):
            phase = summarize(sim.metrics, slo, warmup, (lo, min(hi, scenario.workload.duration_s)), table)
            phases.append({"start_s": lo, "end_s": min(hi, scenario.workload.duration_s), **phase})
    if policy is None or isinstance(policy, str):
        name = policy or scenario.policy
    else:
        name = getattr(policy, "__name__", "custom")
    return RunResult(
        scenario.name, name, scenario.seed if seed is None else seed, scenario.replicas.count, scenario.replicas.mode,
        summarize(sim.metrics, slo, warmup, table=table), phases,
        timeseries(sim.metrics, table) if with_timeseries else {}, time.perf_counter() - started,
    )

