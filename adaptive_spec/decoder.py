"""The speculative decoding loop.

Invariant: the target's KV cache holds every committed token except the last one, the *pending*
token, whose successor has not been scored yet. A step feeds ``[pending] + drafts`` to the
target in one forward pass, which scores the pending token's successor and every draft at once;
the verifier keeps an accepted prefix plus one recovered or bonus token, and the cache is cropped
back to the committed tokens. ``k = 0`` is plain decoding through the very same loop.

That cache, the drafters' caches and the controllers are one request's working state, so a decoder
runs one request at a time (``_OneRequestAtATime``); see ``SpeculativeDecoder`` for what that means
to callers.
"""

from __future__ import annotations

import importlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Generator

import torch

from adaptive_spec.cached_lm import CachedLM
from adaptive_spec.config import GenerationConfig, context_overflow, validate_draft_len
from adaptive_spec.cost_memory import StepCostMemory
from adaptive_spec.drafters.base import Drafter, NoDrafter, Proposal
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.models import LoadedModel
from adaptive_spec.observers import ObserverSet, RequestInfo
from adaptive_spec.prompts import check_prompt_text
from adaptive_spec.result import GenerationResult, GenerationStats
from adaptive_spec.sampling import logits_to_probs, sample
from adaptive_spec.text_pieces import TextPieces
from adaptive_spec.verifier import Verdict, rejection_sample, verify_greedy
from policies.base import Policy
from policies.outcome import PLAIN, Action, StepOutcome
from policies.base import OverridePolicy
from policies.registry import PolicyRegistry
from policies.session import DecodeSession
from policies.shadow import ShadowDrafts
from policies.static import StaticPolicy

log = logging.getLogger(__name__)

_EMPTY = Proposal(tokens=[])


def check_draft_ids(drafter: str, tokens: list[int], vocab_size: int) -> None:
    """Drafted ids must lie in the target's vocabulary: checked before the forward, whose embedding
    would raise for every row of a batch (on CUDA, a device-side assert that breaks the process)."""
    if tokens and not 0 <= min(tokens) <= max(tokens) < vocab_size:
        raise RuntimeError(f"drafter {drafter!r} drafted ids outside the vocabulary [0, {vocab_size}): {tokens[:8]}")

# how often drafters' gauges (what they hold across requests) reach the observers, at most
GAUGE_EVERY_S = 5.0


class SpeculativeDecoder:
    """Target model + drafters + a policy choosing (drafter, k) every step.

    >>> decoder = SpeculativeDecoder(load_model("smollm2"), [NgramDrafter()], StaticPolicy("ngram", 8))  # doctest: +SKIP
    >>> decoder.generate("Repeat: the quick brown fox", max_new_tokens=32).text  # doctest: +SKIP

    Concurrency: ``generate``, ``stream`` and ``add_drafter`` may be called from any number of
    threads; a decoder serves one request at a time and the others wait their turn, so every
    result equals what the request returns alone. ``stream`` takes the decoder at its first
    ``next()`` and holds it until the stream is exhausted, closed (``close()``) or garbage-collected:
    a consumer that stops reading early should close it. Starting another request on the same
    decoder from the thread that holds an open stream raises ``RuntimeError`` instead of waiting for
    ever. For requests in parallel, build one decoder per worker, each with its own drafters and
    policy (or ``PolicyRegistry``): they hold per-request state that only this lock protects.
    """

    def __init__(
        self,
        target: LoadedModel,
        drafters: Iterable[Drafter] = (),
        policy: Policy | PolicyRegistry | None = None,
        chat_template: bool | None = None,
        observers: list | None = None,
    ) -> None:
        self._exclusive = _OneRequestAtATime()
        self.target_model = target
        self.tokenizer = target.tokenizer
        self.target = CachedLM(target.model)
        self.device = self.target.device
        self.drafters: dict[str, Drafter] = {PLAIN: NoDrafter()}
        for drafter in drafters:
            self._add_drafter(drafter)
        # a PolicyRegistry keeps one controller per traffic key, learning across requests
        self.policy: Policy | PolicyRegistry = policy if policy is not None else StaticPolicy(PLAIN, 0)
        has_template = getattr(self.tokenizer, "chat_template", None) is not None
        if chat_template and not has_template:
            raise InvalidParameterError("chat_template", chat_template, f"model {target.name!r} has no chat template")
        self.chat_template = has_template if chat_template is None else chat_template
        self.eos_ids = _eos_ids(target)
        self.observers = ObserverSet(observers)
        # step costs are the engine's, whatever the traffic: cold controllers start from them
        self.cost_memory = StepCostMemory()
        self._gauges_due = 0.0  # monotonic time of the next report_gauges

    def add_drafter(self, drafter: Drafter) -> None:
        with self._exclusive:  # not while a request iterates the drafters
            self._add_drafter(drafter)

    def _add_drafter(self, drafter: Drafter) -> None:
        if drafter.vocab_size is not None and drafter.vocab_size != self.target.vocab_size:
            raise InvalidParameterError(
                "drafter", drafter.name, f"vocabulary size {drafter.vocab_size} differs from the target's {self.target.vocab_size}"
            )
        self.drafters[drafter.name] = drafter
        if drafter.vocab_size is not None:
            # a model drafter's drafts meet the controllers' learned early stop, whose module
            # imports scikit-learn (a second or more on a small CPU) on first use: pay that while
            # loading, not as a stall inside the first request that drafts with this drafter
            importlib.import_module("policies.early_stop")

    # -- prompts -----------------------------------------------------------------------------------

    def encode_prompt(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            check_prompt_text("prompt", prompt)  # non-empty, valid UTF-8: the tokenizer raises deep inside on a lone surrogate
            if self.chat_template:
                encoded = self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
                )
                ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
                return list(ids[0] if ids and isinstance(ids[0], list) else ids)
            return list(self.tokenizer(prompt)["input_ids"])
        ids = list(prompt)
        if not ids:
            raise InvalidParameterError("prompt", prompt, "must contain at least one token")
        vocab = self.target.vocab_size
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise InvalidParameterError("prompt", bad[:5], f"token ids must be integers in [0, {vocab})")
        return ids

    # -- public API --------------------------------------------------------------------------------

    def generate(
        self, prompt: str | list[int], config: GenerationConfig | None = None, *, policy: Policy | None = None,
        key: str = "", force_plain: bool = False, force_drafter: str | None = None, force_k: int | None = None,
        **overrides,
    ) -> GenerationResult:
        """Generate a completion.

        ``overrides`` are GenerationConfig fields (``max_new_tokens=...``). ``key`` selects the
        traffic key's controller when the decoder holds a ``PolicyRegistry``; ``force_plain`` or
        ``force_drafter`` (+ ``force_k``) override its choice for this request only.
        """
        cfg = _config(config, overrides)
        with self._exclusive:
            steps = self._decode(prompt, cfg, self.policy_for(key, policy, force_plain, force_drafter, force_k), key)
            try:
                while True:
                    try:
                        next(steps)
                    except StopIteration as done:
                        return done.value
            finally:
                steps.close()  # observers hear the end of the request while it still holds the decoder

    def stream(
        self, prompt: str | list[int], config: GenerationConfig | None = None, *, policy: Policy | None = None,
        key: str = "", force_plain: bool = False, force_drafter: str | None = None, force_k: int | None = None,
        on_result: Callable[[GenerationResult], None] | None = None, **overrides,
    ) -> Iterator[str]:
        """Yield text as soon as it is accepted. Text that could still become a stop string is held back.

        The stream holds the decoder from its first ``next()`` until it is exhausted, closed or
        garbage-collected (see the class docstring). ``on_result`` receives the request's
        ``GenerationResult`` (stats and steps) once it is complete, before the last piece of text.
        """
        cfg = _config(config, overrides)
        with self._exclusive:
            steps = self._decode(prompt, cfg, self.policy_for(key, policy, force_plain, force_drafter, force_k), key)
            try:
                yield from self._stream_text(steps, cfg, on_result)
            finally:
                steps.close()  # an abandoned stream ends its request before it lets the decoder go

    def _stream_text(self, steps: Generator[list[int], None, GenerationResult], cfg: GenerationConfig,
                     on_result: Callable[[GenerationResult], None] | None = None) -> Iterator[str]:
        pieces = TextPieces(self.tokenizer, cfg.stop_strings)
        while True:
            try:
                tokens = next(steps)
            except StopIteration as done:
                if on_result is not None:
                    on_result(done.value)
                rest = pieces.finish(done.value.text)
                if rest:
                    yield rest
                return
            piece = pieces.add(tokens)
            if piece:
                yield piece
                self._exclusive.resumed()

    def policy_for(self, key: str = "", policy: Policy | None = None, force_plain: bool = False,
                   force_drafter: str | None = None, force_k: int | None = None) -> Policy:
        """The controller for one request: an explicit ``policy``, else the decoder's (per key)."""
        self.check_overrides(force_drafter, force_k)
        base = policy if policy is not None else self.policy  # an empty registry is falsy
        if isinstance(base, PolicyRegistry):
            try:
                return base.for_request(key, force_plain=force_plain, drafter=force_drafter, k=force_k)
            except ValueError as exc:
                raise InvalidParameterError("force", (force_plain, force_drafter, force_k), str(exc)) from exc
        if force_plain:
            return OverridePolicy(base, Action(PLAIN, 0))
        if force_drafter is not None:
            if force_k is None:
                force_k = base.k_for(force_drafter)
                if force_k is None:
                    raise InvalidParameterError("force_k", None, f"needed to force drafter {force_drafter!r} on a {base.name} policy")
            return OverridePolicy(base, Action(force_drafter, force_k))
        return base

    def check_overrides(self, force_drafter: str | None = None, force_k: int | None = None, **_) -> None:
        """A request's overrides refused as ``policy_for`` refuses them, without building its
        controller: the server checks them before it answers, since a streamed answer has already
        said 200 by the time the engine's thread takes the request."""
        if force_drafter is not None and force_drafter not in self.drafters:
            raise InvalidParameterError("force_drafter", force_drafter, f"not loaded; loaded: {', '.join(self.drafters)}")
        if force_k is not None:
            validate_draft_len(force_k)

    # -- one request's pieces, shared with the batched engine (adaptive_spec.batching) ----------------

    def check_fits(self, prompt_ids: list[int], cfg: GenerationConfig) -> None:
        """Prompt + ``max_new_tokens`` must fit the model's context (an error naming the limits)."""
        limit = self.target_model.max_context
        if len(prompt_ids) + cfg.max_new_tokens > limit:
            raise context_overflow(len(prompt_ids), cfg.max_new_tokens, limit)

    def new_generator(self, cfg: GenerationConfig) -> torch.Generator | None:
        """The request's random generator (seeded by ``cfg.seed`` when given); None when greedy."""
        if cfg.greedy:
            return None
        generator = torch.Generator(device=self.device)
        generator.manual_seed(cfg.seed if cfg.seed is not None else secrets.randbits(63))
        return generator

    def first_token(self, logits: torch.Tensor, cfg: GenerationConfig, generator) -> int:
        """The token after the prompt, from the prefill's last logits."""
        return verify_greedy([], logits).next_token if cfg.greedy else int(sample(self._probs(logits, cfg), generator)[0])

    def report_gauges(self) -> None:
        """Tell the observers what the drafters hold across requests (``Drafter.gauges``), at most
        once per ``GAUGE_EVERY_S``: sizing a history walks its index, too slow for every request."""
        if not self.observers:
            return
        now = time.monotonic()
        if now < self._gauges_due:
            return
        self._gauges_due = now + GAUGE_EVERY_S
        values = {}
        for drafter in self.drafters.values():
            try:
                values.update(drafter.gauges())
            except Exception:  # noqa: BLE001 - a gauge is telemetry: it never fails a request
                log.exception("drafter %r failed to report its gauges", drafter.name)
        if values:
            self.observers.notify("on_gauges", self.target_model.name, values)

    def teach(self, drafters: dict[str, Drafter], output: list[int]) -> None:
        """A completed output teaches the drafters that learn across requests (``Drafter.learn``).
        One that fails only misses the lesson: the output is already complete and exact, and in a
        batch the other rows' requests go on."""
        for drafter in drafters.values():
            try:
                drafter.learn(output)
            except Exception:  # noqa: BLE001 - any drafter bug, as a failed draft is
                log.exception("drafter %r failed to learn from a completed output", drafter.name)

    def request_drafters(self, key: str) -> dict[str, Drafter]:
        """The drafters one request of traffic key ``key`` uses (``Drafter.for_request``), reset."""
        drafters = {name: drafter.for_request(key) for name, drafter in self.drafters.items()}
        for drafter in drafters.values():
            drafter.reset()
        return drafters

    def new_session(self, policy: Policy, cfg: GenerationConfig, key: str,
                    drafters: dict[str, Drafter] | None = None) -> DecodeSession:
        """The controller's view of one request: budget, match gate, early stop, shadow drafts."""
        drafters = (self.drafters if drafters is None else drafters).values()
        return DecodeSession(
            policy, cfg.max_new_tokens, key=key, warm_steps=self.cost_memory,
            gated={d.name for d in drafters if d.reports_match_order},
            stoppable={d.name for d in drafters if d.vocab_size},
            shadow=ShadowDrafts([d for d in drafters if d.name != PLAIN and d.vocab_size is None], policy),
        )

    # -- the loop ----------------------------------------------------------------------------------

    def _decode(self, prompt, cfg: GenerationConfig, policy: Policy, key: str) -> Generator[list[int], None, GenerationResult]:
        prompt_ids = self.encode_prompt(prompt)
        if not self.observers:
            return (yield from self._decode_steps(prompt_ids, cfg, policy, key, None))
        request = RequestInfo(model=self.target_model.name, key=key, config=cfg, prompt_tokens=len(prompt_ids),
                              policy=policy.name)
        self.observers.notify("on_request_start", request)
        try:
            result = yield from self._decode_steps(prompt_ids, cfg, policy, key, request)
        except BaseException as exc:
            self.observers.notify("on_request_end", request, None, exc)
            raise
        self.observers.notify("on_request_end", request, result, None)
        return result

    def _decode_steps(self, prompt_ids: list[int], cfg: GenerationConfig, policy: Policy, key: str,
                      request: RequestInfo | None) -> Generator[list[int], None, GenerationResult]:
        self.check_fits(prompt_ids, cfg)
        generator = self.new_generator(cfg)
        drafters = self.request_drafters(key)
        self.target.reset()
        stats = GenerationStats(prompt_tokens=len(prompt_ids))
        records: list[StepOutcome] = []
        stop_reason = None

        # 1. prefill: the target reads the prompt; its last position gives the first new token
        start = self._now()
        logits = self.target.extend(prompt_ids, num_logits=1)  # [1, vocab]
        first = self.first_token(logits, cfg, generator)
        stats.prefill_s = self._now() - start
        context = prompt_ids + [first]
        generated: list[int] = []
        new, stop_reason = self._finish([first], generated, cfg)
        yield new

        session = self.new_session(policy, cfg, key, drafters)
        decode_start = self._now()
        while stop_reason is None:
            outcome, new, stop_reason = self._step(session, drafters, context, generated, cfg, generator)
            stats.add_step(outcome)
            records.append(outcome)
            self.cost_memory.record(outcome)
            if request is not None:
                self.observers.notify("on_step", request, outcome, session.drain_events())
            yield new

        stats.decode_s = self._now() - decode_start
        stats.new_tokens = len(generated)
        self.teach(drafters, generated)
        self.report_gauges()
        text = self.tokenizer.decode(generated, skip_special_tokens=True)
        return GenerationResult(text=text, token_ids=generated, finish_reason=stop_reason, stats=stats, steps=records)

    def _step(self, session: DecodeSession, drafters: dict[str, Drafter], context: list[int], generated: list[int],
              cfg: GenerationConfig, generator) -> tuple[StepOutcome, list[int], str | None]:
        """One decode step; extends ``context`` and ``generated``. Returns the step's record, the
        tokens it emitted and the stop reason (None: go on)."""
        # 1. ask the controller (through the session: budget cap, match gate, early stop)
        plan = session.plan(len(generated), context)
        drafter = drafters.get(plan.drafter)
        if drafter is None:
            raise InvalidParameterError("drafter", plan.drafter, f"not loaded; loaded: {', '.join(self.drafters)}")
        validate_draft_len(plan.action.k)

        # 2. draft, and let the gate keep the prefix worth verifying for the match it found
        t0 = self._now()
        proposal = _EMPTY
        if plan.k > 0:
            if plan.early_stop is None:
                proposal = drafter.propose(context, plan.k, cfg, generator)
            else:
                proposal = drafter.propose(context, plan.k, cfg, generator, early_stop=plan.early_stop)
        kept = session.cut(plan, len(proposal.tokens), proposal.match_order, proposal.match_ambiguous)
        drafts = proposal.tokens[:kept]
        check_draft_ids(drafter.name, drafts, self.target.vocab_size)
        t1 = self._now()

        # 3. verify: one target pass over the pending token and every draft
        # a real check, not an assert (``python -O`` drops those): a cache holding other tokens
        # than the context would be verified against and yield wrong text without any error
        if self.target.tokens != context[:-1]:
            raise RuntimeError(
                f"target cache out of step with the context: it holds {len(self.target.tokens)} tokens, "
                f"the context has {len(context) - 1} before the pending token")
        logits = self.target.extend([context[-1], *drafts], num_logits=len(drafts) + 1)  # [k+1, vocab]
        verdict = self._verify(drafts, proposal, logits, cfg, generator)

        # 4. roll back the rejected drafts' keys and values: cache = context + accepted drafts
        self.target.rollback(len(context) + verdict.num_accepted)
        t2 = self._now()

        # 5. emit accepted + recovered/bonus tokens, stopping at EOS, stop strings or the budget
        step_tokens = [*drafts[: verdict.num_accepted], verdict.next_token]
        context.extend(step_tokens)
        new, stop_reason = self._finish(step_tokens, generated, cfg)

        # 6. record, and let the controller learn
        outcome = session.finish(
            plan, len(drafts), verdict.num_accepted, len(new), t1 - t0, t2 - t1, len(context) - len(step_tokens),
            first_token_right=bool(proposal.tokens) and proposal.tokens[0] == verdict.next_token,
            match_order=proposal.match_order, match_ambiguous=proposal.match_ambiguous,
            confidences=proposal.confidences[: len(drafts)] if proposal.confidences else None,
            entropies=proposal.entropies[: len(drafts)] if proposal.entropies else None,
            context=context,
        )
        return outcome, new, stop_reason

    def _verify(self, drafts, proposal: Proposal, logits, cfg: GenerationConfig, generator) -> Verdict:
        if cfg.greedy:
            return verify_greedy(drafts, logits)
        q = proposal.probs[: len(drafts)] if proposal.probs is not None else None
        return rejection_sample(drafts, q, self._probs(logits, cfg), generator)

    @staticmethod
    def _probs(logits: torch.Tensor, cfg: GenerationConfig) -> torch.Tensor:
        return logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)

    def _finish(self, step_tokens: list[int], generated: list[int], cfg: GenerationConfig) -> tuple[list[int], str | None]:
        """Append the step's tokens to ``generated`` up to the first stop; return them and the reason."""
        new: list[int] = []
        reason = None
        for token in step_tokens:
            new.append(token)
            generated.append(token)
            if not cfg.ignore_eos and token in self.eos_ids:
                reason = "eos"
                break
            if len(generated) >= cfg.max_new_tokens:
                reason = "length"
                break
        if cfg.stop_strings:
            keep = self._stop_string_cut(generated, len(new), cfg.stop_strings)
            if keep is not None:
                del new[len(new) - (len(generated) - keep) :]
                del generated[keep:]
                reason = "stop"
        return new, reason

    def _stop_string_cut(self, generated: list[int], num_new: int, stops: tuple[str, ...]) -> int | None:
        """Shortest prefix length of ``generated`` whose text contains a stop string, if any.

        Earlier steps were already checked, so only prefixes ending in this step's tokens can match.
        """
        def hit(m: int) -> bool:
            text = self.tokenizer.decode(generated[:m], skip_special_tokens=True)
            return any(stop in text for stop in stops)

        if not hit(len(generated)):
            return None
        for m in range(len(generated) - num_new + 1, len(generated) + 1):
            if hit(m):
                return m
        return len(generated)

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


class _OneRequestAtATime:
    """The decoder's lock, held by one request from its start to its end (a stream's whole life).

    A plain ``Lock``, not an ``RLock``: a stream abandoned by one thread may be garbage-collected,
    and so released, by another. The thread that last ran the holding request is remembered, so
    that it starting a second request gets an error rather than waiting on itself for ever.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None  # ident of the thread that last ran the holding request

    def __enter__(self) -> "_OneRequestAtATime":
        me = threading.get_ident()
        if self._holder == me:  # only this thread writes its own ident here, so no race
            raise RuntimeError(
                "this thread already holds the decoder (an unfinished stream, or a call from inside a "
                "request's observer): exhaust or close() the stream before starting another request on it")
        self._lock.acquire()
        self._holder = me
        return self

    def resumed(self) -> None:
        """A stream was resumed, possibly by another thread than the one that started it."""
        self._holder = threading.get_ident()

    def __exit__(self, *exc) -> None:
        self._holder = None
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


def _config(config: GenerationConfig | None, overrides: dict) -> GenerationConfig:
    if config is None:
        return GenerationConfig(**overrides)
    return replace(config, **overrides) if overrides else config


def _eos_ids(target: LoadedModel) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(target.model, "generation_config", None), target.tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
    return frozenset(ids)
