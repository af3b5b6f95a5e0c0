"""Replicas: SimPy processes that serve requests, one decode step at a time.

A replica is one engine process on one device. This module holds what every replica shares
(a FIFO queue, its policies, its random stream, the acceptance table) and ``SerialReplica``: batch-1
FIFO serving, as the engine does today. ``simulator/batching.py`` adds continuous batching.

The decode loop mirrors the engine's, step by step::

    1. ask the policy:            action = policy.decide()            (drafter, k; k = 0 is plain)
    2. draft:                     proposed = k, or 0 if the drafter finds nothing (hit_rate);
                                  with match kinds in the profile and a policy with a match gate,
                                  draw the kind of match and let the gate pick the length
    3. sample acceptance:         accepted ~ the class's acceptance profile for that drafter
    4. cost:                      draft_s + verify_s from the fitted cost model
    5. advance the clock:         yield env.timeout(draft_s + verify_s)   (one event per step)
    6. tell the policy:           policy.observe(StepOutcome(...)); hooks.on_step(...)

One SimPy timeout per *step* (never per token) keeps the loop at a few microseconds, which is
what lets 100k requests run in under a minute.
"""

from __future__ import annotations

import random
from collections import deque

import simpy

from policies import PLAIN, StepOutcome
from simulator.entities import Request, RequestClass
from simulator.policy_factory import PolicyPool


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


class Replica:
    """What all replica kinds share: a FIFO queue with a wake-up event, policies, randomness."""

    def __init__(self, env: simpy.Environment, index: int, cost, classes: dict[str, RequestClass],
                 policies: PolicyPool, hooks, seed: int) -> None:
        self.env, self.index, self.cost, self.classes = env, index, cost, classes
        self.policies, self.hooks = policies, hooks
        self.rand = random.Random(seed).random  # acceptance draws: stdlib is ~20x cheaper per call than numpy
        self.acceptance = AcceptanceTable(classes)
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
        request.first_token_s = self.env.now
        request.generated = 1  # prefill's logits give the first token
        self.hooks.on_first_token(request, self.env.now)

    def finish(self, request: Request) -> None:
        request.finish_s = self.env.now
        self.in_service -= 1
        self.hooks.on_request_completion(request, self.env.now)

    def run(self):  # pragma: no cover - overridden
        raise NotImplementedError


class SerialReplica(Replica):
    """Batch-1 FIFO: one request at a time, prefill then decode steps until its output is complete."""

    def run(self):
        env, cost, hooks, rand = self.env, self.cost, self.hooks, self.rand
        while True:
            if not self.queue:
                yield from self.wait_for_work()
            request = self.queue.popleft()
            self.start(request)
            yield env.timeout(cost.prefill_s(request.prompt_tokens))
            self.first_token(request)
            klass = self.classes[request.klass]
            policy = self.policies.get(klass.key)
            decide, observe, key = policy.decide, policy.observe, klass.key
            start_request = getattr(policy, "start_request", None)
            if start_request is not None:  # as the engine does before a request's first step
                start_request()
            gate_for = getattr(policy, "draft_gate", None)
            # drafter -> match kinds of this class; empty (no per-step lookup) without kinds or gate
            match_kinds = self.acceptance.match_kinds(request.klass) if gate_for else None
            context = request.prompt_tokens + 1
            while request.generated < request.output_tokens:
                action = decide()  # 1
                k, drafter = action.k, action.drafter
                order, ambiguous = None, False
                kinds = match_kinds.get(drafter) if match_kinds and k > 0 else None
                if kinds:
                    gate = gate_for(drafter)
                    if gate is not None:  # as the engine: draft up to max_k, the gate keeps a prefix
                        k = min(max(k, gate.max_k), request.output_tokens - request.generated - 1)
                if k <= 0 or drafter == PLAIN:
                    drafter, k, proposed, accepted, draft_s = PLAIN, 0, 0, 0, 0.0
                elif kinds and gate is not None:
                    u, proposed, accepted = rand(), 0, 0  # 2: which kind of match, if any
                    for cumulative, order, ambiguous, probs in kinds:
                        if u < cumulative:
                            break
                    else:
                        order, ambiguous = None, False  # no match: a plain-cost step
                    draft_s = cost.draft_s(drafter, k if order is not None else 0)  # the lookup runs at max_k
                    if order is not None:
                        keep = gate.keep(order, k, ambiguous)
                        if keep == 0:  # cut: decoding still tells the gate whether its first token was right
                            gate.learn_skipped(order, rand() < probs[0], ambiguous)
                            k, order = 0, None
                        else:
                            k = proposed = keep
                            while accepted < proposed and rand() < probs[accepted]:  # 3
                                accepted += 1
                else:
                    probs, hit_rate = self.acceptance.get(request.klass, drafter, k)
                    proposed = k if hit_rate >= 1.0 or rand() < hit_rate else 0  # 2
                    accepted = 0
                    while accepted < proposed and rand() < probs[accepted]:  # 3
                        accepted += 1
                    draft_s = cost.draft_s(drafter, proposed)  # a miss costs the lookup (per_call_s) only
                verify_s = cost.verify_s(proposed + 1, context)  # 4
                yield env.timeout(draft_s + verify_s)  # 5
                emitted = min(accepted + 1, request.output_tokens - request.generated)
                outcome = StepOutcome(drafter, k, proposed, accepted, emitted, draft_s, verify_s,  # positional: hot loop
                                      context, None, key, env.now, None, order, ambiguous)
                observe(outcome)  # 6
                hooks.on_step(outcome, 1)
                request.generated += emitted
                request.steps += 1
                request.proposed += proposed
                request.accepted += accepted
                context += emitted
            self.finish(request)
