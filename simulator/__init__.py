"""A capacity simulator for speculative decoding under an online controller.

Questions it answers: how many replicas meet a latency SLO at a given traffic; what a controller
does to latency and throughput when traffic shifts; whether speculation still pays at a given
batch size. It answers them by discrete-event simulation (SimPy) instead of by running models:

    profile (measured by ``adaptive-spec calibrate``)  --fit-->  cost model (seconds per forward)
    scenario (classes, workload, replicas, policy, SLO) --> requests --> replicas --> metrics

- The *same* policy objects as the engine (``policies/``) choose drafter and ``k`` every step and
  observe the same ``StepOutcome``; the simulator samples how many draft tokens are accepted from
  each request class's acceptance profile and charges the time the cost model predicts.
- Nothing here imports torch or transformers.

Module map (one concept each): ``entities`` (Request, RequestClass), ``lengths``, ``acceptance``,
``arrivals``, ``workload``, ``replay``, ``profile``, ``cost_model``, ``replica`` (batch-1),
``batching`` (continuous batching), ``metrics`` (hooks, summaries), ``scenario`` (file format,
validation, traffic overrides), ``policy_factory``, ``run``, ``budget`` (a run's size, refused
before it starts when too large), ``progress``, ``capacity`` (capacity search, compare),
``sweep``, ``report``, ``cli``. The profile format is documented in ``simulator/PROFILE.md``.
"""

from simulator.acceptance import AcceptanceProfile
from simulator.capacity import CapacityResult, capacity, compare
from simulator.cost_model import FittedCostModel, fit_cost_model
from simulator.entities import Request, RequestClass
from simulator.lengths import LengthDist
from simulator.profile import Profile, load_profile, profile_from_dict
from simulator.replay import read_trace_jsonl, requests_from_rows
from simulator.run import RunResult, Simulation, build_simulation, simulate
from simulator.scenario import Scenario, load_scenario, scenario_from_dict, with_traffic
from simulator.sweep import grid, sweep

__all__ = [
    "AcceptanceProfile", "CapacityResult", "FittedCostModel", "LengthDist", "Profile", "Request", "RequestClass",
    "RunResult", "Scenario", "Simulation", "build_simulation", "capacity", "compare", "fit_cost_model", "grid",
    "load_profile", "load_scenario", "profile_from_dict", "read_trace_jsonl", "requests_from_rows",
    "scenario_from_dict", "simulate", "sweep", "with_traffic",
]
