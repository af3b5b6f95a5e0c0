"""Replicas: SimPy processes that serve requests, one decode step at a time.

A replica is one engine process on one device. This module holds what every replica shares
(a FIFO queue, its policies, its draft source) and ``SerialReplica``: batch-1 FIFO serving, as the
engine does today. ``simulator/batching.py`` adds continuous batching.

Each request is served through the step protocol the engine uses (``policies.session``)::

    1. plan:     session.plan(generated)      policy.decide(), capped to the budget, gate's max_k
    2. draw:     drafts.draw(class, plan)     proposed and accepted from the class's profile; the
                                              match gate cuts a lookup's draft (simulator/drafts.py);
                                              with a recorded stream, the lookup runs on its tokens
    3. cost:     draft_s + verify_s from the fitted cost model
    4. advance:  yield env.timeout(draft_s + verify_s + the scenario's overhead.step_s)   (one event per step)
    5. finish:   session.finish(...)          the StepOutcome; the policy learns; hooks.on_step

A plain step also runs the request's shadow drafts (``ShadowDraws``: the lookups' would-be
acceptance, drawn from the class's match kinds), as the engine does: they are how the adaptive
controller sees that speculation pays again while it is off.

One SimPy timeout per *step* (never per token) keeps the loop at a few microseconds, which is
what lets 100k requests run in under a minute.
"""

from __future__ import annotations

import random
from collections import deque

import simpy

from policies.session import DecodeSession
from simulator.drafts import Draft, ProfileDrafts
from simulator.entities import Request, RequestClass
from simulator.policy_factory import PolicyPool
from simulator.scenario import Overhead

# what a step passes the session for its shadow drafts: no tokens (ShadowDraws draws outcomes), but
# not None, which would skip them
NO_TOKENS: tuple[int, ...] = ()


class Replica:
    """What all replica kinds share: a FIFO queue with a wake-up event, policies, randomness."""

    def __init__(self, env: simpy.Environment, index: int, cost, classes: dict[str, RequestClass],
                 policies: PolicyPool, hooks, seed: int, drafts=None, overhead: Overhead | None = None) -> None:
        self.env, self.index, self.cost, self.classes = env, index, cost, classes
        self.overhead = overhead or Overhead()
        self.policies, self.hooks = policies, hooks
        # acceptance draws: stdlib's random is far cheaper per call than numpy's in a per-step loop
        self.drafts = drafts if drafts is not None else ProfileDrafts(classes, random.Random(seed).random)
        self.queue: deque[Request] = deque()
        self.in_service = 0  # requests past the queue and not finished
        self._wakeup: simpy.Event | None = None
        self.process = env.process(self.run())

    @property
    def outstanding(self) -> int:
        """Queued plus in service: what a least-loaded router compares."""
        return len(self.queue) + self.in_service

    def submit(self, request: Request) -> None:
        request.replica = self.index
        self.queue.append(request)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def wait_for_work(self):
        """Yield from this while the queue is empty."""
        self._wakeup = self.env.event()
        yield self._wakeup
        self._wakeup = None

    def start(self, request: Request) -> None:
        request.start_s = self.env.now
        self.in_service += 1
        self.hooks.on_request_start(request, self.env.now)

    def first_token(self, request: Request) -> None:
        request.first_token_s = self.env.now + self.overhead.client_s  # the client sees it that much later
        request.generated = 1  # prefill's logits give the first token
        self.hooks.on_first_token(request, self.env.now)

    def finish(self, request: Request) -> None:
        request.finish_s = self.env.now + self.overhead.client_s
        self.in_service -= 1
        self.hooks.on_request_completion(request, self.env.now)

    def open_session(self, request: Request) -> DecodeSession:
        """The request's step protocol with its class's policy (after prefill: one token is out),
        with shadow drafts where the draw source simulates them (``ProfileDrafts.shadows``)."""
        key = self.classes[request.klass].key
        policy = self.policy_for(key)
        shadows = getattr(self.drafts, "shadows", None)  # a scripted draw source may have none
        return DecodeSession(policy, request.max_tokens or request.output_tokens, key=key, gated=self.drafts.gated(request.klass),
                             shadow=shadows(request.klass, policy, request) if shadows is not None else None)

    def tokens(self, request: Request, ahead: int = 0):
        """The request's token ids so far where the draw source runs lookups on them (``ProfileDrafts.tokens``)."""
        tokens = getattr(self.drafts, "tokens", None)
        return tokens(request, ahead) if tokens is not None else NO_TOKENS

    def policy_for(self, key: str):
        """The controller of the request about to start (the batching replica leases one per sequence)."""
        return self.policies.get(key)

    def draft_s(self, drafter: str, k: int, draft: Draft) -> float:
        """A plan to draft costs the lookup or the draft, even when nothing came of it."""
        return self.cost.draft_s(drafter, draft.looked_up) if k > 0 else 0.0

    def account(self, request: Request, draft: Draft, emitted: int) -> None:
        request.generated += emitted
        request.steps += 1
        request.proposed += draft.proposed
        request.accepted += draft.accepted

    def run(self):  # pragma: no cover - overridden
        raise NotImplementedError


class SerialReplica(Replica):
    """Batch-1 FIFO: one request at a time, prefill then decode steps until its output is complete."""

    def run(self):
        env, cost, hooks, drafts, overhead = self.env, self.cost, self.hooks, self.drafts, self.overhead
        while True:
            if not self.queue:
                yield from self.wait_for_work()
            request = self.queue.popleft()
            self.start(request)
            yield env.timeout(cost.prefill_s(request.prompt_tokens) + overhead.request_s)
            self.first_token(request)
            session = self.open_session(request)
            klass = request.klass
            context = request.prompt_tokens + 1
            while request.generated < request.output_tokens:
                tokens = self.tokens(request)
                plan = session.plan(request.generated, tokens)  # 1
                draft = drafts.draw(klass, session, plan, tokens)  # 2
                draft_s = self.draft_s(plan.drafter, plan.k, draft)  # 3
                verify_s = cost.verify_s(draft.proposed + 1, context)
                yield env.timeout(draft_s + verify_s + overhead.step_s)  # 4
                emitted = min(draft.accepted + 1, request.output_tokens - request.generated)
                outcome = session.finish(plan, draft.proposed, draft.accepted, emitted, draft_s, verify_s, context,  # 5
                                         first_token_right=draft.first_token_right, match_order=draft.match_order,
                                         match_ambiguous=draft.ambiguous, timestamp=env.now,
                                         context=self.tokens(request, emitted) or None)
                hooks.on_step(outcome, 1)
                self.account(request, draft, emitted)
                context += emitted
            self.finish(request)
