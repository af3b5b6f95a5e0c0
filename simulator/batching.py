"""Continuous batching: many sequences share each target forward.

GPU servers (vLLM, TGI, SGLang) do not serve one request at a time: every iteration runs one
forward over all running sequences, admits waiting requests when a slot frees up (up to
``max_batch``), and retires finished ones - *continuous* (iteration-level) batching (Yu et al.,
Orca, 2022). Speculative decoding changes each iteration from one token per sequence to ``k + 1``
tokens per sequence, so the forward verifies ``sum(k_i + 1)`` tokens.

Whether that pays depends on the regime the cost model was fitted in. At small batch the forward
is memory-bound (weights are read once whatever the token count) and verifying 5 tokens costs
little more than 1: speculation multiplies throughput. At large batch the forward is
compute-bound and its cost grows with every token verified across the batch, so rejected draft
tokens are pure waste and speculation's gain shrinks, then turns into a loss. This module does not
encode that: it passes batch size, tokens and context to the cost model and the effect follows
from the fit (see ``simulator/cost_model.py``).

One iteration::

    1. admit:   move queued requests into free slots. With no sequence running their prefills
                run alone and give each its first token. With sequences running and
                ``prefill_rides`` (as the engine's ``BatchedDecoder``), the prompts ride in the
                iteration's forward: each costs what the profile measured such chunks add to a
                batched step (its ``ride`` samples; without them, the prefill fit's growth over
                the chunk, not a forward's fixed part), and joins after it with its first token;
                without it they run first (prefill-priority scheduling, as vLLM's default), a
                forward each. With
                ``prefill_chunk``, an iteration with running sequences prefills at most that many
                prompt tokens: a long prompt joins over several iterations
    2. plan:    each running sequence's session asks its policy for (drafter, k), capped to its
                budget, through the match gate (``policies.session``, as the engine does)
    3. draw:    proposed and accepted per sequence from its class's acceptance profile; with
                ``draft_cap``, the batch then cuts what the gates kept (``BatchDraftCap.allot``)
    4. cost:    draft_s (per drafter: batched = longest draft, unbatched = sum) + verify_s(batch,
                widest sequence, tokens across the batch, context across the batch); where the
                profile timed this engine's batched forward (``metadata.batched_forward: padded``,
                as ``calibrate --batch-sizes`` writes), the step takes the engine's form
                (``policies.batch_layout``) over the engine's slot axis (``SlotAxis``): padded,
                batch x widest, or packed, the sequences' own tokens
    5. advance: one SimPy timeout for the whole iteration
    6. finish:  every sequence's session records its StepOutcome (sharing the iteration's draft_s
                and verify_s: a policy that measures tokens per second sees the batched cost)

As in the engine's batched decoder (``adaptive_spec/batching/engine.py``): a learning controller
serves one sequence at a time, so concurrent sequences of one key (or of the replica, with
``policy_scope: replica``) get controllers of their own, the pool's first, then replicas built from
the same spec; and with ``draft_cap`` a ``policies.batch_cap.BatchDraftCap`` cuts the drafts of the
sequences those controllers serve to one length per iteration, weighing each sequence's expected
tokens (its gate's estimate) against the iterations' fitted costs.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from policies.batch_cap import BatchDraftCap
from policies.batch_layout import SlotAxis, scored_tokens
from simulator.cost_model import forward_verify_s
from simulator.drafts import Draft
from simulator.replica import Replica


class BatchingReplica(Replica):
    """Iteration-level batching with at most ``max_batch`` running sequences."""

    def __init__(self, *args, max_batch: int = 8, draft_cap: bool = False, prefill_chunk: int | None = None,
                 plain_slowdown: float | None = BatchDraftCap.plain_slowdown, prefill_rides: bool = True,
                 objective: str = BatchDraftCap.objective, cut: str = BatchDraftCap.cut,
                 cap_steps: Sequence[Sequence[float]] = (), **kwargs) -> None:
        self.max_batch = max_batch  # slots: bounded in practice by KV-cache memory
        if prefill_chunk is not None and (not isinstance(prefill_chunk, int) or prefill_chunk < 1):
            raise ValueError(f"prefill_chunk must be an integer >= 1 or None, got {prefill_chunk!r}")
        self.prefill_chunk = prefill_chunk  # prompt tokens an iteration prefills while sequences run (None: all)
        self.joining: list | None = None  # [request, prompt tokens prefilled] while its chunks go in
        self.prefill_rides = prefill_rides  # prompts ride in the running sequences' forward (the engine's riders)
        self.last_draft_s = self.last_verify_s = 0.0  # the current iteration's, shared by its sequences
        self.axis = SlotAxis()  # the engine's slot axis: what a step's attention spans
        self._pools: dict[str, list] = {}  # key -> its controllers; one serves one sequence at a time
        self._busy: set[int] = set()  # ids of the controllers serving a sequence now
        super().__init__(*args, **kwargs)
        self.draft_cap = BatchDraftCap(plain_slowdown=plain_slowdown, objective=objective,
                                       cut=cut) if draft_cap else None
        if self.draft_cap is not None:
            self.draft_cap.warm(self.priced_shapes())
            for rows, width, seconds, slots in cap_steps:  # a server's cap after its warm start: this one's too
                self.draft_cap.observe(rows, width, seconds, slots)

    def priced_shapes(self) -> list[tuple[int, float, float, float]]:
        """``(rows, width, seconds, context)`` of forwards of several shapes, as this replica prices
        them: what the batch's cost fit starts from. A server's cut has learned its machine's costs
        from the traffic before (or from ``--profile``) by the time a measured run starts; started
        cold, the replica's would let every draft through until its fit could price one."""
        shapes = []
        for rows in sorted({1, 2, 4, self.max_batch} & set(range(1, self.max_batch + 1))):
            for context in (64, 256, 1024):
                for widths in ([1] * rows, *([w] + [1] * (rows - 1) for w in (2, 5, 9, 17)), *([w] * rows for w in (2, 5, 9))):
                    try:
                        seconds = forward_verify_s(self.cost, widths, [context] * rows, context)
                    except ValueError:  # a profile that cannot price this shape: running one says so
                        continue
                    shapes.append((rows, self.scored(widths) / rows, seconds, context))
        return shapes

    def policy_for(self, key: str):
        """A controller for one sequence of ``key`` that serves no other now (the engine's ``_pooled``)."""
        policies = self.policies
        first = policies.get(key)
        if first.stateless:  # a fixed config learns nothing: one object serves every sequence
            return first
        pool = self._pools.setdefault("" if policies.shared is not None else key, [])
        policy = next((p for p in pool if id(p) not in self._busy), None)
        if policy is None:
            seed = (policies.seed + zlib.crc32(f"{key}#{len(pool)}".encode())) % 2**31
            policy = first if not pool else policies.warm(policies.build(seed, key))
            pool.append(policy)
        self._busy.add(id(policy))
        return policy

    def run(self):
        env, drafts = self.env, self.drafts
        running = []  # [request, session, context_len, credit (as the engine's rows: BatchDraftCap.credits)]
        while True:
            if not running and not self.queue and self.joining is None:
                yield from self.wait_for_work()
            riding = bool(running) and self.prefill_rides
            admitted, prefill_s, fed = self.admit(len(running))  # 1
            prefill_s += self.overhead.request_s * len(admitted)
            if not riding:
                if prefill_s > 0:
                    yield env.timeout(prefill_s)
                self.seat(admitted, running)
                if not running:
                    continue
            steps = []
            looked_up: dict[str, list[int]] = {}
            # the cap binds the sequences learning controllers serve (a fixed config stands)
            bound = [not session.policy.stateless for _, session, *_ in running]
            plans = [session.plan(request.generated, self.tokens(request)) for request, session, *_ in running]  # 2
            for (request, session, *_), plan in zip(running, plans):
                draft = drafts.draw(request.klass, session, plan, self.tokens(request))  # 3
                if plan.k > 0:
                    looked_up.setdefault(plan.drafter, []).append(draft.looked_up)
                steps.append((plan, draft))
            context = max(self.axis.slots, max(seq[2] for seq in running))  # as the engine: its slot axis
            cap = None
            if self.draft_cap is not None and any(bound):  # as the engine: each sequence's expected tokens weigh its draft
                expected = [session.expected(plan, draft.proposed, draft.match_order, draft.ambiguous)
                            for (_, session, *_), (plan, draft) in zip(running, steps)]
                cap = self.draft_cap.allot([d.proposed for _, d in steps], expected, bound, self.scored,
                                           [seq[3] for seq in running], context)
            if cap is not None:  # as the engine: the batch cuts what the sequences' gates kept
                for (_, session, *_), kept, (plan, draft) in zip(running, cap, steps):
                    if kept == 0 and draft.proposed:
                        session.overrule(plan)
                steps = [(plan, _trimmed(draft, kept)) for (plan, draft), kept in zip(steps, cap)]
            seconds = self.iteration_s(running, steps, looked_up)
            # as the engine's rows, the sequences' controllers learn the iteration's cost without the riders
            rode = riding and fed > 0
            yield env.timeout(seconds + (prefill_s if rode else 0.0) + self.overhead.step_s)  # 4, 5
            if self.draft_cap is not None:
                # priced by the tokens scored, as the engine does (a packed forward: its rows' mean width)
                widths = [draft.proposed + 1 for _, draft in steps]
                emitted = [min(draft.accepted + 1, seq[0].output_tokens - seq[0].generated)
                           for seq, (_, draft) in zip(running, steps)]
                width = self.scored(widths) / len(widths)
                for seq, credit in zip(running, self.draft_cap.credits(width, emitted, context) or ()):
                    seq[3] += credit  # as the engine: priced before the step joins the fit
                if not rode:  # as the engine: an iteration that carried prompts costs more than its shape
                    self.draft_cap.observe(len(running), width, seconds, context)
            self.axis.forward([draft.proposed + 1 for _, draft in steps])
            running = self.finish_iteration(running, steps)  # 6
            self.axis.settle([seq[2] - 1 for seq in running])  # as the engine: compacts after the step
            if riding:
                self.seat(admitted, running)

    def seat(self, admitted: list, running: list) -> None:
        """Requests whose whole prompt is in get their first token and join ``running``."""
        for request in admitted:
            self.first_token(request)
            if request.generated >= request.output_tokens:
                self.finish(request)
            else:
                running.append([request, self.open_session(request), request.prompt_tokens + 1, 0.0])
                self.axis.join(request.prompt_tokens)

    def scored(self, widths: list[int]) -> int:
        """Tokens a forward over rows ``widths`` wide scores, as the profile's forward ran."""
        return scored_tokens(widths) if getattr(self.cost, "padded", False) else sum(widths)

    def admit(self, running: int) -> tuple[list, float, int]:
        """The requests whose whole prompt goes in this iteration, the seconds its prefills cost (a
        chunk of a prompt still joining included: forwards of their own, or what they add to the
        iteration's forward when they ride in it) and the prompt tokens they feed."""
        admitted, seconds, tokens = [], 0.0, 0
        riding = bool(running) and self.prefill_rides
        budget = self.prefill_chunk if running and self.prefill_chunk is not None else None
        while budget is None or budget > 0:
            if self.joining is None:
                if not self.queue or running + len(admitted) >= self.max_batch:
                    break
                request = self.queue.popleft()
                self.start(request)
                self.joining = [request, 0]
            request, done = self.joining
            fed = request.prompt_tokens - done if budget is None else min(budget, request.prompt_tokens - done)
            seconds += chunk_prefill_s(self.cost, done, fed, riding)
            tokens += fed
            budget = None if budget is None else budget - fed
            if done + fed < request.prompt_tokens:
                self.joining[1] = done + fed
                break
            self.joining = None
            admitted.append(request)
        return admitted, seconds, tokens

    def iteration_s(self, running: list, steps: list, looked_up: dict[str, list[int]]) -> float:
        cost = self.cost
        self.last_draft_s = sum(cost.draft_s(d, max(ks), len(ks), sum(ks)) for d, ks in looked_up.items())
        widths = [draft.proposed + 1 for _, draft in steps]
        self.last_verify_s = forward_verify_s(cost, widths, [seq[2] for seq in running], self.axis.slots)
        return self.last_draft_s + self.last_verify_s

    def finish_iteration(self, running: list, steps: list) -> list:
        """Every sequence learns from the iteration; returns those still running."""
        still_running, batch = [], len(running)
        for seq, (plan, draft) in zip(running, steps):
            request, session, context, _ = seq
            emitted = min(draft.accepted + 1, request.output_tokens - request.generated)
            outcome = session.finish(plan, draft.proposed, draft.accepted, emitted, self.last_draft_s,
                                     self.last_verify_s, context, first_token_right=draft.first_token_right,
                                     match_order=draft.match_order, match_ambiguous=draft.ambiguous,
                                     timestamp=self.env.now, context=self.tokens(request, emitted) or None)
            self.hooks.on_step(outcome, batch)
            self.account(request, draft, emitted)
            seq[2] = context + emitted
            if request.generated >= request.output_tokens:
                self._busy.discard(id(session.policy))  # its controller is free for the next sequence
                self.finish(request)
            else:
                still_running.append(seq)
        return still_running


def chunk_prefill_s(cost, done: int, tokens: int, rides: bool = False) -> float:
    """``tokens`` more of a prompt whose first ``done`` are in. Riding in a batched step: what the
    profile measured such chunks add (``ride_s``), where it did. Otherwise the prefill fit's growth
    from ``done`` to ``done + tokens`` tokens (attention over the earlier chunks included), plus, in
    a forward of its own (not ``rides``), the fit's per-forward part. Alone from ``done`` 0 it is
    ``prefill_s(tokens)``. A cost model that draws its times at random (a queueing test's) can make
    the difference negative: never below 0."""
    if done == 0 and not rides:
        return cost.prefill_s(tokens)
    ride = getattr(cost, "ride_s", None) if rides else None
    measured = None if ride is None else ride(done, tokens)
    if measured is not None:
        return measured
    fixed = 0.0 if rides else cost.prefill_s(0)
    return max(0.0, cost.prefill_s(done + tokens) - cost.prefill_s(done) + fixed)


def _trimmed(draft: Draft, cap: int) -> Draft:
    """``draft`` verified ``cap`` tokens long at most (acceptance is a prefix: what it accepted within them stands)."""
    return draft._replace(proposed=min(draft.proposed, cap), accepted=min(draft.accepted, cap))
