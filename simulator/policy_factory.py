"""Turning a policy spec (``static:ngram:4``, ``heuristic:ngram``, ``adaptive+max_k=8``) into policy objects.

The simulator drives the *same* controller classes the engine does (``policies/``), so it never
defines policies itself: it asks ``policies.registry.make_policy(spec, drafters, seed, key=...)``
for one object per replica (or per replica and traffic key), with the one spec grammar of
``policies.registry.parse_spec``. ``none`` is the simulator's alias of ``plain`` (plain decoding).

A caller may also pass a callable ``seed -> Policy`` instead of a spec (tests do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from policies import PLAIN, Policy, StepOutcome
from policies.registry import make_policy

PolicyBuilder = Callable[[int], Policy]


def policy_builder(spec: str | PolicyBuilder, drafters: list[str], field: str = "policy") -> Callable[..., Policy]:
    """A ``(seed, key="") -> Policy`` callable for ``spec``, built once now so a bad spec fails early.

    ``drafters`` are the drafters the scenario can simulate (a draft cost in the profile and an
    acceptance profile for every class); ``field`` names the scenario field in errors.
    """
    if callable(spec):
        return lambda seed, key="": spec(seed)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{field} must be a policy spec such as 'static:ngram:4', got {spec!r}")
    text = "plain" if spec.strip() == "none" else spec.strip()

    def build(seed: int, key: str = "") -> Policy:
        return make_policy(text, list(drafters), seed, key=key)

    try:
        probe = build(0)
    except ValueError as err:
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
        self.shared = self.warm(build(seed)) if scope == "replica" else None
        self.by_key: dict[str, Policy] = {}

    def get(self, key: str) -> Policy:
        if self.shared is not None:
            return self.shared
        policy = self.by_key.get(key)
        if policy is None:
            policy = self.by_key[key] = self.warm(self.build(self.seed + len(self.by_key), key))
        return policy

    def warm(self, policy: Policy) -> Policy:
        """As the engine does for a cold controller: start from the step costs it already knows."""
        if self.warm_steps:
            policy.warm_start(self.warm_steps)
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
