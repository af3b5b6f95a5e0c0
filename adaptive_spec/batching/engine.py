"""Continuous batching with per-request speculation.

Requests join between steps (prefilled in a cache of their own, then added as a row of the shared
cache) and leave as soon as they finish. While rows are decoding, a newcomer's prompt rides in the
step's decode forward (``SlotCache`` riders: one pass over the weights for both, where a prefill
forward of its own stalled every row for nearly a whole step), at most ``prefill_chunk`` prompt
tokens a step, so a long prompt joins over several steps; with nothing decoding, prompts go in
whole, each in a forward of its own. Every step, each row asks its own controller for a drafter and a
draft length (0: plain decoding for that row), drafts, and the target scores every row's pending
token and drafts in one forward over ragged widths (``SlotCache``); each row is then verified on
its own (greedy prefix or exact rejection sampling, the single-request verifier) and rolled back
to what it accepted. Row by row the tokens are those of ``SpeculativeDecoder.generate``.

The batch's speculation: in a padded forward every row pays for the widest row's width (a packed
one, which ``SlotCache`` takes when rows' widths differ, charges each row its own tokens but still
attends over the widest row's grid), so once the rows have drafted what their own controllers and
match gates keep, an optional ``BatchDraftCap`` cuts the drafts of the rows that learning
controllers serve, row by row, to the lengths that maximise the step's expected tokens per second: each
row's tokens from its gate's estimate for the match it drafted from, the step's cost from the
measured cost of the batch's shape; only lengths that slow no row beyond the slowdown bound, per
token it expects from the step, widened by its credit (what its own accepted drafts saved it)
(``policies.batch_cap``).
Concurrent requests of one traffic key get controllers of their own (``_pooled``). Observers hear
each decode forward (``on_batch_step``: the batch around the rows, ``policies.batch_step``) besides
each row's step.

What it does not do yet: drafters with a model of their own (their caches are per request; only
lookups such as ``ngram`` are batched).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from adaptive_spec.batching.slots import Prefill, SlotCache
from adaptive_spec.config import PREFILL_CHUNK, GenerationConfig, validate_draft_len
from adaptive_spec.decoder import SpeculativeDecoder, _config, check_draft_ids
from adaptive_spec.drafters.base import Proposal
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.observers import RequestInfo
from adaptive_spec.result import GenerationResult, GenerationStats
from policies.base import OverridePolicy, Policy
from policies.batch_cap import BatchDraftCap
from policies.batch_step import BatchStep, cap_call
from policies.outcome import PLAIN, StepOutcome
from policies.registry import PolicyRegistry, make_policy
from policies.session import DecodeSession

_EMPTY = Proposal(tokens=[])
log = logging.getLogger(__name__)


@dataclass
class _Row:
    """One request's working state."""

    id: int
    prompt_ids: list[int]
    config: GenerationConfig
    policy: Policy
    key: str
    generator: torch.Generator | None
    submitted_s: float
    info: RequestInfo | None = None
    session: DecodeSession | None = None
    context: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    stats: GenerationStats = field(default_factory=GenerationStats)
    steps: list[StepOutcome] = field(default_factory=list)
    credit: float = 0.0  # seconds ahead of plain decoding plus the margin, as the batch's cap prices steps
    stop_reason: str | None = None
    started_s: float = 0.0
    drafter_failures: int = 0  # steps whose draft failed and decoded plainly instead
    on_tokens: Callable[[list[int]], None] | None = None
    forced: tuple | None = None  # (force_plain, force_drafter, force_k) of a row whose controller comes from a pool
    drafters: dict = field(default_factory=dict)  # this request's drafters (Drafter.for_request)
    prefill: Prefill | None = None  # its prompt's way into the cache, while it is on the way


class BatchedDecoder:
    """Decode many requests together on ``decoder``'s target, drafters and observers.

    >>> engine = BatchedDecoder(decoder, max_batch=8)  # doctest: +SKIP
    >>> ids = [engine.submit(p, max_new_tokens=64, policy=make_policy("adaptive", ["ngram"])) for p in prompts]  # doctest: +SKIP
    >>> results = engine.run()   # {id: GenerationResult}  # doctest: +SKIP

    One thread drives it (``step`` or ``run``); the wrapped decoder must not serve requests of its
    own meanwhile (they would share the target's weights, not its cache, so that is safe, but they
    would share controllers and drafters).
    """

    def __init__(self, decoder: SpeculativeDecoder, max_batch: int = 8, draft_cap: BatchDraftCap | None = None,
                 prefill_chunk: int | None = PREFILL_CHUNK, layout: str = "auto") -> None:
        if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
            raise InvalidParameterError("max_batch", max_batch, "must be an integer >= 1")
        if prefill_chunk is not None and (not isinstance(prefill_chunk, int) or isinstance(prefill_chunk, bool)
                                          or prefill_chunk < 1):
            raise InvalidParameterError("prefill_chunk", prefill_chunk, "must be an integer >= 1 or None (whole prompts)")
        stateful = [name for name, d in decoder.drafters.items() if name != PLAIN and d.vocab_size is not None]
        if stateful:
            raise InvalidParameterError("drafters", ",".join(stateful), "keep a cache per request; the batched engine "
                                        "drafts with lookups only (ngram)")
        self.decoder = decoder
        self.max_batch = max_batch
        self.prefill_chunk = prefill_chunk  # prompt tokens a step may prefill while rows decode (None: no limit)
        self.prefilling: _Row | None = None  # the request whose prompt is going in, chunk by chunk
        self.boarding: list[_Row] = []  # the requests whose prompt chunks ride in the step being run
        # cuts the drafts of rows served by learning controllers to what a step affords (None: never)
        self.draft_cap = draft_cap
        self.slots = SlotCache(decoder.target.model, layout)  # padded or packed forwards (``SlotCache``)
        self.waiting: deque[_Row] = deque()
        self.active: list[_Row] = []  # in the slot cache's row order
        self.results: dict[int, GenerationResult] = {}
        self._next_id = 0
        self._failed_drafters: set[str] = set()  # logged once each
        self._busy: set[int] = set()
        self._pools: OrderedDict[str, list[Policy]] = OrderedDict()  # key -> its controllers (``_pooled``)  # the learning controllers serving a row now (``_controller``)

    # -- requests ----------------------------------------------------------------------------------

    def submit(self, prompt: str | list[int], config: GenerationConfig | None = None, *, policy: Policy | None = None,
               key: str = "", force_plain: bool = False, force_drafter: str | None = None, force_k: int | None = None,
               on_tokens: Callable[[list[int]], None] | None = None, **overrides) -> int:
        """Queue a request; returns its id. Bad input is refused here, before it joins a batch.

        ``policy``, ``key`` and ``force_*`` are ``SpeculativeDecoder.generate``'s. With the decoder's
        ``PolicyRegistry`` (no ``policy``), concurrent requests of one key get controllers of their
        own: the key's, then replicas built from the same spec (``_pooled``), each serving one row at
        a time. ``on_tokens(ids)`` hears each step's new tokens (from the thread that steps)."""
        cfg = _config(config, overrides)
        prompt_ids = self.decoder.encode_prompt(prompt)
        self.decoder.check_fits(prompt_ids, cfg)
        forced = (force_plain, force_drafter, force_k)
        chosen = self.decoder.policy_for(key, policy, *forced)  # checks the overrides now
        pooled = policy is None and isinstance(self.decoder.policy, PolicyRegistry)
        generator = self.decoder.new_generator(cfg)
        row = _Row(self._next_id, prompt_ids, cfg, chosen, key, generator, time.perf_counter(), on_tokens=on_tokens,
                   forced=forced if pooled else None)
        self._next_id += 1
        self.waiting.append(row)
        return row.id

    def cancel(self, request_id: int) -> bool:
        """Stop a request now (its client went away): it leaves the queue or its row, without a
        result; observers hear its end. False if it is not waiting or running."""
        for row in self.waiting:
            if row.id == request_id:
                self.waiting.remove(row)
                return True
        if self.prefilling is not None and self.prefilling.id == request_id:
            row, self.prefilling = self.prefilling, None
            self._release(row)
            if row.info is not None:
                self.decoder.observers.notify("on_request_end", row.info, None, GeneratorExit())
            return True
        for index, row in enumerate(self.active):
            if row.id == request_id:
                self.slots.remove([index])
                del self.active[index]
                self._release(row)
                if row.info is not None:
                    self.decoder.observers.notify("on_request_end", row.info, None, GeneratorExit())
                return True
        return False

    def fail_all(self, exc: BaseException) -> list[int]:
        """End every request not yet finished (an error no row can survive, e.g. the forward itself
        failed); their ids."""
        started = self.active + self.boarding + ([self.prefilling] if self.prefilling is not None else [])
        # each once (a rider seated, or left prefilling, before a later one failed is still in
        # boarding too; a caller ending an id twice lost its thread to a KeyError), and none whose
        # result is in: it finished in the failed step before the failure, and that result stands
        started = [row for row in {id(row): row for row in started}.values() if row.id not in self.results]
        ids = [row.id for row in started] + [row.id for row in self.waiting]
        # a waiting row whose start observers heard (its prefill failed) is ended as well
        for row in started + [row for row in self.waiting if row.info is not None]:
            self._release(row)
            if row.info is not None:
                self.decoder.observers.notify("on_request_end", row.info, None, exc)
        self.active, self.waiting, self.prefilling, self.boarding = [], deque(), None, []
        self.slots.reset()
        return ids

    @property
    def pending(self) -> int:
        return len(self.waiting) + len(self.active) + (self.prefilling is not None)

    def run(self) -> dict[int, GenerationResult]:
        """Step until every submitted request is done; their results by id."""
        while self.pending:
            self.step()
        return self.results

    # -- the step ----------------------------------------------------------------------------------

    def step(self) -> list[int]:
        """Admit waiting requests while rows are free, then one decode step over every row; returns
        the ids of the requests that finished."""
        finished = self._admit()
        if self.active:
            finished += self._decode_step(self._board())
        return finished

    def _admit(self) -> list[int]:
        """Prefill waiting requests alone while rows are free: everything when nothing decodes; else
        (a forward that cannot carry riders) at most ``prefill_chunk`` prompt tokens this step (a
        long prompt goes on next step)."""
        if self.active and self.slots.carries_riders:
            return []  # the prompts ride in the decode forward (``_board``)
        finished = []
        skipped: deque[_Row] = deque()
        budget = self.prefill_chunk if self.active else None
        while budget is None or budget > 0:
            row, joined = self.prefilling, False
            try:
                if row is None:
                    row = self._next_admissible(skipped)
                    if row is None:
                        break
                    self._start(row)
                fed = row.prefill.remaining if budget is None else min(budget, row.prefill.remaining)
                logits = self.slots.feed(row.prefill, fed)
                budget = None if budget is None else budget - fed
                if logits is None:  # more of its prompt next step
                    self.prefilling = row
                    break
                self.prefilling, joined = None, True
                self._first_token(row, logits)
            except BaseException:  # where the caller's recovery (fail_all) finds it, and ends it
                self.prefilling = None
                self.waiting.extendleft(reversed(skipped))
                if joined:  # its row is in the cache: it stays beside it until fail_all
                    self.active.append(row)
                elif row is not None:
                    self._release(row)
                    self.waiting.appendleft(row)
                raise
            finished += self._seated(row)
        self.waiting.extendleft(reversed(skipped))
        return finished

    def _board(self) -> list[tuple[_Row, int]]:
        """The prompt chunks that ride in this step's forward, (request, tokens) each: the one
        going in chunk by chunk first, then waiting requests while rows are free, at most
        ``prefill_chunk`` tokens in all (a long prompt goes on next step)."""
        riders: list[tuple[_Row, int]] = []
        if not self.slots.carries_riders:
            return riders
        skipped: deque[_Row] = deque()
        budget = self.prefill_chunk
        self.boarding = []
        try:
            while budget is None or budget > 0:
                row, self.prefilling = self.prefilling, None
                if row is None:
                    row = self._next_admissible(skipped)
                    if row is None:
                        break
                    self.boarding.append(row)
                    self._start(row)
                else:
                    self.boarding.append(row)
                tokens = row.prefill.remaining if budget is None else min(budget, row.prefill.remaining)
                riders.append((row, tokens))
                budget = None if budget is None else budget - tokens
        finally:
            self.waiting.extendleft(reversed(skipped))
        return riders

    def _seat(self, riders: list[tuple[_Row, int]]) -> list[int]:
        """After the step: riders whose whole prompt is in join as rows with their first token (the
        one still going in waits for the next step); the ids of those that finished with it."""
        finished = []
        for row, _ in riders:
            if row.prefill.remaining:
                self.prefilling = row
                continue
            logits = row.prefill.logits
            self.slots.join(row.prefill)
            self._first_token(row, logits)
            finished += self._seated(row)
        self.boarding = []
        return finished

    def _seated(self, row: _Row) -> list[int]:
        """A row just joined as the cache's last, its first token out: it decodes on, or, finished
        with that token, leaves at once; its id then."""
        if row.stop_reason is None:
            self.active.append(row)
            return []
        self.slots.remove([self.slots.rows - 1])
        self._finish_request(row)
        return [row.id]

    def _next_admissible(self, skipped: deque[_Row]) -> _Row | None:
        """The first waiting request that may start now (rows free, its controller free), taking
        its controller; requests passed over go to ``skipped``."""
        while self.waiting and len(self.active) + len(self.boarding) < self.max_batch:
            row = self.waiting.popleft()
            if row.forced is not None:
                row.policy = self.decoder.policy_for(row.key, self._pooled(row.key), *row.forced)
            owner = _controller(row.policy)
            if owner is not None and owner in self._busy:  # its controller serves another row: it waits its turn
                skipped.append(row)
                continue
            if owner is not None:
                self._busy.add(owner)
            return row
        return None

    def _pooled(self, key: str) -> Policy:
        """A controller of ``key`` that serves no row now: the registry's own first, then replicas
        from the same spec (each learns from the rows it serves), at most ``max_batch`` per key."""
        registry: PolicyRegistry = self.decoder.policy
        pool = self._pools.setdefault(key, [])
        self._pools.move_to_end(key)
        while len(self._pools) > registry.max_keys:  # bounded as the registry is: idle keys go first
            idle = next((k for k, p in self._pools.items() if k != key and all(_controller(c) not in self._busy for c in p)),
                        None)
            if idle is None:
                break
            del self._pools[idle]
        for policy in pool:
            if _controller(policy) not in self._busy:
                return policy
        if len(pool) >= self.max_batch:
            return pool[0]  # busy: the row waits for it (cannot happen with at most max_batch rows)
        seed = (registry.seed + zlib.crc32(f"{key}#{len(pool)}".encode())) % 2**31
        policy = registry.get(key) if not pool else make_policy(registry.spec, registry.drafters, seed, key=key,
                                                                 **registry.kwargs)
        pool.append(policy)
        return policy

    def _release(self, row: _Row) -> None:
        self._busy.discard(_controller(row.policy))

    def _start(self, row: _Row) -> None:
        decoder = self.decoder
        if decoder.observers:
            row.info = RequestInfo(model=decoder.target_model.name, key=row.key, config=row.config,
                                   prompt_tokens=len(row.prompt_ids), policy=row.policy.name)
            decoder.observers.notify("on_request_start", row.info)
        row.started_s = decoder._now()
        row.stats.prompt_tokens = len(row.prompt_ids)
        row.prefill = Prefill(row.prompt_ids)

    def _first_token(self, row: _Row, logits: torch.Tensor) -> None:
        """The prompt is in (the row joined the cache): its first token, drafters and session."""
        decoder, cfg = self.decoder, row.config
        row.prefill = None
        first = decoder.first_token(logits, cfg, row.generator)
        # from its start to its first token: with chunks, the other rows' steps in between too
        row.stats.prefill_s = decoder._now() - row.started_s
        row.context = row.prompt_ids + [first]
        new, row.stop_reason = decoder._finish([first], row.generated, cfg)
        if row.on_tokens is not None:
            row.on_tokens(new)
        row.drafters = decoder.request_drafters(row.key)
        row.session = decoder.new_session(row.policy, cfg, row.key, row.drafters)

    def _decode_step(self, riders: list[tuple[_Row, int]]) -> list[int]:
        decoder = self.decoder
        t0 = decoder._now()
        rows = len(self.active)
        # the batch's cap binds the rows its learning controllers serve; a fixed config or a
        # request's own override is the caller's choice and stands (a batch of those learns nothing)
        bound = [_controller(row.policy) is not None and not _overridden(row.policy) for row in self.active]
        plans = [row.session.plan(len(row.generated), row.context) for row in self.active]
        proposals = []
        for row, plan in zip(self.active, plans):
            drafter = row.drafters.get(plan.drafter)
            if drafter is None:
                raise InvalidParameterError("drafter", plan.drafter, f"not loaded; loaded: {', '.join(decoder.drafters)}")
            validate_draft_len(plan.action.k)
            proposal = self._propose(row, drafter, plan.k) if plan.k > 0 else _EMPTY
            kept = row.session.cut(plan, len(proposal.tokens), proposal.match_order, proposal.match_ambiguous)
            proposals.append((proposal, proposal.tokens[:kept]))
        context = self.slots.slots  # every row's attention spans the slot axis: what the cut prices by
        cap = None
        if self.draft_cap is not None and any(bound):  # cut the bound rows' drafts to what the step affords
            expected = [row.session.expected(plan, len(d), p.match_order, p.match_ambiguous)
                        for row, plan, (p, d) in zip(self.active, plans, proposals)]
            cap = self.draft_cap.allot([len(d) for _, d in proposals], expected, bound, self.slots.scored,
                                       [row.credit for row in self.active], context)
        call = cap_call(cap, [len(d) for _, d in proposals], bound) if decoder.observers else None  # before the cut
        if cap is not None:
            for row, plan, kept, (_, drafts) in zip(self.active, plans, cap, proposals):
                if kept == 0 and drafts:  # decoded plainly against its plan: it learns a plain step
                    row.session.overrule(plan)
            proposals = [(p, d[:kept]) for (p, d), kept in zip(proposals, cap)]
        inputs = [[row.context[-1], *drafts] for row, (_, drafts) in zip(self.active, proposals)]
        t1 = decoder._now()
        logits = self.slots.extend(inputs, [(row.prefill, tokens) for row, tokens in riders])
        done: list[int] = []
        verdicts, emitted = [], []
        for index, row in enumerate(self.active):
            proposal, drafts = proposals[index]
            verdict = decoder._verify(drafts, proposal, logits[index], row.config, row.generator)
            self.slots.rollback(index, len(row.context) + verdict.num_accepted)
            verdicts.append(verdict)
        t2 = decoder._now()
        verify_s = self._rows_verify_s(riders, rows, context, t1 - t0, t2 - t1)
        if call is not None:
            decoder.observers.notify("on_batch_step", decoder.target_model.name, BatchStep(
                rows, sum(1 for _, drafts in proposals if drafts), *call, sum(tokens for _, tokens in riders), t2 - t0))
        for index, row in enumerate(self.active):
            (proposal, drafts), verdict, plan = proposals[index], verdicts[index], plans[index]
            step_tokens = [*drafts[: verdict.num_accepted], verdict.next_token]
            row.context.extend(step_tokens)
            new, row.stop_reason = decoder._finish(step_tokens, row.generated, row.config)
            emitted.append(len(new))
            # the step's time is the whole batch's: what this row waited for its tokens
            outcome = row.session.finish(
                plan, len(drafts), verdict.num_accepted, len(new), t1 - t0, verify_s, len(row.context) - len(step_tokens),
                first_token_right=bool(proposal.tokens) and proposal.tokens[0] == verdict.next_token,
                match_order=proposal.match_order, match_ambiguous=proposal.match_ambiguous, context=row.context,
            )
            row.stats.add_step(outcome)
            row.steps.append(outcome)
            if row.on_tokens is not None:
                row.on_tokens(new)
            if row.info is not None:
                decoder.observers.notify("on_step", row.info, outcome, row.session.drain_events())
            if row.stop_reason is not None:
                done.append(index)
        if self.draft_cap is not None:
            # priced by the tokens the forward scored: a packed step's width is its rows' mean
            # credits first: priced by the fit that decided the step's cut, before the step joins it
            width = self.slots.last_tokens / rows
            for row, gained in zip(self.active, self.draft_cap.credits(width, emitted, context) or ()):
                row.credit += gained
            if not riders:  # every step teaches the cost of its shape, but one that carried prompts costs more
                self.draft_cap.observe(rows, width, t2 - t0, context)
        finished = []
        if done:
            self.slots.remove(done)
            for index in done:
                self._finish_request(self.active[index])
            finished = [self.active[index].id for index in done]
            self.active = [row for index, row in enumerate(self.active) if index not in set(done)]
        else:
            self.slots.compact()
        return finished + self._seat(riders)

    def _rows_verify_s(self, riders: list, rows: int, context: int, draft_s: float, verify_s: float) -> float:
        """The forward's seconds as the rows' controllers learn them. A step that carried prompts
        charges its rows what the batch's cost fit prices their own forward at (never more than it
        took): a newcomer's prefill is not the cost of their drafts, and charged to them it made
        drafting look slower than plain decoding."""
        if not riders or self.draft_cap is None:
            return verify_s
        priced = self.draft_cap.cost(rows, self.slots.last_tokens / rows, context)
        own = None if priced is None else priced - draft_s
        return min(verify_s, own) if own is not None and own > 0 else verify_s

    def _propose(self, row: _Row, drafter, k: int) -> Proposal:
        """The row's draft; a drafter that fails costs that row its draft (a plain step), not the batch."""
        try:
            proposal = drafter.propose(row.context, k, row.config, row.generator)
            check_draft_ids(drafter.name, proposal.tokens, self.decoder.target.vocab_size)  # a failure like any other
            return proposal
        except Exception:  # noqa: BLE001 - any drafter bug; the verifier keeps the output exact either way
            if drafter.name not in self._failed_drafters:
                log.exception("drafter %r failed on request %d; that row decodes plainly this step", drafter.name, row.id)
                self._failed_drafters.add(drafter.name)
            row.drafter_failures += 1
            return _EMPTY

    def _finish_request(self, row: _Row) -> None:
        decoder = self.decoder
        self._release(row)
        row.stats.decode_s = decoder._now() - row.started_s - row.stats.prefill_s
        row.stats.new_tokens = len(row.generated)
        decoder.teach(row.drafters, row.generated)
        decoder.report_gauges()
        text = decoder.tokenizer.decode(row.generated, skip_special_tokens=True)
        result = GenerationResult(text=text, token_ids=row.generated, finish_reason=row.stop_reason, stats=row.stats,
                                  steps=row.steps)
        self.results[row.id] = result
        if row.info is not None:
            decoder.observers.notify("on_request_end", row.info, result, None)


def _controller(policy: Policy) -> int | None:
    """What must serve one row at a time: the innermost controller of ``policy`` (an override
    forwards what it observes to the controller it wraps), by identity; None when it learns nothing."""
    while getattr(policy, "inner", None) is not None:
        policy = policy.inner
    return None if policy.stateless else id(policy)


def _overridden(policy: Policy) -> bool:
    return isinstance(policy, OverridePolicy)
