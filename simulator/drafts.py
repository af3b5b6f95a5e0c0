"""Simulated drafts: how many tokens a drafter proposes and the verifier accepts.

The engine drafts with a model or a lookup and verifies with the target; the simulator draws both
at random from each request class's measured acceptance profile (``simulator/acceptance.py``), or,
for prompt lookup on a class with a recorded token stream (a profile's ``streams``), runs the
lookup itself on those tokens. Everything around the draft - the policy's decision, the budget
cap, the match gate's cut, what the policy learns - is the step protocol of ``policies.session``,
which replicas drive exactly as the engine does. ``ProfileDrafts`` is the draft source; a test can
pass its own object with the same ``gated`` and ``draw`` methods (a scripted stream) to a replica
instead (``tokens`` and ``shadows`` are optional).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple

from policies.lookup import DRAFTER as LOOKUP
from policies.lookup import PromptLookup
from policies.session import DecodeSession, StepPlan
from policies.shadow import ShadowDrafts
from simulator.entities import Request, RequestClass


class Draft(NamedTuple):
    """One simulated draft, after the gate's cut."""

    proposed: int  # draft tokens verified
    accepted: int  # of which accepted
    match_order: int | None = None  # the kind of match a gated lookup found (None: none)
    ambiguous: bool = False
    first_token_right: bool = False  # for a draft the gate cut to nothing: was its first token right?
    looked_up: int = 0  # tokens the drafter produced before the cut (what its cost is charged for)


PLAIN_DRAFT = Draft(0, 0)


class AcceptanceTable:
    """(class, drafter) -> (padded per-position probabilities, hit_rate), cached for the step loop."""

    def __init__(self, classes: dict[str, RequestClass], pad_to: int = 64) -> None:
        self.classes, self.pad_to = classes, pad_to
        self.cache: dict[tuple[str, str], tuple[tuple[float, ...], float]] = {}
        self.match_cache: dict[tuple[str, str], tuple] = {}
        self.kinds_cache: dict[str, dict[str, tuple]] = {}

    def get(self, klass: str, drafter: str, k: int) -> tuple[tuple[float, ...], float]:
        entry = self.cache.get((klass, drafter))
        if entry is None or len(entry[0]) < k:
            profile = self.classes[klass].acceptance.get(drafter)
            if profile is None:
                raise ValueError(
                    f"class {klass!r} has no acceptance profile for drafter {drafter!r}, which the policy "
                    f"chose (known: {sorted(self.classes[klass].acceptance)})"
                )
            entry = self.cache[(klass, drafter)] = (profile.padded(max(k, self.pad_to)), profile.hit_rate)
        return entry

    def match_kinds(self, klass: str) -> dict[str, tuple]:
        """Drafter -> ``matches(klass, drafter)`` for the class's drafters that have match kinds."""
        entry = self.kinds_cache.get(klass)
        if entry is None:
            entry = self.kinds_cache[klass] = {
                d: self.matches(klass, d) for d, p in self.classes[klass].acceptance.items() if p.matches}
        return entry

    def matches(self, klass: str, drafter: str) -> tuple:
        """``((cumulative share, order, ambiguous, padded per-position), ...)``; empty without kinds."""
        entry = self.match_cache.get((klass, drafter))
        if entry is None:
            profile = self.classes[klass].acceptance.get(drafter)
            kinds, total = [], 0.0
            for kind in (profile.matches if profile is not None else ()):
                total += kind.share
                padded = kind.per_position + (kind.per_position[-1],) * max(self.pad_to - len(kind.per_position), 0)
                kinds.append((total, kind.order, kind.ambiguous, padded))
            entry = self.match_cache[(klass, drafter)] = tuple(kinds)
        return entry


class ProfileDrafts:
    """Drafts drawn from the classes' acceptance profiles with ``rand`` (uniform in [0, 1)).

    A drafter with match kinds in the class's profile is a lookup the policy's gate may cut: the
    kind of match is drawn first (or none: a miss), the gate keeps a prefix, then acceptance is
    drawn per position for that kind. Otherwise the drafter proposes ``k`` tokens with the
    profile's hit rate and each is accepted with the per-position probability.

    Where the class has a recorded token stream (its prompt and greedy answer: a profile's
    ``streams``) that covers the request, nothing about prompt lookup is drawn: the lookup runs on
    the tokens so far, as the engine's does, the gate cuts what it found, and the draft's accepted
    prefix is what matches the answer; shadow drafts are the engine's own (``policies.shadow``).
    A profile's per-position rates average over where in an answer the drafts fell, and with the
    controller choosing when and how long to draft, where they fall is what decides a request.
    """

    def __init__(self, classes: dict[str, RequestClass], rand: Callable[[], float]) -> None:
        self.table, self.rand = AcceptanceTable(classes), rand
        # classes whose lookups run on their recorded tokens: the lookup must be one of their drafters,
        # with match kinds (what calibrate writes), so that a request the stream does not cover is
        # drawn through the same gate
        self.streams = {name: c.stream for name, c in classes.items()
                        if c.stream is not None and LOOKUP in c.acceptance and c.acceptance[LOOKUP].matches}
        self.lookup = PromptLookup()

    def gated(self, klass: str) -> Collection[str]:
        """Drafters of ``klass`` whose drafts go through the policy's match gate (those with match kinds)."""
        return self.table.match_kinds(klass).keys()

    def tokens(self, request: Request, ahead: int = 0) -> list[int] | tuple[()]:
        """The request's token ids so far (and ``ahead`` more) where its class's stream covers the
        whole request; else ``()``: drafts are drawn."""
        stream = self.streams.get(request.klass)
        if stream is None or request.output_tokens > len(stream.output):
            return ()
        return [*stream.prompt, *stream.output[:request.generated + ahead]]

    def shadows(self, klass: str, policy, request: Request | None = None) -> ShadowDraws | BothShadows:
        """The shadow drafts of one request of ``klass`` (its lookups, as the engine runs them): the
        prompt lookup's run on the recorded tokens where they cover the request, the others drawn."""
        drawn = self.table.match_kinds(klass).keys()
        if request is not None and self.tokens(request):
            others = [d for d in drawn if d != LOOKUP]
            return BothShadows(ShadowDrafts([self.lookup], policy),
                               ShadowDraws(self.table, self.rand, klass, policy, others) if others else None)
        return ShadowDraws(self.table, self.rand, klass, policy, drawn)

    def draw(self, klass: str, session: DecodeSession, plan: StepPlan, context=()) -> Draft:
        """The step's draft; ``context``: the request's tokens so far (``tokens``), or ``()``."""
        if plan.k == 0:
            return PLAIN_DRAFT
        if context and plan.drafter == LOOKUP:
            return self._looked_up(self.streams[klass].output, session, plan, context)
        rand = self.rand
        kinds = self.table.match_kinds(klass).get(plan.drafter) if plan.gate is not None else None
        if kinds is not None:
            match = _match_kind(kinds, rand())
            if match is None:
                return PLAIN_DRAFT  # no match: the lookup ran, found nothing, a plain-cost step
            order, ambiguous, probs = match
            keep = session.cut(plan, plan.k, order, ambiguous)
            if keep == 0:  # cut: decoding still tells the gate whether its first token was right
                return Draft(0, 0, order, ambiguous, rand() < probs[0], plan.k)
            return Draft(keep, _accepted(probs, keep, rand), order, ambiguous, False, plan.k)
        probs, hit_rate = self.table.get(klass, plan.drafter, plan.k)
        proposed = plan.k if hit_rate >= 1.0 or rand() < hit_rate else 0
        return Draft(proposed, _accepted(probs, proposed, rand), None, False, False, proposed)

    def _looked_up(self, answer: tuple[int, ...], session: DecodeSession, plan: StepPlan, context: list[int]) -> Draft:
        """The engine's step on the recorded answer: look up, let the gate cut, accept the prefix
        that matches what greedy decoding produces next."""
        tokens, order, ambiguous = self.lookup.lookup(context, plan.k)
        if not tokens:
            return PLAIN_DRAFT  # no match: the lookup ran, found nothing, a plain-cost step
        # a draft may run past the answer's end (the budget is the request's, not its length)
        following = answer[plan.generated:plan.generated + len(tokens)]
        keep = session.cut(plan, len(tokens), order, ambiguous)
        if keep == 0:
            return Draft(0, 0, order, ambiguous, tokens[0] == following[0], plan.k)
        accepted, known = 0, min(keep, len(following))
        while accepted < known and tokens[accepted] == following[accepted]:
            accepted += 1
        return Draft(keep, accepted, order, ambiguous, False, plan.k)


def _match_kind(kinds: tuple, u: float) -> tuple | None:
    """``(order, ambiguous, per-position)`` of the match kind ``u`` (uniform) falls in; None: no match."""
    for cumulative, order, ambiguous, probs in kinds:
        if u < cumulative:
            return order, ambiguous, probs
    return None


def _accepted(probs, n: int, rand: Callable[[], float]) -> int:
    """Draft tokens accepted of ``n``: each position in turn, until the first rejection."""
    accepted = 0
    while accepted < n and rand() < probs[accepted]:
        accepted += 1
    return accepted


class BothShadows:
    """Shadow drafts run on recorded tokens (``policies.shadow.ShadowDrafts``) beside drawn ones."""

    __slots__ = ("run", "drawn")

    def __init__(self, run: ShadowDrafts, drawn: ShadowDraws | None) -> None:
        self.run, self.drawn = run, drawn

    def propose(self, context) -> None:
        self.run.propose(context)
        if self.drawn is not None:
            self.drawn.propose(context)

    def resolve(self, context, verified_drafter) -> None:
        self.run.resolve(context, verified_drafter)


class ShadowDraws:
    """Shadow drafts, simulated: while a request decodes plainly the engine still runs its lookups
    (they cost nothing) and, as plain decoding produces the next tokens, tells the policy how many
    of theirs would have been accepted (``policies/shadow.py``); the adaptive controller turns
    speculation back on from that evidence, without a probe. Here each plain step's shadow outcome
    is drawn at once from the class's match kinds, as a gated draft is: a miss, or a kind of match
    and its per-position acceptance. ``DecodeSession`` calls ``propose`` on plain steps."""

    __slots__ = ("table", "rand", "klass", "policy", "k", "drafters")

    def __init__(self, table: AcceptanceTable, rand: Callable[[], float], klass: str, policy,
                 drafters: Collection[str]) -> None:
        self.table, self.rand, self.klass, self.policy = table, rand, klass, policy
        self.k = policy.shadow_k
        self.drafters = list(drafters) if self.k > 0 else []

    def propose(self, context=None) -> None:
        rand, k = self.rand, self.k
        for drafter in self.drafters:
            match = _match_kind(self.table.matches(self.klass, drafter), rand())
            if match is None:
                self.policy.observe_shadow(drafter, k, 0)  # no match: a step would have gained nothing
                continue
            order, ambiguous, probs = match
            self.policy.observe_shadow(drafter, k, _accepted(probs, k, rand), order, ambiguous)

    def resolve(self, context, verified_drafter) -> None:
        """Nothing pending: outcomes are drawn when proposed."""
