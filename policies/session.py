"""One request's conversation with its policy: the step protocol, written once.

The engine (``adaptive_spec/decoder.py``), the simulator's replicas (``simulator/replica.py``,
``simulator/batching.py``) and the offline replay (``benchmarks/replay.py``) all serve a request
the same way; only how a draft is produced and verified differs (a model forward, a draw from an
acceptance profile, a comparison with recorded tokens). ``DecodeSession`` holds everything else::

    session = DecodeSession(policy, max_new_tokens, gated=..., stoppable=..., warm_steps=...)
    while not done:
        plan = session.plan(generated)       # 1. decide; cap k to the budget; the gate's max_k
        ...draft up to plan.k tokens...       #    (the caller: a drafter, a draw, a lookup)
        kept = session.cut(plan, n, order)    # 2. the match gate keeps a prefix of the draft
        ...verify the kept drafts...          #    (the caller)
        outcome = session.finish(plan, ...)   # 3. the StepOutcome; the policy learns from it

The policy's hooks (``policies.base.Policy``) are called here and nowhere else: ``warm_start``
and ``start_request`` when the session opens, ``decide``, ``draft_gate`` and ``early_stop`` in
``plan``, ``keep`` in ``cut``, ``learn_skipped``, ``observe`` and shadow drafts in ``finish``.

A draft cut to nothing by the gate still teaches it: once the step's token is known, the caller
says whether the draft's first token was that token (``first_token_right``).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from policies.base import Policy
from policies.outcome import PLAIN, Action, StepOutcome


@dataclass(slots=True)
class StepPlan:
    """What one step will do, as planned before drafting."""

    action: Action  # what the policy decided, before any cap or cut
    drafter: str  # the drafter that proposes ("none": a plain step)
    k: int  # tokens to ask the drafter for: capped to the budget; the gate's max_k when gated
    gate: object | None = None  # the policy's MatchGate for this drafter, when it cuts drafts
    early_stop: object | None = None  # the policy's early stop for this drafter, when it has one
    generated: int = 0  # tokens the request had produced when the step was planned
    # set by ``cut``: the draft's match (order, ambiguous) when the gate cut it to nothing
    skipped: tuple[int, bool] | None = None

    @property
    def is_plain(self) -> bool:
        return self.k == 0


class DecodeSession:
    """The step protocol for one request; see the module docstring.

    ``gated``: drafters that report match orders (their drafts go through the policy's gate).
    ``stoppable``: drafters with probabilities (the policy's early stop may end their drafts).
    ``warm_steps``: step costs the caller measured before (the engine's memory), for a cold policy.
    ``shadow``: a ``policies.shadow.ShadowDrafts`` when the caller has tokens to run them on.
    """

    __slots__ = ("policy", "max_new_tokens", "gated", "stoppable", "key", "shadow", "steps")

    def __init__(self, policy: Policy, max_new_tokens: int, *, gated: Collection[str] = (),
                 stoppable: Collection[str] = (), warm_steps: Iterable[StepOutcome] | None = None,
                 key: str = "", shadow=None) -> None:
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a policies.base.Policy, got {type(policy).__name__}")
        self.policy, self.max_new_tokens, self.key, self.shadow = policy, max_new_tokens, key, shadow
        self.gated, self.stoppable = gated, stoppable
        self.steps = 0
        if warm_steps is not None:
            policy.warm_start(warm_steps)  # a policy that already started ignores it
        policy.start_request()

    def plan(self, generated: int, context: list[int] | None = None) -> StepPlan:
        """Step 1: the policy's action, capped so the step cannot overshoot ``max_new_tokens``
        (the step emits the accepted drafts plus one token), widened to the gate's ``max_k`` for a
        gated drafter (a lookup costs the same at any length; the gate cuts it afterwards).
        ``context`` (token ids so far) lets a plain step run the shadow drafts."""
        action = self.policy.decide()
        room = self.max_new_tokens - generated - 1
        k = min(action.k, room) if action.drafter != PLAIN else 0
        if k <= 0:
            if context is not None and self.shadow is not None:
                self.shadow.propose(context)
            return StepPlan(action, action.drafter, 0, generated=generated)  # capped: its drafter, k = 0
        drafter = action.drafter
        gate = self.policy.draft_gate(drafter) if drafter in self.gated else None
        if gate is not None:
            k = min(max(k, gate.max_k), room)
        stopper = self.policy.early_stop(drafter) if k > 1 and drafter in self.stoppable else None
        return StepPlan(action, drafter, k, gate, stopper, generated)

    def overrule(self, plan: StepPlan) -> None:
        """The caller decodes this step plainly whatever the policy planned (a batch that cannot
        afford the draft): ``finish`` then reports a plain step, so the policy learns neither a miss
        of its drafter nor a speculative step that yielded one token."""
        plan.k = 0

    def cut(self, plan: StepPlan, available: int, match_order: int | None = None, ambiguous: bool = False) -> int:
        """Step 2: how many of the ``available`` drafted tokens to verify (all, without a gate)."""
        available = min(available, plan.k)
        if plan.gate is None or available == 0:
            return available
        keep = plan.gate.keep(match_order, available, ambiguous)
        if keep == 0:
            plan.skipped = (match_order, ambiguous)
        return keep

    def expected(self, plan: StepPlan, kept: int, match_order: int | None = None, ambiguous: bool = False) -> list[float] | None:
        """Expected tokens of the step at each length ``0..kept`` of the draft ``cut`` kept: the
        gate's estimate for its match, else the policy's for its drafter; None where neither has one."""
        if kept == 0:
            return [1.0]
        if plan.gate is not None and match_order is not None:
            return plan.gate.expected(match_order, kept, ambiguous)
        return self.policy.expected_tokens(plan.drafter, kept)

    def finish(self, plan: StepPlan, proposed: int, num_accepted: int, emitted: int, draft_s: float,
               verify_s: float, context_len: int, *, first_token_right: bool = False,
               match_order: int | None = None, match_ambiguous: bool = False,
               confidences: tuple[float, ...] | None = None, entropies: tuple[float, ...] | None = None,
               context: list[int] | None = None, timestamp: float | None = None) -> StepOutcome:
        """Step 3: the step's record, and the policy learns from it.

        ``proposed`` is what was verified (after ``cut``); ``first_token_right`` says, for a draft
        the gate cut to nothing, whether its first token was the one decoding produced;
        ``context`` (token ids, this step's included) resolves pending shadow drafts."""
        if plan.skipped is not None:
            order, ambiguous = plan.skipped
            plan.gate.learn_skipped(order, first_token_right, ambiguous)
        if context is not None and self.shadow is not None:
            self.shadow.resolve(context, plan.drafter if proposed else None)
        # a gated draft is reported at the length the gate kept; a miss at the length looked up
        k = proposed if plan.gate is not None and (proposed or plan.skipped is not None) else plan.k
        outcome = StepOutcome(
            plan.drafter, k, proposed, num_accepted, emitted, draft_s, verify_s, context_len,
            confidences, self.key, time.time() if timestamp is None else timestamp, entropies,
            match_order if proposed else None, match_ambiguous if proposed else False,
            plan.action.drafter, plan.action.k,
        )
        self.policy.observe(outcome)
        self.steps += 1
        return outcome

    def drain_events(self) -> list:
        return self.policy.drain_events()
