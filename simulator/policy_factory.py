"""Turning a policy spec (``static:ngram:4``, ``heuristic:ngram``, ``adaptive``) into policy objects.

The simulator drives the *same* controller classes the engine does (``policies/``), so it never
defines policies itself. It asks ``make_policy(spec, drafters, seed, key=...)`` for one object per
replica (or per replica and traffic key). That factory is looked up when needed - on the
``policies`` package, else in ``policies.registry`` - not imported at module load, because
``policies/`` grows independently: without it, only ``static:<drafter>:<k>`` specs are built here
from ``StaticPolicy`` and any other spec is rejected with an error that says why. ``none`` and
``plain`` always mean ``static:none:0`` (plain decoding).

A caller may also pass a callable ``seed -> Policy`` instead of a spec (tests do).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import policies
from policies import PLAIN, Policy, StaticPolicy, StepOutcome

PolicyBuilder = Callable[[int], Policy]


def parse_static_spec(spec: str) -> StaticPolicy | None:
    """``none`` / ``plain`` / ``static:none`` / ``static:<drafter>:<k>`` -> StaticPolicy; else None."""
    parts = spec.strip().split(":")
    if parts[0] in ("none", "plain") and len(parts) == 1:
        return StaticPolicy(PLAIN, 0)
    if parts[0] != "static":
        return None
    if len(parts) == 2 and parts[1] == PLAIN:
        return StaticPolicy(PLAIN, 0)
    drafter, _, k = spec.strip()[len("static:"):].rpartition(":")
    if not drafter or not k.isdigit():
        raise ValueError(f"policy={spec!r}: a static spec is 'static:<drafter>:<k>' with integer k >= 0")
    return StaticPolicy(drafter, int(k))


def find_make_policy() -> Callable | None:
    """``make_policy(spec, drafters, seed, key=...)`` from ``policies``, if this checkout has one."""
    make = getattr(policies, "make_policy", None)
    if make is None:
        try:
            make = getattr(importlib.import_module("policies.registry"), "make_policy", None)
        except ImportError:
            make = None
    return make


def policy_builder(spec: str | PolicyBuilder, drafters: list[str], field: str = "policy") -> Callable[..., Policy]:
    """A ``(seed, key="") -> Policy`` callable for ``spec``, built once now so a bad spec fails early.

    ``drafters`` are the drafters the scenario can simulate (a draft cost in the profile and an
    acceptance profile for every class); ``field`` names the scenario field in errors.
    """
    if callable(spec):
        return lambda seed, key="": spec(seed)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{field} must be a policy spec such as 'static:ngram:4', got {spec!r}")
    make = find_make_policy()
    if spec.strip() in ("none", "plain"):
        def build(seed: int, key: str = "") -> Policy:
            return StaticPolicy(PLAIN, 0)
    elif make is not None:
        def build(seed: int, key: str = "") -> Policy:
            return make(spec, list(drafters), seed, key=key)
    else:
        try:
            static = parse_static_spec(spec)
        except ValueError as err:
            raise ValueError(f"{field}: {err}") from None
        if static is None:
            raise ValueError(
                f"{field}={spec!r} is unknown: policies.make_policy does not exist in this checkout yet, so only "
                "'none' and 'static:<drafter>:<k>' specs can be simulated"
            )

        def build(seed: int, key: str = "") -> Policy:
            return parse_static_spec(spec)
    try:
        probe = build(0)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{field}={spec!r} was rejected by the policy factory: {err}") from None
    action = probe.decide()
    if not action.is_plain and action.drafter not in drafters:
        raise ValueError(
            f"{field}={spec!r} uses drafter {action.drafter!r}, which the scenario cannot simulate "
            f"(drafters with a draft cost and an acceptance profile for every class: {sorted(drafters)})"
        )
    return build


class PolicyPool:
    """The policy objects of one replica: one for the replica, or one per traffic key.

    ``scope="replica"`` mirrors one engine process with one controller; ``scope="key"`` mirrors an
    engine that keeps controller state per traffic key (model + route), so a shift in one class
    does not disturb the state learned on another.
    """

    def __init__(self, build: Callable[..., Policy], scope: str, seed: int,
                 warm_steps: Sequence[StepOutcome] = ()) -> None:
        self.build, self.scope, self.seed = build, scope, seed
        self.warm_steps = list(warm_steps)
        self.shared = self._warm(build(seed)) if scope == "replica" else None
        self.by_key: dict[str, Policy] = {}

    def get(self, key: str) -> Policy:
        if self.shared is not None:
            return self.shared
        policy = self.by_key.get(key)
        if policy is None:
            policy = self.by_key[key] = self._warm(self.build(self.seed + len(self.by_key), key))
        return policy

    def _warm(self, policy: Policy) -> Policy:
        """As the engine does for a cold controller: start from the step costs it already knows."""
        warm_start = getattr(policy, "warm_start", None)
        if warm_start is not None and self.warm_steps:
            warm_start(self.warm_steps)
        return policy


def engine_cost_steps(cost, drafters: Sequence[str], context_len: int = 64,
                      lengths: Sequence[int] = (1, 2, 4, 8, 16), repeats: int = 4) -> list[StepOutcome]:
    """Steps priced by ``cost`` like those an engine that has served a while remembers
    (``adaptive_spec/cost_memory.py``): plain steps, verifies of each of ``lengths`` draft tokens,
    and each drafter's drafts, ``repeats`` of each. Acceptance in them is irrelevant (only their
    costs are used) and set to none."""
    plain_s = cost.verify_s(1, context_len)
    steps = [StepOutcome(PLAIN, 0, 0, 0, 1, 0.0, plain_s, context_len)] * repeats
    for drafter in drafters:
        if drafter == PLAIN:
            continue
        for n in lengths:
            step = StepOutcome(drafter, n, n, 0, 1, cost.draft_s(drafter, n), cost.verify_s(n + 1, context_len),
                               context_len)
            steps += [step] * repeats
    return steps
