"""Scenarios: one file that says what to simulate.

A scenario (YAML or JSON) names a measured profile, the request classes, the traffic, the
replicas, the policy and the service-level objective. Every field is checked on load; a bad file
raises one ``ValueError`` that names the field path and the value (``workload.arrival.rate must be
> 0, got -2``), before any simulation runs. A complete example with every field commented is
``simulator/scenarios/example_shift.yaml``.

Top-level fields (``*`` required)::

    name          label for reports                                   default: file stem
    seed          seeds traffic, acceptance draws and policies        default: 0
    profile *     path (relative to the scenario file) or inline profile object (or, from
                  Python, a ``Profile`` already loaded)
    classes *     {name: {prompt_tokens *, output_tokens *, acceptance, key}}
    workload *    {arrival: {process, rate *, ...}, mix *, duration_s *, shifts, max_requests}
                  or {replay *: path.jsonl, time_scale, concurrency}; from Python, ``replay`` may also be the
                  trace rows themselves (a list of mappings), so a caller holding a trace in
                  memory need not write it to a file; ``concurrency``: the client's limit on
                  requests in flight (``loadgen --max-concurrency``), each sent once a slot frees
    replicas      {count, mode: serial|batching, max_batch, router: least_loaded|round_robin|random,
                   draft_cap (batching: the engine's cap on drafts as the batch fills; default true),
                   prefill_chunk (batching: prompt tokens an iteration prefills while sequences
                   run, as the engine's --prefill-chunk; default null: whole prompts at once),
                   plain_slowdown (batching: the cap's bound on what drafts cost a plain row, as
                   the server's --plain-slowdown: a number >= 0 or "off"; default the server's),
                   prefill_rides (batching: prompts ride in the running sequences' forward, as the
                   engine's; false: a prefill forward of their own first; default true),
                   batch_objective (batching: what the cap maximises, as the server's
                   --batch-objective: goodput or power; default the server's),
                   batch_cut (batching: how the cap cuts drafts, as the server's --batch-cut:
                   per-row or common; default the server's),
                   cap_steps (batching: forwards a server's cap learned from after its
                   --profile, [rows, width, seconds, slots] each, in order, that the replica's
                   cap learns too before the first request: it starts where that server's was)}
    policy        spec such as none, static:ngram:4, heuristic:ngram, adaptive      default: none
    policy_scope  replica | key   (one controller per replica, or per replica and traffic key)
    slo           {ttft_s, tpot_s, e2e_s, percentile}                 targets left out are not checked
    metrics       {bin_s, warmup_s}
    drain_s       after arrivals stop, stop simulating this much later (null: until all finish)
    speed         [{at_s, factor}, ...]: every cost x factor from at_s on (the machine's speed
                  drifting from the profile's; simulator/speed.py)            default: none
    prefill_speed factor: prefill's cost x this instead of following speed (a batched run's
                  timeline is measured on its decode forwards; a prefill is a one-sequence
                  forward, whose speed plain one-request probes measure)    default: none
    overhead      {request_s, step_s, client_s}: seconds a served request spends outside the
                  model's forwards (a server's, measured: benchmarks/serve_shift.py); request_s
                  and step_s hold the replica (per request before its first token, per decode
                  step; batching: per iteration), client_s holds only the client's slot under
                  workload.concurrency (HTTP, chat template, tokenizing: added to each request's
                  first token and end); speed does not scale them                default: all 0
    compare       {policies: [spec, ...]}                              for ``simulate compare``
    capacity      {max_replicas}                                       for ``simulate capacity``
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from policies.batch_cap import CUTS, OBJECTIVES, BatchDraftCap
from policies.lookup import DRAFTER as LOOKUP
from simulator.acceptance import acceptance_from_dict
from simulator.arrivals import arrival_process_from_dict
from simulator.entities import RequestClass
from simulator.lengths import length_dist_from_dict
from simulator.profile import Profile, load_profile, profile_from_dict
from simulator.replay import read_trace_jsonl, requests_from_rows
from simulator.workload import Shift, Workload

MODES = ("serial", "batching")
# the replica fields that only a batching replica takes (refused by name for serial ones)
BATCHING_ONLY = ("prefill_chunk", "plain_slowdown", "prefill_rides", "batch_objective", "cap_steps", "batch_cut")
ROUTERS = ("least_loaded", "round_robin", "random")
SCOPES = ("replica", "key")


@dataclass(frozen=True)
class ReplicaConfig:
    count: int = 1  # replicas behind the router
    mode: str = "serial"  # serial: batch-1 FIFO (today's engine); batching: continuous batching
    max_batch: int = 8  # batching only: running sequences per replica (KV-cache slots)
    router: str = "least_loaded"  # least_loaded: fewest queued + running; round_robin; random
    # batching only: the engine's BatchDraftCap (policies/batch_cap.py) caps learning rows' drafts
    draft_cap: bool = True
    prefill_chunk: int | None = None  # batching only: as the engine's prefill_chunk; None: whole prompts
    plain_slowdown: float | None = BatchDraftCap.plain_slowdown  # batching only: the cap's bound; None: off
    prefill_rides: bool = True  # batching only: prompts ride in the running sequences' forward (the engine's)
    batch_objective: str = BatchDraftCap.objective  # batching only: what the cap maximises
    # batching only: (rows, width, seconds, slots) forwards the cap learns after its warm start
    cap_steps: tuple[tuple[int, float, float, float], ...] = ()
    batch_cut: str = BatchDraftCap.cut  # batching only: the cap's drafts cut row by row, or to one length


@dataclass(frozen=True)
class SLO:
    ttft_s: float | None = None  # time-to-first-token target, seconds
    tpot_s: float | None = None  # time-per-output-token target, seconds
    e2e_s: float | None = None  # end-to-end latency target, seconds
    percentile: float = 95.0  # capacity search checks this percentile of each set target


@dataclass(frozen=True)
class MetricsConfig:
    bin_s: float = 60.0  # width of time-series bins; a minute shows a shift without drowning in noise
    warmup_s: float = 0.0  # latencies of requests arriving earlier are left out (empty-system bias)


@dataclass(frozen=True)
class ReplayWorkload:
    """Recorded traffic (see ``simulator/replay.py``), already read into rows."""

    rows: tuple[dict, ...]
    time_scale: float = 1.0  # > 1 replays faster (higher rate)
    duration_s: float = 0.0  # filled in: last arrival after scaling
    max_requests: int | None = None  # replay only the first this many arrivals; None: all
    # the client's limit on requests in flight (``loadgen --max-concurrency``): a request is sent at
    # its arrival or once fewer are outstanding, whichever is later; None: sent at its arrival
    concurrency: int | None = None

    @classmethod
    def from_rows(cls, rows, class_names, time_scale: float = 1.0) -> ReplayWorkload:
        """From trace rows of any source (a JSONL file, telemetry store rows as dicts); validates them."""
        rows = tuple(dict(r) for r in rows)
        requests = requests_from_rows(rows, class_names, time_scale)
        return cls(rows, time_scale, requests[-1].arrival_s if requests else 0.0)

    def generate(self, classes, rng):
        return requests_from_rows(self.rows, classes, self.time_scale)[: self.max_requests]

    def stream(self, classes, rng):
        return iter(self.generate(classes, rng))  # the rows are in memory already

    def boundaries(self) -> list[float]:
        return []


@dataclass(frozen=True)
class Overhead:
    """What a served request costs besides the forwards the profile prices (``overhead`` above)."""

    request_s: float = 0.0  # on the replica, before the first token (setup, wrap-up, the prefill's departure from its price)
    step_s: float = 0.0  # on the replica, every decode step or batched iteration (sampling, acceptance, the controller, streaming)
    client_s: float = 0.0  # off the replica: between the client and the engine, both ways


OVERHEAD_FIELDS = tuple(f.name for f in fields(Overhead))


@dataclass(frozen=True)
class Scenario:
    name: str
    profile: Profile
    classes: dict[str, RequestClass]
    workload: Workload | ReplayWorkload
    seed: int = 0
    replicas: ReplicaConfig = field(default_factory=ReplicaConfig)
    policy: str = "none"
    policy_scope: str = "replica"
    slo: SLO = field(default_factory=SLO)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    drain_s: float | None = None
    compare_policies: tuple[str, ...] = ()
    max_replicas: int = 64  # capacity search gives up above this many replicas
    speed: tuple[tuple[float, float], ...] = ()  # (at_s, factor): costs x factor from at_s on (simulator/speed.py)
    prefill_speed: float | None = None  # prefill's own factor, in place of speed's (simulator/speed.py)
    overhead: Overhead = field(default_factory=Overhead)

    def with_(self, **changes) -> Scenario:
        return replace(self, **changes)

    @property
    def drafters(self) -> list[str]:
        """Drafters this scenario can simulate: a draft cost, and acceptance for every class."""
        return sorted(d for d in self.profile.draft if all(d in c.acceptance for c in self.classes.values()))


def with_traffic(scenario: Scenario, rate: float | None = None, mix: dict[str, float] | None = None) -> Scenario:
    """The scenario with its initial arrival rate and/or mix replaced (shifts keep their own values)."""
    if rate is None and mix is None:
        return scenario
    if not isinstance(scenario.workload, Workload):
        raise ValueError("rate / mix overrides need a synthetic workload, not a replayed trace (use time_scale)")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a finite number > 0, got rate={rate!r}")
    for name in mix or {}:
        if name not in scenario.classes:
            raise ValueError(f"mix.{name} is not a class of the scenario (classes: {sorted(scenario.classes)})")
    workload = replace(scenario.workload, rate=rate if rate is not None else scenario.workload.rate,
                       mix=mix if mix is not None else scenario.workload.mix)
    return scenario.with_(workload=workload)


# ---- validation helpers: each raises ValueError naming the field path and the value ----------------

def _mapping(raw: object, path: str) -> dict:
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must be a mapping, got {raw!r}")
    return raw


def _only(raw: dict, known: tuple[str, ...] | set[str], path: str) -> None:
    for key in raw:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            raise ValueError(f"{where} is not a known field (known: {', '.join(sorted(known))})")


def _flag(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{path} must be true or false, got {value!r}")
    return value


def _required(raw: dict, key: str, path: str):
    if key not in raw or raw[key] is None:
        raise ValueError(f"{path + '.' if path else ''}{key} is required")
    return raw[key]


def _num(value: object, path: str, low: float = 0.0, strict: bool = True, integer: bool = False) -> float:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValueError(f"{path} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):  # nan passes every comparison below
        raise ValueError(f"{path} must be a finite number, got {value!r}")
    if value < low or (strict and value == low):
        raise ValueError(f"{path} must be {'>' if strict else '>='} {low:g}, got {value!r}")
    return value


def _slowdown(value: object) -> float | None:
    if value == "off":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f'replicas.plain_slowdown must be a number >= 0 or "off", got {value!r}')
    return float(value)


def _speed(raw: object) -> tuple[tuple[float, float], ...]:
    if not isinstance(raw, list):
        raise ValueError(f"speed must be a list of {{at_s, factor}}, got {raw!r}")
    points = []
    for i, point in enumerate(raw):
        point = _mapping(point, f"speed[{i}]")
        _only(point, ("at_s", "factor"), f"speed[{i}]")
        points.append((float(_num(_required(point, "at_s", f"speed[{i}]"), f"speed[{i}].at_s", strict=False)),
                       float(_num(_required(point, "factor", f"speed[{i}]"), f"speed[{i}].factor"))))
    return tuple(sorted(points))


def _overhead(raw: object) -> Overhead:
    raw = _mapping(raw, "overhead")
    _only(raw, OVERHEAD_FIELDS, "overhead")
    values = {name: float(_num(value, f"overhead.{name}", strict=False)) for name, value in raw.items()}
    for name, value in values.items():
        if not math.isfinite(value):
            raise ValueError(f"overhead.{name} must be a finite number of seconds, got {raw[name]!r}")
    return Overhead(**values)


def _cap_steps(raw: object) -> tuple[tuple[int, float, float, float], ...]:
    """``replicas.cap_steps``: forwards as ``[rows, width, seconds, slots]`` (``BatchDraftCap.observe``'s)."""
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"replicas.cap_steps must be a list of [rows, width, seconds, slots], got {raw!r}")
    steps = []
    for i, step in enumerate(raw):
        path = f"replicas.cap_steps[{i}]"
        if not isinstance(step, (list, tuple)) or len(step) != 4:
            raise ValueError(f"{path} must be [rows, width, seconds, slots], got {step!r}")
        rows, width, seconds, slots = step
        steps.append((int(_num(rows, f"{path} rows", integer=True)),
                      float(_num(width, f"{path} width", low=1.0, strict=False)),
                      float(_num(seconds, f"{path} seconds")), float(_num(slots, f"{path} slots", strict=False))))
        for name, value in zip(("width", "seconds", "slots"), steps[-1][1:]):
            if not math.isfinite(value):  # one would turn every price of the cap into nan
                raise ValueError(f"{path} {name} must be finite, got {value!r}")
    return tuple(steps)


def _choice(value: object, options: tuple[str, ...], path: str) -> str:
    if value not in options:
        raise ValueError(f"{path} must be one of {', '.join(options)}, got {value!r}")
    return value


def _mix(raw: object, classes: dict, path: str) -> dict[str, float]:
    raw = _mapping(raw, path)
    if not raw:
        raise ValueError(f"{path} must name at least one class, got {{}}")
    for name, weight in raw.items():
        if name not in classes:
            raise ValueError(f"{path}.{name} is not a class of the scenario (classes: {', '.join(sorted(classes))})")
        _num(weight, f"{path}.{name}", 0.0, strict=False)
    if sum(raw.values()) <= 0:
        raise ValueError(f"{path} weights must not all be 0, got {raw!r}")
    return {k: float(v) for k, v in raw.items()}


def _classes(raw: object, profile: Profile) -> dict[str, RequestClass]:
    raw = _mapping(raw, "classes")
    if not raw:
        raise ValueError("classes must define at least one request class, got {}")
    out = {}
    for name, spec in raw.items():
        path = f"classes.{name}"
        spec = _mapping(spec, path)
        _only(spec, ("prompt_tokens", "output_tokens", "acceptance", "key"), path)
        acceptance = dict(profile.acceptance.get(name, {}))  # measured first, the scenario may override
        overrides = _mapping(spec.get("acceptance") or {}, f"{path}.acceptance")
        for drafter, a in overrides.items():
            acceptance[drafter] = acceptance_from_dict(a, f"{path}.acceptance.{drafter}")
        out[name] = RequestClass(
            name,
            length_dist_from_dict(_required(spec, "prompt_tokens", path), f"{path}.prompt_tokens"),
            length_dist_from_dict(_required(spec, "output_tokens", path), f"{path}.output_tokens"),
            acceptance,
            str(spec.get("key") or name),
            # an acceptance the scenario sets for the lookup is a what-if the recorded tokens would overrule
            None if LOOKUP in overrides else profile.streams.get(name),
        )
    return out


def _workload(raw: object, classes: dict, base_dir: Path) -> Workload | ReplayWorkload:
    raw = _mapping(raw, "workload")
    if "replay" in raw:
        _only(raw, ("replay", "time_scale", "concurrency"), "workload")
        scale = _num(raw.get("time_scale", 1.0), "workload.time_scale")
        limit = raw.get("concurrency")
        if limit is not None:
            _num(limit, "workload.concurrency", integer=True)
        if isinstance(raw["replay"], (list, tuple)):  # rows already in memory
            for i, row in enumerate(raw["replay"]):
                _mapping(row, f"workload.replay[{i}]")
            rows, where = raw["replay"], "workload.replay"
        else:
            trace = Path(str(raw["replay"]))
            trace = trace if trace.is_absolute() else base_dir / trace
            if not trace.is_file():
                raise ValueError(f"workload.replay: trace file {str(trace)!r} does not exist")
            try:
                rows, where = read_trace_jsonl(trace), f"workload.replay: trace file {str(trace)!r}"
            except (OSError, UnicodeDecodeError) as err:
                raise ValueError(f"workload.replay: trace file {str(trace)!r} cannot be read ({err})") from None
        if not rows:  # nothing to simulate: every latency, every SLO check would be empty
            raise ValueError(f"{where} has no requests")
        try:
            return replace(ReplayWorkload.from_rows(rows, classes, scale), concurrency=limit)
        except ValueError as err:
            raise ValueError(f"workload.replay: {err}") from None
    _only(raw, ("arrival", "mix", "duration_s", "shifts", "max_requests"), "workload")
    arrival_raw = _mapping(_required(raw, "arrival", "workload"), "workload.arrival")
    rate = _num(_required(arrival_raw, "rate", "workload.arrival"), "workload.arrival.rate")
    arrival = arrival_process_from_dict(arrival_raw, "workload.arrival")
    mix = _mix(_required(raw, "mix", "workload"), classes, "workload.mix")
    duration = _num(_required(raw, "duration_s", "workload"), "workload.duration_s")
    shifts, last = [], 0.0
    for i, s in enumerate(raw.get("shifts") or []):
        path = f"workload.shifts[{i}]"
        s = _mapping(s, path)
        _only(s, ("at_s", "rate", "mix"), path)
        at = _num(_required(s, "at_s", path), f"{path}.at_s")
        if at <= last:
            raise ValueError(f"{path}.at_s must be after the previous shift ({last}), got {at!r}")
        last = at
        shifts.append(Shift(
            float(at),
            float(_num(s["rate"], f"{path}.rate")) if s.get("rate") is not None else None,
            _mix(s["mix"], classes, f"{path}.mix") if s.get("mix") is not None else None,
        ))
    cap = raw.get("max_requests")
    if cap is not None:
        _num(cap, "workload.max_requests", integer=True)
    return Workload(arrival, float(rate), mix, float(duration), tuple(shifts), cap)


def scenario_from_dict(raw: object, base_dir: str | Path = ".", name: str = "scenario") -> Scenario:
    """Validate a parsed scenario; relative paths resolve against ``base_dir``."""
    raw = _mapping(raw, "scenario")
    _only(raw, ("name", "seed", "profile", "classes", "workload", "replicas", "policy", "policy_scope",
                "slo", "metrics", "drain_s", "compare", "capacity", "speed", "prefill_speed", "overhead"), "")
    base_dir = Path(base_dir)
    profile_raw = _required(raw, "profile", "")
    if isinstance(profile_raw, Profile):
        profile = profile_raw
    elif isinstance(profile_raw, dict):
        profile = profile_from_dict(profile_raw, "profile")
    else:
        path = Path(str(profile_raw))
        path = path if path.is_absolute() else base_dir / path
        if not path.is_file():
            raise ValueError(f"profile: file {str(path)!r} {'is a folder' if path.is_dir() else 'does not exist'}")
        profile = load_profile(path)
    classes = _classes(_required(raw, "classes", ""), profile)
    workload = _workload(_required(raw, "workload", ""), classes, base_dir)

    rep = _mapping(raw.get("replicas") or {}, "replicas")
    _only(rep, ReplicaConfig.__dataclass_fields__, "replicas")
    replicas = ReplicaConfig(
        int(_num(rep.get("count", 1), "replicas.count", integer=True)),
        _choice(rep.get("mode", "serial"), MODES, "replicas.mode"),
        int(_num(rep.get("max_batch", 8), "replicas.max_batch", integer=True)),
        _choice(rep.get("router", "least_loaded"), ROUTERS, "replicas.router"),
        _flag(rep.get("draft_cap", True), "replicas.draft_cap"),
        None if rep.get("prefill_chunk") is None else
        int(_num(rep["prefill_chunk"], "replicas.prefill_chunk", integer=True)),
        _slowdown(rep["plain_slowdown"]) if "plain_slowdown" in rep else BatchDraftCap.plain_slowdown,
        _flag(rep.get("prefill_rides", True), "replicas.prefill_rides"),
        _choice(rep.get("batch_objective", BatchDraftCap.objective), OBJECTIVES, "replicas.batch_objective"),
        _cap_steps(rep.get("cap_steps", [])),
        _choice(rep.get("batch_cut", BatchDraftCap.cut), CUTS, "replicas.batch_cut"),
    )
    if replicas.prefill_chunk is not None and replicas.mode != "batching":  # would do nothing, silently
        raise ValueError(f"replicas.prefill_chunk applies to mode batching only, got mode {replicas.mode!r}")
    for key in BATCHING_ONLY[1:]:  # prefill_chunk above: None is its default, not a setting
        if key in rep and replicas.mode != "batching":  # (not `name`: that is the scenario's default name)
            raise ValueError(f"replicas.{key} applies to mode batching only, got mode {replicas.mode!r}")
    slo_raw = _mapping(raw.get("slo") or {}, "slo")
    _only(slo_raw, SLO.__dataclass_fields__, "slo")
    slo = SLO(**{k: (float(_num(v, f"slo.{k}")) if v is not None else None) for k, v in slo_raw.items()})
    if not 0 < slo.percentile < 100:
        raise ValueError(f"slo.percentile must be in (0, 100), got {slo.percentile!r}")
    met = _mapping(raw.get("metrics") or {}, "metrics")
    _only(met, MetricsConfig.__dataclass_fields__, "metrics")
    metrics = MetricsConfig(float(_num(met.get("bin_s", 60.0), "metrics.bin_s")),
                            float(_num(met.get("warmup_s", 0.0), "metrics.warmup_s", strict=False)))
    if 0 < metrics.warmup_s >= workload.duration_s:  # every latency, every SLO check would be empty
        raise ValueError(f"metrics.warmup_s must be below the last arrival (workload.duration_s "
                         f"{workload.duration_s:g}): no request would be measured, got {metrics.warmup_s!r}")
    drain = raw.get("drain_s")
    if drain is not None and getattr(workload, "concurrency", None):
        raise ValueError(f"drain_s={drain!r}: a replay with a client concurrency limit runs until every request is "
                         "done (requests wait for a slot past the last arrival; a horizon would drop them unsent)")
    compare = _mapping(raw.get("compare") or {}, "compare")
    _only(compare, ("policies",), "compare")
    specs = compare.get("policies") or []
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        raise ValueError(f"compare.policies must be a list of policy specs, got {specs!r}")
    cap = _mapping(raw.get("capacity") or {}, "capacity")
    _only(cap, ("max_replicas",), "capacity")
    scenario = Scenario(
        name=str(raw.get("name") or name),
        profile=profile,
        classes=classes,
        workload=workload,
        seed=int(_num(raw.get("seed", 0), "seed", 0, strict=False, integer=True)),
        replicas=replicas,
        policy=str(raw.get("policy", "none")),
        policy_scope=_choice(raw.get("policy_scope", "replica"), SCOPES, "policy_scope"),
        slo=slo,
        metrics=metrics,
        drain_s=float(_num(drain, "drain_s", strict=False)) if drain is not None else None,
        compare_policies=tuple(specs),
        max_replicas=int(_num(cap.get("max_replicas", 64), "capacity.max_replicas", integer=True)),
        speed=_speed(raw.get("speed") or []),
        prefill_speed=(float(_num(raw["prefill_speed"], "prefill_speed", strict=True))
                       if raw.get("prefill_speed") is not None else None),
        overhead=_overhead(raw.get("overhead") or {}),
    )
    from simulator.policy_factory import policy_builder  # validate policy specs now, not mid-run

    policy_builder(scenario.policy, scenario.drafters, "policy")
    for i, spec in enumerate(specs):
        policy_builder(spec, scenario.drafters, f"compare.policies[{i}]")
    return scenario


# the scenarios shipped with the package (installed with it), named by their file's stem
SHIPPED = Path(__file__).parent / "scenarios"


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SHIPPED.glob("*.yaml"))


def load_scenario(path: str | Path) -> Scenario:
    """Read a YAML (.yaml / .yml) or JSON scenario file and validate it; a bare name that is no file
    here (``smollm2_cpu_shift``) is one of the shipped scenarios, wherever the command runs."""
    path = Path(path)
    if not path.exists() and path.parent == Path("."):
        shipped = SHIPPED / (path.name if path.suffix else f"{path.name}.yaml")
        if shipped.is_file():
            path = shipped
    if not path.is_file():
        raise ValueError(f"scenario file {str(path)!r} {'is a folder' if path.is_dir() else 'does not exist'} "
                         f"(shipped scenarios, by name: "
                         f"{', '.join(shipped_scenarios())})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"scenario file {str(path)!r} cannot be read ({err})") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({err})") from None
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    return scenario_from_dict(raw, path.parent, path.stem)
