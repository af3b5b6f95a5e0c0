"""Building policies from a spec string, one per traffic key, and per-request overrides.

Specs (the ``--policy`` flag of the CLI, ``bench --configs``, a scenario's ``policy``, a service's
configuration) have one grammar, parsed here by ``parse_spec``::

    plain                    plain decoding (the same as static:none:0)
    static:<drafter>:<k>     always that drafter and k
    heuristic:<drafter>      transformers' +2/-1 schedule over one drafter
    adaptive                 the default: goodput-optimal drafter and k, never slower than plain

each optionally followed by ``+<option>=<value>`` options::

    static:int8:8+early_stop=learned       the static policy with an early stop inside each draft
    heuristic:ngram+start_k=2+max_k=16     HeuristicPolicy's start_k, max_k
    adaptive+max_k=8+early_stop=threshold  AdaptiveConfig fields (guard and detector fields flat)

Values ``true``/``false`` are booleans, then integers, then floats, else strings. Drafter names
may contain colons (``model:/models/small``) but not ``+``, so options start at the first ``+``;
``static`` takes the last ``:`` field as ``k``, ``heuristic`` the whole rest as the drafter.
``adaptive:<option>=<value>+...`` (options after a colon, the form older ``bench`` runs were
named with) is an alias of ``adaptive+<option>=<value>+...``.

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
from dataclasses import dataclass, field
from typing import Any

from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.base import OverridePolicy
from policies.heuristic import HeuristicPolicy
from policies.outcome import PLAIN, Action
from policies.static import StaticPolicy
from policies.validation import check_int
from policies.with_early_stop import MODES, WithEarlyStop

SPEC_FORMS = ("'plain', 'static:<drafter>:<k>', 'heuristic:<drafter>' or 'adaptive', "
              "each optionally followed by '+<option>=<value>'")
HEURISTIC_OPTIONS = ("max_k", "start_k")


@dataclass(frozen=True)
class PolicySpec:
    """A parsed spec: what ``make_policy`` builds, before any drafter list is known."""

    kind: str  # "plain" | "static" | "heuristic" | "adaptive"
    drafter: str | None = None  # plain: "none"; static, heuristic: the drafter; adaptive: None (it chooses)
    k: int | None = None  # plain: 0; static: the draft length; heuristic, adaptive: None (they choose)
    options: dict[str, Any] = field(default_factory=dict)  # the "+key=value" suffixes, values typed


def parse_option(text: str, spec: str) -> tuple[str, Any]:
    """One ``key=value`` option of ``spec``, its value typed: bool, then int, then float, else str.

    >>> parse_option("max_k=8", "adaptive+max_k=8")
    ('max_k', 8)
    >>> parse_option("match_gate=False", "adaptive+match_gate=False")
    ('match_gate', False)
    >>> parse_option("match_lift_weight=1e12", "adaptive+match_lift_weight=1e12")
    ('match_lift_weight', 1000000000000.0)
    >>> parse_option("early_stop=learned", "static:int8:8+early_stop=learned")
    ('early_stop', 'learned')
    """
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier() or not value:
        raise ValueError(f"each option must be '<name>=<value>', got {text!r} in spec={spec!r}")
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, value


def parse_spec(spec: str) -> PolicySpec:
    """The ``PolicySpec`` of ``spec`` (grammar in the module docstring); ``ValueError`` naming
    ``spec`` when it is malformed. Only the form is checked here: which drafters exist and which
    option values are valid is ``make_policy``'s business.

    >>> parse_spec("plain") == parse_spec("static:none:0") == PolicySpec("plain", "none", 0)
    True
    >>> parse_spec("static:model:/models/small:4")
    PolicySpec(kind='static', drafter='model:/models/small', k=4, options={})
    >>> parse_spec("static:int8:8+early_stop=learned").options
    {'early_stop': 'learned'}
    >>> parse_spec("heuristic:ngram+start_k=2")
    PolicySpec(kind='heuristic', drafter='ngram', k=None, options={'start_k': 2})
    >>> parse_spec("adaptive+max_k=8+early_stop=threshold")
    PolicySpec(kind='adaptive', drafter=None, k=None, options={'max_k': 8, 'early_stop': 'threshold'})
    >>> parse_spec("adaptive:early_stop=threshold+max_k=8") == parse_spec("adaptive+early_stop=threshold+max_k=8")
    True
    >>> parse_spec("static:ngram")
    Traceback (most recent call last):
    ...
    ValueError: a static spec must be 'static:<drafter>:<k>', got spec='static:ngram'
    """
    if not isinstance(spec, str):
        raise ValueError(f"spec must be a string, one of {SPEC_FORMS}, got spec={spec!r}")
    body, has_options, options_text = spec.strip().partition("+")
    kind, has_rest, rest = body.partition(":")
    if kind == "adaptive" and "=" in rest:  # the alias adaptive:<option>=<value>+...
        options_text, has_options, rest, has_rest = rest + has_options + options_text, "+", "", ""
    options: dict[str, Any] = {}
    for text in options_text.split("+") if has_options else ():
        key, value = parse_option(text, spec)
        if key in options:
            raise ValueError(f"option {key!r} is given twice, got spec={spec!r}")
        options[key] = value
    if kind == "plain" and not has_rest:
        return PolicySpec("plain", PLAIN, 0, options)
    if kind == "adaptive" and not has_rest:
        return PolicySpec("adaptive", None, None, options)
    if kind == "heuristic" and has_rest:
        if not rest:
            raise ValueError(f"a heuristic spec must name a drafter, 'heuristic:<drafter>', got spec={spec!r}")
        return PolicySpec("heuristic", rest, None, options)
    if kind == "static" and has_rest:
        drafter, sep, k_text = rest.rpartition(":")
        if not sep or not drafter:
            raise ValueError(f"a static spec must be 'static:<drafter>:<k>', got spec={spec!r}")
        if not (k_text.isascii() and k_text.isdigit()):  # str.isdigit alone takes '²', which int() refuses
            raise ValueError(f"k in a static spec must be an integer >= 0, got k={k_text!r} in spec={spec!r}")
        if drafter == PLAIN:
            return PolicySpec("plain", PLAIN, 0, options)
        return PolicySpec("static", drafter, int(k_text), options)
    raise ValueError(f"spec must be one of {SPEC_FORMS}, got spec={spec!r}")


def _check_drafter(spec: str, drafter: str, drafters: Sequence[str]) -> None:
    if not drafter:
        raise ValueError(f"spec must name a drafter, one of {SPEC_FORMS}, got spec={spec!r}")
    if drafters and drafter != PLAIN and drafter not in drafters:
        raise ValueError(f"spec names drafter {drafter!r}, which is not among drafters={list(drafters)}, "
                         f"got spec={spec!r}")


def make_policy(spec: str, drafters: Sequence[str] = (), seed: int = 0, key: str = "", **kwargs: Any):
    """A policy from ``spec``; its options and ``kwargs`` (the same names; a name in both must
    have one value) go to its constructor: ``early_stop=learned|threshold`` for static (it wraps
    the static policy in ``WithEarlyStop``), ``start_k``, ``max_k`` for heuristic, ``AdaptiveConfig``
    fields for adaptive. ``plain`` takes none.

    ``drafters`` lists the drafters the engine has loaded; a spec naming another one is an error.
    ``adaptive`` chooses among all of them.

    >>> make_policy("static:ngram:4", ["ngram"]).decide()
    Action(drafter='ngram', k=4)
    >>> make_policy("heuristic:model:/m/small", ["model:/m/small"], start_k=2).decide()
    Action(drafter='model:/m/small', k=2)
    >>> make_policy("static:int8:8+early_stop=threshold", ["int8"]).name
    'static+early_stop=threshold'
    >>> make_policy("adaptive+max_k=8", ["ngram", "int8"]).config.max_k
    8
    """
    parsed = parse_spec(spec)
    options = dict(parsed.options)
    for name, value in kwargs.items():
        if name in options and options[name] != value:
            raise ValueError(f"{name} is given both in the spec and as a parameter ({name}={value!r}), "
                             f"got spec={spec!r}")
        options[name] = value
    try:
        if parsed.kind == "plain":
            if options:
                raise ValueError(f"plain decoding takes no parameters, got {sorted(options)}")
            return StaticPolicy(PLAIN, 0)
        if parsed.kind != "adaptive":
            _check_drafter(spec, parsed.drafter, drafters)
        if parsed.kind == "static":
            mode = options.pop("early_stop", None)
            if options:
                raise ValueError(f"a static policy takes no parameters but early_stop={'|'.join(MODES)}, "
                                 f"got {sorted(options)}")
            static = StaticPolicy(parsed.drafter, parsed.k)
            return static if mode is None else WithEarlyStop(static, mode, seed=seed)
        if parsed.kind == "heuristic":
            unknown = set(options) - set(HEURISTIC_OPTIONS)
            if unknown:
                raise ValueError(f"unknown heuristic policy parameter(s) {sorted(unknown)}; "
                                 f"known: {', '.join(HEURISTIC_OPTIONS)}")
            return HeuristicPolicy(parsed.drafter, **options)
        nested = sorted({"guard", "detector"} & set(parsed.options))  # config objects: not writable in a spec
        if nested:
            raise ValueError(f"{' and '.join(nested)} options are set field by field (e.g. +backoff_max=64), "
                             f"got {nested}")
        return AdaptivePolicy(drafters, AdaptiveConfig.from_kwargs(**options), seed=seed, key=key)
    except ValueError as err:
        if f"spec={spec!r}" in str(err):
            raise
        raise ValueError(f"{err}, in spec={spec!r}") from None


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
            k = policy.k_for(drafter)
            if k is None:
                raise ValueError(f"k must be given to force drafter={drafter!r} on a {policy.name} policy, got k=None")
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
        return [event for p in policies for event in p.drain_events()]
