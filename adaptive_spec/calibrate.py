"""Measure the engine on this device and write a simulator profile (``adaptive-spec-profile/1``).

What is timed, each the median of ``repeats`` runs after a warm-up, every step shape of every kind
below but the drafters' timed in the same interleaved passes (``time_steps``):

- prefill: a fresh cache reading prompts of several lengths;
- verify: one target forward of ``k + 1`` tokens on top of a cache of ``context_len`` tokens, plus
  the greedy check and the KV rollback - everything of a step but drafting; with ``batch_sizes``,
  also the batched engine's step (``BatchedDecoder``): one forward over ``batch`` rows, padded
  (every row ``k + 1`` tokens wide) and packed (some rows drafting beside one-token rows), each
  row's check and rollback, and the cache compaction as the engine runs it;
- draft: each drafter's seconds per call and per proposed token;
- acceptance: per request class (the ``kind`` of the workload prompts) and drafter, the
  conditional per-position acceptance ``P(position i accepted | 0..i-1 accepted)`` and the hit
  rate (steps on which the drafter proposed anything), from real greedy generations; for the
  n-gram drafter also per kind of match (order, ambiguous): its share of lookups and its own
  profile, which the simulator uses to drive the adaptive policy's match gate (the suffix drafter's
  kinds are its bucketed match lengths; it drafts from the answers to the prompts before each one,
  in file order, as a service seeing them in that order would). With
  ``per_prompt``, every prompt is also a class of its own, named by its ``id``: requests of one
  kind differ (an open-ended answer that loops drafts like a copy), and a trace that records which
  prompt each request sent can be replayed with each request's own acceptance.

The format is documented in ``simulator/PROFILE.md``.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
import time
from collections import defaultdict
from datetime import datetime, timezone
from typing import Callable, Hashable, Sequence

import torch

from adaptive_spec.bench import Prompt, check_prompts_fit
from adaptive_spec.cached_lm import CachedLM
from adaptive_spec.config import GenerationConfig
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.verifier import verify_greedy
from policies.outcome import PLAIN
from policies.static import StaticPolicy

PREFILL_LENGTHS = (16, 32, 64, 128, 256, 512)
VERIFY_TOKENS = (1, 2, 3, 5, 9, 17)  # k + 1 for k = 0, 1, 2, 4, 8, 16
CONTEXT_LENGTHS = (64, 256, 512)
BATCH_VERIFY_TOKENS = (1, 2, 3, 5, 9)  # k + 1 up to 8: wider drafts do not pay once rows share the forward
BATCH_CONTEXT_LENGTHS = (64, 256, 512)
# packed forwards: (k + 1, rows drafting) beside one-token rows; one row drafting long or short, and
# half the rows drafting, where the tokens packing leaves out are fewest
PACKED_STEPS = ((9, 1), (3, 1), (9, "half"))
RIDE_TOKENS = (16, 64, 256)  # prompt chunks riding in a batched step (at most the server's default chunk)
RIDE_CONTEXT = 256  # the decoding rows' context while a chunk rides
ACCEPTANCE_K = 8  # long drafts, so every position up to 8 gets counted
MIN_TESTED = 5  # drafts that reached a position before its acceptance is estimated from them


def _median_time(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up: first calls of a shape pay for kernel selection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _interleaved_medians(runs: Sequence[tuple[Hashable, Callable[[], None]]], repeats: int,
                         seed: int = 0) -> dict[Hashable, float]:
    """Each run's median of ``repeats`` timings, every pass over the runs in a fresh shuffled order
    (after one warm-up call each). The machine's speed swings within seconds: timed back to back,
    each shape's repeats shared one spell of it, and a slow spell made a whole block of shapes (one
    batch size, one context) look dear alike, which a cost fit over the shapes reads as the shapes'
    own cost. Interleaved, a spell lands on shapes at random. Each run must leave the state it found."""
    for _, fn in runs:
        fn()  # warm-up: first calls of a shape pay for kernel selection
    times: dict[Hashable, list[float]] = defaultdict(list)
    order, rng = list(runs), random.Random(seed)
    for _ in range(repeats):
        rng.shuffle(order)
        for key, fn in order:
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(seconds) for key, seconds in times.items()}


def _filler(length: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(length)
    return torch.randint(100, min(vocab, 20000), (length,), generator=g).tolist()


Run = tuple[Hashable, Callable[[], None]]


def time_steps(decoder: SpeculativeDecoder, repeats: int, batch_sizes: Sequence[int] = ()) -> dict[str, list[dict]]:
    """Prefill, one row's verify and, with ``batch_sizes``, the batched engine's steps and the
    prompts riding in them, every shape of every kind in the same interleaved passes
    (``_interleaved_medians``): a spell of the machine's speed that fell on one kind's phase made
    that kind's level (a prefill against a step) as wrong as a block of shapes. Each shape keeps a
    cache of its own, so the shapes can run in any order."""
    runs = _prefill_runs(decoder) + _verify_runs(decoder)
    if batch_sizes:
        runs += _batched_runs(decoder, batch_sizes) + _ride_runs(decoder, batch_sizes)
    timed = _interleaved_medians(runs, repeats)
    samples: dict[str, list[dict]] = {"prefill": [], "verify": [], "ride": []}
    for key, _ in runs:
        kind, *shape = key
        if kind == "prefill":
            samples["prefill"].append({"prompt_tokens": shape[0], "seconds": timed[key]})
        elif kind == "verify":
            context, tokens = shape
            samples["verify"].append({"tokens": tokens, "context_len": context, "batch": 1, "seconds": timed[key]})
        elif kind == "batched":
            batch, context, layout, tokens, drafting = shape
            samples["verify"].append({"tokens": tokens, "context_len": context, "batch": batch,
                                      **({"packed": drafting} if layout == "packed" else {}), "seconds": timed[key]})
        elif kind == "ride" and shape[1]:
            batch, tokens = shape
            samples["ride"].append({"prompt_tokens": tokens, "batch": batch, "seconds": timed[key],
                                    "alone_s": timed["ride", batch, 0]})
    return samples


def _prefill_runs(decoder: SpeculativeDecoder) -> list[Run]:
    """A fresh cache reading prompts of several lengths (a cache of their own)."""
    lm = CachedLM(decoder.target.model)
    runs = []
    for n in PREFILL_LENGTHS:
        ids = _filler(n, lm.vocab_size)

        def run(ids=ids):
            lm.reset()
            lm.extend(ids)

        runs.append((("prefill", n), run))
    return runs


def _verify_runs(decoder: SpeculativeDecoder) -> list[Run]:
    """One row's step but drafting, on a cache of ``context`` tokens (one per context)."""
    runs = []
    for context in CONTEXT_LENGTHS:
        lm = CachedLM(decoder.target.model)
        lm.extend(_filler(context, lm.vocab_size))
        for tokens in VERIFY_TOKENS:
            step = _filler(tokens, lm.vocab_size)

            def run(lm=lm, step=step, tokens=tokens, context=context):
                logits = lm.extend(step, num_logits=tokens)
                verify_greedy(step[1:], logits)
                lm.rollback(context)

            runs.append((("verify", context, tokens), run))
    return runs


def _batched_runs(decoder: SpeculativeDecoder, batch_sizes: Sequence[int]) -> list[Run]:
    """The batched engine's step but drafting, on ``SlotCache`` rows of ``context_len`` tokens each (a
    cache per batch size and context): padded, every row ``tokens`` wide, and packed
    (``policies.batch_layout``), ``packed`` rows ``tokens`` wide beside one-token rows."""
    from adaptive_spec.batching import SlotCache

    vocab = decoder.target.vocab_size
    runs = []
    for batch in batch_sizes:
        packed_steps = sorted({(t, batch // 2 if d == "half" else d) for t, d in PACKED_STEPS})
        for context in BATCH_CONTEXT_LENGTHS:
            slots = SlotCache(decoder.target.model)
            for row in range(batch):
                slots.add(_filler(context + row, vocab)[:context])
            shapes = [("padded", tokens, batch) for tokens in BATCH_VERIFY_TOKENS]
            shapes += [("packed", t, d) for t, d in packed_steps if 0 < d < batch] if slots.packs_masks else []
            for layout, tokens, drafting in shapes:
                step = [_filler(tokens + row, vocab)[:tokens if row < drafting else 1] for row in range(batch)]
                runs.append((("batched", batch, context, layout, tokens, drafting),
                             functools.partial(_batched_step, slots, layout, step, context)))
    return runs


def _batched_step(slots, layout: str, step: list[list[int]], context: int, riders=()) -> None:
    """One batched step but drafting, as the engine runs it: the forward, each row's check and
    rollback to ``context`` tokens, the compaction; the cache is left as it was."""
    slots.layout = layout
    logits = slots.extend(step, riders)
    for row, tokens in enumerate(step):
        verify_greedy(tokens[1:], logits[row])
        slots.rollback(row, context)
    slots.compact()


def _ride_runs(decoder: SpeculativeDecoder, batch_sizes: Sequence[int]) -> list[Run]:
    """What a prompt chunk riding in the batched engine's step adds to it (``SlotCache`` riders): the
    step of ``batch`` one-token rows with a chunk of ``prompt_tokens`` and without (``tokens`` 0),
    a cache per batch size; nothing where the forward cannot carry riders."""
    from adaptive_spec.batching import SlotCache
    from adaptive_spec.batching.slots import Prefill

    if not SlotCache(decoder.target.model).carries_riders:
        return []
    vocab = decoder.target.vocab_size
    runs = []
    for batch in batch_sizes:
        slots = SlotCache(decoder.target.model)
        for row in range(batch):
            slots.add(_filler(RIDE_CONTEXT + row, vocab)[:RIDE_CONTEXT])
        step, layout = [[t] for t in _filler(batch, vocab)], slots.layout
        runs.append((("ride", batch, 0), functools.partial(_batched_step, slots, layout, step, RIDE_CONTEXT)))
        for tokens in RIDE_TOKENS:
            prompt = _filler(tokens, vocab)
            runs.append((("ride", batch, tokens),
                         lambda slots=slots, step=step, layout=layout, prompt=prompt, tokens=tokens:
                         _batched_step(slots, layout, step, RIDE_CONTEXT, [(Prefill(prompt), tokens)])))
    return runs


def time_drafters(decoder: SpeculativeDecoder, context_ids: list[int], repeats: int) -> dict:
    cfg = GenerationConfig(max_new_tokens=16)
    out = {}
    for name, drafter in decoder.drafters.items():
        if name == "none":
            continue
        # per call at k = 1 and per token from the slope between k = 1 and k = 8
        by_k = {}
        for k in (1, 8):
            # read the context once: later calls roll back to it and time only the draft itself
            drafter.reset()
            drafter.propose(context_ids, 1, cfg, None)

            def incremental():
                drafter.propose(context_ids, k, cfg, None)

            by_k[k] = _median_time(incremental, repeats)
        per_token = max((by_k[8] - by_k[1]) / 7, 0.0)
        out[name] = {"per_token_s": per_token, "per_call_s": max(by_k[1] - per_token, 0.0),
                     "batched": name not in ("ngram", "suffix")}  # lookups run once per request
    return out


def measure_acceptance(decoder: SpeculativeDecoder, prompts: list[Prompt], max_new_tokens: int,
                       per_prompt: bool = False, streams: dict | None = None,
                       progress: Callable[[str], None] | None = None) -> dict:
    """Per class and drafter: conditional per-position acceptance and hit rate; the classes are the
    prompts' kinds, and with ``per_prompt`` also their ids. ``streams``, when given, receives each
    prompt's tokens and its greedy answer's by prompt id (``record_streams``' form), from the same runs."""
    if per_prompt:
        check_per_prompt(prompts)
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    counts: dict = defaultdict(lambda: {"tested": [0] * ACCEPTANCE_K, "accepted": [0] * ACCEPTANCE_K, "steps": 0, "hits": 0})
    # n-gram drafts, split by the kind of match (order, ambiguous) the engine's match gate sees
    kinds: dict = defaultdict(lambda: {"tested": [0] * ACCEPTANCE_K, "accepted": [0] * ACCEPTANCE_K, "steps": 0, "hits": 0})
    for index, prompt in enumerate(prompts, 1):
        if progress is not None:  # the longest part of a calibration: a generation per prompt and drafter
            progress(f"acceptance [{index}/{len(prompts)}] {prompt.id}")
        for name in decoder.drafters:
            if name == "none":
                continue
            # a traffic key per drafter: the suffix drafter's history then holds its own runs' answers
            # to the prompts before this one, never another drafter's answer to this very prompt
            result = decoder.generate(prompt.prompt, cfg, policy=StaticPolicy(name, ACCEPTANCE_K), key=f"calibrate:{name}")
            if streams is not None and prompt.id not in streams:  # greedy, lossless: any drafter's answer is plain's
                streams[prompt.id] = {"prompt": decoder.encode_prompt(prompt.prompt), "output": list(result.token_ids)}
            classes = (prompt.kind, prompt.id) if per_prompt else (prompt.kind,)
            for step in result.steps:
                if step.k < ACCEPTANCE_K:
                    continue  # capped by the end of the budget: positions beyond were never asked
                counters = []
                for cls in classes:
                    c = counts[(cls, name)]
                    c["steps"] += 1
                    if step.proposed == 0:
                        continue
                    c["hits"] += 1
                    counters.append(c)
                    if step.match_order is not None:
                        kind = kinds[(cls, name, step.match_order, step.match_ambiguous)]
                        kind["hits"] += 1
                        counters.append(kind)
                # positions 0..num_accepted were tested (the first rejection included). A draft
                # shorter than asked (the match's continuation ran out) counts as a rejection at
                # its end, as in the policy: what matters is what asking for k tokens yields, and
                # the simulator draws whole drafts of k from this profile
                for counter in counters:
                    for i in range(min(step.num_accepted + 1, step.k)):
                        counter["tested"][i] += 1
                        counter["accepted"][i] += i < step.num_accepted
    parent = {p.id: p.kind for p in prompts} if per_prompt else {}
    out: dict = defaultdict(dict)
    # kinds first: a prompt's own class borrows its kind's estimates where it has too few drafts
    for (cls, name), c in sorted(counts.items(), key=lambda item: item[0][0] in parent):
        base = out.get(parent.get(cls), {}).get(name, {})  # {} for a kind
        per_position = _per_position(c, base.get("per_position", [])) or [0.0]
        entry = {"per_position": per_position}
        if c["steps"]:
            entry["hit_rate"] = round(c["hits"] / c["steps"], 4)
        base_matches = {(m["order"], m["ambiguous"]): m["per_position"] for m in base.get("matches", [])}
        matches = [
            # too few drafts of a kind of match: the kind's estimate for it, else the class's profile
            {"order": order, "ambiguous": ambiguous, "share": _share(m["hits"], c["steps"]),
             "per_position": _per_position(m, base_matches.get((order, ambiguous), [])) or per_position}
            for (k, n, order, ambiguous), m in sorted(kinds.items()) if (k, n) == (cls, name) and c["steps"]
        ]
        if matches:
            entry["matches"] = matches
        out[cls][name] = entry
    # a prompt none of whose steps could be counted (its answer ended before a full draft) still
    # gets a class, its kind's: a trace that sent it must replay
    for prompt_id, kind in parent.items():
        for name, entry in out.get(kind, {}).items():
            out[prompt_id].setdefault(name, entry)
    return dict(out)


def record_streams(decoder: SpeculativeDecoder, prompts: list[Prompt], max_new_tokens: int) -> dict:
    """Each prompt's token ids and its greedy answer's (plain decoding), by prompt id: a profile's
    ``streams``, on which the simulator runs prompt lookup as the engine does."""
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    encoded = [decoder.encode_prompt(p.prompt) for p in prompts]
    check_prompts_fit(decoder, prompts, encoded, cfg)
    return {p.id: {"prompt": ids, "output": list(decoder.generate(ids, cfg, policy=StaticPolicy(PLAIN, 0)).token_ids)}
            for p, ids in zip(prompts, encoded)}


def check_per_prompt(prompts: list[Prompt], source: object = "the prompts") -> None:
    """With a class per prompt id beside the kinds, no id may also be a kind."""
    clash = sorted({p.id for p in prompts} & {p.kind for p in prompts})
    if clash:
        raise InvalidParameterError("per_prompt", True, f"prompt id {clash[0]!r} in {source} is also a kind "
                                    "(the classes would mix)")


def _share(hits: int, steps: int) -> float:
    """``hits / steps`` rounded down to 4 decimals: rounded to nearest, a class's shares could add up
    to more than 1, which the profile loader refuses.

    >>> _share(1, 3), _share(2, 3)
    (0.3333, 0.6666)
    """
    return math.floor(hits / steps * 10_000) / 10_000


def _per_position(c: dict, fallback: Sequence[float] = ()) -> list[float]:
    """Conditional acceptance per position while a position was tested often enough; from the first
    that was not, ``fallback``'s values (or nothing: the simulator repeats the last estimate)."""
    per_position = []
    for tested, accepted in zip(c["tested"], c["accepted"]):
        if tested < MIN_TESTED:
            break
        per_position.append(round(accepted / tested, 4))
    return per_position + list(fallback[len(per_position):])


def calibrate(decoder: SpeculativeDecoder, prompts: list[Prompt], repeats: int = 5, max_new_tokens: int = 64,
              progress: Callable[[str], None] | None = None, per_prompt: bool = False,
              batch_sizes: Sequence[int] = ()) -> dict:
    say = progress or (lambda _: None)
    # the acceptance pass comes last: a prompt that does not fit fails now, not after the timing
    check_prompts_fit(decoder, prompts, [decoder.encode_prompt(p.prompt) for p in prompts],
                      GenerationConfig(max_new_tokens=max_new_tokens))
    say("prefill and verify steps" + (f", batched ({', '.join(map(str, batch_sizes))} rows) and riding prompts"
                                      if batch_sizes else "") + f": {repeats} interleaved passes")
    timed = time_steps(decoder, repeats, batch_sizes)
    prefill, verify, ride = timed["prefill"], timed["verify"], timed["ride"]
    say("drafters")
    context = decoder.encode_prompt(prompts[0].prompt)
    draft = time_drafters(decoder, context, repeats)
    say("acceptance")
    streams: dict | None = {} if per_prompt else None  # a class per prompt: its tokens too
    acceptance = measure_acceptance(decoder, prompts, max_new_tokens, per_prompt, streams, progress=say)
    decoder.target.reset()
    return {
        "format": "adaptive-spec-profile/1",
        "metadata": {
            "model": decoder.target_model.name,
            "device": str(decoder.device),
            "dtype": str(next(decoder.target.model.parameters()).dtype).replace("torch.", ""),
            "torch_threads": torch.get_num_threads(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "engine": "adaptive-spec calibrate",
            "illustrative": False,
            # how a batched forward is priced: as BatchedDecoder runs it, padded or packed
            **({"batched_forward": "padded"} if batch_sizes else {}),
        },
        "prefill": prefill,
        "verify": verify,
        **({"ride": ride} if ride else {}),
        "draft": draft,
        "acceptance": acceptance,
        **({"streams": streams} if streams else {}),
    }
