"""Building policies from a spec string, one per traffic key, and per-request overrides.

Specs (the ``--policy`` flag of the CLI, a service's configuration)::

    static:<drafter>:<k>     always that drafter and k   (static:none:0 is plain decoding)
    heuristic:<drafter>      transformers' +2/-1 schedule over one drafter
    adaptive                 the default: goodput-optimal drafter and k, never slower than plain

Drafter names may contain colons (``model:/models/small``): ``static`` takes the last field as
``k``, ``heuristic`` the whole rest as the drafter.

A long-running service keeps one policy per *traffic key* (model + route, or a key the caller
gives), so what it learned from one request carries over to the next request of the same kind,
while traffic of another kind learns its own acceptance. ``PolicyRegistry`` hands them out; a
request can still force plain decoding or a drafter and k with ``PolicyRegistry.for_request``.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.heuristic import HeuristicPolicy
from policies.outcome import PLAIN, Action, StepOutcome
from policies.static import StaticPolicy
from policies.validation import check_int

SPEC_FORMS = "'static:<drafter>:<k>', 'heuristic:<drafter>' or 'adaptive'"


def _check_drafter(spec: str, drafter: str, drafters: Sequence[str]) -> None:
    if not drafter:
        raise ValueError(f"spec must name a drafter, one of {SPEC_FORMS}, got spec={spec!r}")
    if drafters and drafter != PLAIN and drafter not in drafters:
        raise ValueError(f"spec names drafter {drafter!r}, which is not among drafters={list(drafters)}, "
                         f"got spec={spec!r}")


def make_policy(spec: str, drafters: Sequence[str] = (), seed: int = 0, key: str = "", **kwargs: Any):
    """A policy from ``spec``; ``kwargs`` go to its constructor (adaptive: ``AdaptiveConfig`` fields).

    ``drafters`` lists the drafters the engine has loaded; a spec naming another one is an error.

    >>> make_policy("static:ngram:4", ["ngram"]).decide()
    Action(drafter='ngram', k=4)
    >>> make_policy("heuristic:model:/m/small", ["model:/m/small"], start_k=2).decide()
    Action(drafter='model:/m/small', k=2)
    """
    if not isinstance(spec, str):
        raise ValueError(f"spec must be a string, one of {SPEC_FORMS}, got spec={spec!r}")
    kind, _, rest = spec.strip().partition(":")
    if kind == "static":
        drafter, sep, k_text = rest.rpartition(":")
        if not sep:
            raise ValueError(f"a static spec must be 'static:<drafter>:<k>', got spec={spec!r}")
        _check_drafter(spec, drafter, drafters)
        try:
            k = int(k_text)
        except ValueError:
            raise ValueError(f"k in a static spec must be an integer >= 0, got k={k_text!r} in spec={spec!r}") from None
        if kwargs:
            raise ValueError(f"a static policy takes no parameters, got {sorted(kwargs)} for spec={spec!r}")
        return StaticPolicy(drafter, k)
    if kind == "heuristic":
        _check_drafter(spec, rest, drafters)
        unknown = set(kwargs) - {"start_k", "max_k"}
        if unknown:
            raise ValueError(f"unknown heuristic policy parameter(s) {sorted(unknown)}; known: max_k, start_k")
        return HeuristicPolicy(rest, **kwargs)
    if kind == "adaptive" and not rest:
        return AdaptivePolicy(drafters, AdaptiveConfig.from_kwargs(**kwargs), seed=seed, key=key)
    raise ValueError(f"spec must be one of {SPEC_FORMS}, got spec={spec!r}")


class OverridePolicy:
    """A request-level override around a shared policy: the action is forced, learning goes on.

    Outcomes are passed to the wrapped policy, so a request forced to plain decoding still
    refreshes the key's plain-speed estimate, and one forced to a drafter teaches its acceptance.
    """

    def __init__(self, inner, action: Action) -> None:
        self.inner = inner
        self.action = action
        self.name = f"override:{inner.name}"

    def decide(self) -> Action:
        return self.action

    def observe(self, outcome: StepOutcome) -> None:
        self.inner.observe(outcome)

    def drain_events(self) -> list:
        return self.inner.drain_events() if hasattr(self.inner, "drain_events") else []

    def warm_start(self, outcomes) -> bool:
        """The wrapped controller takes the engine's step costs (costs only: safe under a forced action)."""
        warm_start = getattr(self.inner, "warm_start", None)
        return warm_start(outcomes) if warm_start is not None else False


class PolicyRegistry:
    """One policy per traffic key, built from one spec; the least recently used key is dropped
    beyond ``max_keys`` (bounded memory for services with unbounded keys).

    Each key's policy gets ``seed + crc32(key)`` (stable across processes, unlike ``hash``), so a
    key's behaviour is reproducible. Thread-safe for handing out policies; the policies themselves
    expect one step at a time.
    """

    def __init__(self, spec: str = "adaptive", drafters: Sequence[str] = (), seed: int = 0,
                 max_keys: int = 1024, **kwargs: Any) -> None:
        check_int("seed", seed, 0)
        check_int("max_keys", max_keys, 1)
        self.spec, self.drafters, self.seed, self.max_keys, self.kwargs = spec, list(drafters), seed, max_keys, kwargs
        make_policy(spec, self.drafters, seed, **kwargs)  # a bad spec fails here, not on the first request
        self._policies: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str = ""):
        """The policy of ``key``, created on first use."""
        with self._lock:
            policy = self._policies.get(key)
            if policy is None:
                key_seed = (self.seed + zlib.crc32(key.encode())) % 2**31
                policy = make_policy(self.spec, self.drafters, key_seed, key=key, **self.kwargs)
                self._policies[key] = policy
                if len(self._policies) > self.max_keys:
                    self._policies.popitem(last=False)
            else:
                self._policies.move_to_end(key)
            return policy

    def for_request(self, key: str = "", *, force_plain: bool = False, drafter: str | None = None,
                    k: int | None = None):
        """The policy for one request: the key's own, or an ``OverridePolicy`` around it.

        ``force_plain=True`` forces plain decoding; ``drafter`` forces that drafter, with ``k`` or,
        when ``k`` is None, the key's policy's choice of ``k`` for it (adaptive policies only).
        """
        policy = self.get(key)
        if force_plain:
            if drafter is not None or k is not None:
                raise ValueError(f"force_plain excludes drafter and k, got drafter={drafter!r}, k={k!r}")
            return OverridePolicy(policy, Action(PLAIN, 0))
        if drafter is None:
            if k is not None:
                raise ValueError(f"k can only be forced together with a drafter, got drafter=None, k={k!r}")
            return policy
        _check_drafter(f"drafter={drafter}", drafter, self.drafters)
        if k is None:
            if not hasattr(policy, "k_for"):
                raise ValueError(f"k must be given to force drafter={drafter!r} on a {policy.name} policy, got k=None")
            k = policy.k_for(drafter)
        check_int("k", k, 0)
        return OverridePolicy(policy, Action(drafter, 0 if drafter == PLAIN else k))

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._policies)

    def __len__(self) -> int:
        return len(self._policies)

    def drain_events(self) -> list:
        """Every key's pending events (each event carries its key), oldest key first."""
        with self._lock:
            policies = list(self._policies.values())
        return [event for p in policies if hasattr(p, "drain_events") for event in p.drain_events()]
