"""A batch's verify forward, padded against packed: what one row's draft costs the other rows.

A padded forward scores ``rows x width`` tokens, where ``width`` is the widest row: one row
verifying a draft of ``k`` makes every row's step ``k + 1`` tokens wide, so rows that draft nothing
(open-ended requests, the tail of the latency distribution) pay for it. Two packed forms score
only the tokens each row has, the rows' new tokens one after another in a single sequence:

- *dense packed* (transformers' own forward, a 4-D mask and per-token positions; no engine code):
  the rows' histories side by side in one cache, every token attending over all of them through a
  mask that keeps its own row's history and earlier new tokens only;
- *dense packed, copied*: the same, but starting from the rows' caches in the padded layout and
  laying them side by side first;
- *engine before*: the engine's packed step as it was before it spread the tokens back into rows
  (``before_step``, its code kept here): dense packed, copied, with the step's mask built and its
  new keys and values put back into the rows' slots;
- *engine packed* (``adaptive_spec.batching.SlotCache``): the tokens go through the model packed,
  but attention spreads them back into their rows over the rows' own cache, as the padded forward
  attends; nothing is copied.

For each batch size and context: one-token rows, then ``drafting`` rows verifying ``k`` drafts
beside one-token rows, padded and in both packed forms, interleaved over ``--rounds``. Each packed
form is checked against the padded forward: the largest logit difference and whether every
position's argmax agrees (each row's history is its own random text).

    python -m benchmarks.packed_forward --out benchmarks/results/packed_forward.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers

from adaptive_spec.batching import SlotCache
from adaptive_spec.models import load_model


def crop(cache, length: int) -> None:
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers 5.x: a negative count removes that many tokens


class Batch:
    """``rows`` histories of ``context`` tokens, cached both ways: padded (one row each) and packed."""

    def __init__(self, model, rows: int, context: int, generator: torch.Generator) -> None:
        self.model, self.rows, self.context = model, rows, context
        # transformers 5.x renamed past_key_values -> cache (as adaptive_spec.cached_lm does, accept either)
        self.kwarg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.history = random_tokens(model, (rows, context), generator)
        with torch.inference_mode():
            self.padded_cache = model(input_ids=self.history, use_cache=True).past_key_values
            # each row's history sees only itself: a block-diagonal causal mask, positions restarting per row
            block = torch.tril(torch.ones(context, context, dtype=torch.bool))
            mask = torch.block_diag(*[block] * rows)[None, None]
            self.packed_cache = model(input_ids=self.history.reshape(1, -1), use_cache=True,
                                      attention_mask=_additive(mask, model.dtype),
                                      position_ids=torch.arange(context).repeat(rows)[None]).past_key_values

    def padded(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [rows, width, vocab] of ``tokens`` [rows, width], one padded forward."""
        width = tokens.shape[1]
        with torch.inference_mode():
            logits = self.model(input_ids=tokens, use_cache=True, **{self.kwarg: self.padded_cache},
                                attention_mask=torch.ones(self.rows, self.context + width, dtype=torch.long),
                                position_ids=torch.arange(self.context, self.context + width).expand(self.rows, width)
                                ).logits
        crop(self.padded_cache, self.context)
        return logits

    def copied(self, tokens: torch.Tensor, widths: list[int]) -> list[torch.Tensor]:
        """``packed`` from the padded caches: each layer's rows laid side by side first (a copy)."""
        side_by_side = self.packed_cache
        past = self.rows * self.context
        for mine, theirs in zip(side_by_side.layers, self.padded_cache.layers):
            mine.keys, mine.values = (t[:, :, :self.context].transpose(0, 1).reshape(1, t.shape[1], past, t.shape[3])
                                      for t in (theirs.keys, theirs.values))
        return self.packed(tokens, widths)

    def engine(self) -> "EngineRows":
        return EngineRows(self.model, self.history)

    def packed(self, tokens: torch.Tensor, widths: list[int]) -> list[torch.Tensor]:
        """Per row, logits [widths[r], vocab] of its first ``widths[r]`` tokens, one packed forward."""
        n, past = sum(widths), self.rows * self.context
        mask = torch.zeros(1, 1, n, past + n, dtype=torch.bool)
        ids, positions, start = [], [], 0
        for row, w in enumerate(widths):
            mask[0, 0, start:start + w, row * self.context:(row + 1) * self.context] = True
            mask[0, 0, start:start + w, past + start:past + start + w] = torch.tril(torch.ones(w, w, dtype=torch.bool))
            ids.append(tokens[row, :w])
            positions += range(self.context, self.context + w)
            start += w
        with torch.inference_mode():
            logits = self.model(input_ids=torch.cat(ids)[None], use_cache=True, **{self.kwarg: self.packed_cache},
                                attention_mask=_additive(mask, self.model.dtype),
                                position_ids=torch.tensor([positions])).logits[0]
        crop(self.packed_cache, past)
        return list(logits.split(widths))


class EngineRows:
    """The same histories in the batched engine's cache; each forward starts from them again."""

    def __init__(self, model, history: torch.Tensor) -> None:
        self.slots = SlotCache(model, layout="packed")
        for row in history.tolist():
            self.slots.add(row)
        self.saved = [(layer.keys, layer.values) for layer in self.slots.cache.layers]
        self.valid, self.tokens = self.slots.valid.clone(), [list(t) for t in self.slots.tokens]

    def packed(self, tokens: torch.Tensor, widths: list[int], before: bool = False) -> list[torch.Tensor]:
        """Per row, logits [widths[r], vocab] of its first ``widths[r]`` tokens, the engine's packed
        forward (``before``: as it was, ``before_step``)."""
        inputs = [tokens[row, :w].tolist() for row, w in enumerate(widths)]
        out = before_step(self.slots, inputs) if before else self.slots.extend(inputs)
        for layer, (keys, values) in zip(self.slots.cache.layers, self.saved):  # the step's slots dropped
            layer.keys, layer.values = keys, values
        self.slots.valid, self.slots.tokens = self.valid.clone(), [list(t) for t in self.tokens]
        return out


def before_step(slots: SlotCache, inputs: list[list[int]]) -> list[torch.Tensor]:
    """The engine's packed step before it spread the tokens back into rows (its code as it was):
    the rows' caches laid side by side, a dense 4-D mask, the new keys and values put back."""
    from transformers import DynamicCache

    rows, width = slots.rows, max(len(t) for t in inputs)
    widths = [len(tokens) for tokens in inputs]
    total, past = sum(widths), rows * slots.slots
    see = torch.zeros(1, 1, total, past + total, dtype=torch.bool)
    positions, start = [], 0
    for row, w in enumerate(widths):
        see[0, 0, start:start + w, row * slots.slots:(row + 1) * slots.slots] = slots.valid[row]
        see[0, 0, start:start + w, past + start:past + start + w] = torch.ones(w, w, dtype=torch.bool).tril()
        positions += range(len(slots.tokens[row]), len(slots.tokens[row]) + w)
        start += w
    dtype = slots.cache.layers[0].keys.dtype
    mask = torch.zeros(see.shape, dtype=dtype).masked_fill(~see, torch.finfo(dtype).min)
    side_by_side = DynamicCache()
    for index, layer in enumerate(slots.cache.layers):
        keys, values = (t.transpose(0, 1).reshape(1, t.shape[1], past, t.shape[3]) for t in (layer.keys, layer.values))
        side_by_side.update(keys[:, :, :0], values[:, :, :0], index)
        side_by_side.layers[index].keys, side_by_side.layers[index].values = keys, values
    ids = torch.tensor([[t for tokens in inputs for t in tokens]], dtype=torch.long)
    with torch.inference_mode():
        out = slots.model(input_ids=ids, attention_mask=mask, position_ids=torch.tensor([positions]), use_cache=True,
                          **{slots._cache_kwarg: side_by_side})
        starts = torch.tensor([0] + widths[:-1]).cumsum(0)
        step = torch.arange(width)
        fits = step[None, :] < torch.tensor(widths)[:, None]
        place = torch.where(fits, starts[:, None] + step[None, :], 0)
        for mine, theirs in zip(slots.cache.layers, side_by_side.layers):
            for name in ("keys", "values"):
                new = getattr(theirs, name)[0, :, past:]
                block = new[:, place.flatten()].reshape(new.shape[0], rows, width, new.shape[2]).transpose(0, 1)
                setattr(mine, name, torch.cat([getattr(mine, name), block], dim=2))
    return list(out.logits[0].split(widths))


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


def random_tokens(model, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    # past the special tokens at the bottom of a real vocabulary
    vocab = model.config.vocab_size
    return torch.randint(min(100, vocab // 2), min(10_000, vocab), shape, generator=generator)


def measure(model, rows: int, context: int, k: int, rounds: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    batch = Batch(model, rows, context, generator)
    tokens = random_tokens(model, (rows, k + 1), generator)
    drafting = sorted({1, rows // 2, rows})
    cases = {"padded, 1 token a row": lambda: batch.padded(tokens[:, :1]),
             f"padded, {k + 1} tokens a row": lambda: batch.padded(tokens)}
    widths = {0: [1] * rows}
    for d in drafting:
        widths[d] = [k + 1] * d + [1] * (rows - d)
    engine = batch.engine()
    for d, w in widths.items():
        cases[f"dense packed, {d} of {rows} rows drafting"] = (lambda w=w: batch.packed(tokens, w))
    for d, w in widths.items():
        if 0 < d < rows:  # (all rows one wide, or all as wide: the engine pads, nothing to leave out)
            cases[f"dense packed, copied, {d} of {rows} rows drafting"] = (lambda w=w: batch.copied(tokens, w))
            cases[f"engine before, {d} of {rows} rows drafting"] = (lambda w=w: engine.packed(tokens, w, before=True))
            cases[f"engine packed, {d} of {rows} rows drafting"] = (lambda w=w: engine.packed(tokens, w))
    # each packed form against the padded forward, row by row (drafting rows first: all positions compared)
    wide = batch.padded(tokens)
    checks = {}
    before = lambda t, w: engine.packed(t, w, before=True)  # noqa: E731
    for form, run in (("dense", batch.packed), ("engine before", before), ("engine", engine.packed)):
        agree, worst = True, 0.0
        for d, w in widths.items():
            if form.startswith("engine") and not 0 < d < rows:
                continue
            for row, logits in enumerate(run(tokens, w)):
                reference = wide[row, :w[row]]
                worst = max(worst, float((logits - reference).abs().max()))
                agree &= bool(torch.equal(logits.argmax(-1), reference.argmax(-1)))
        checks[form] = {"max_abs_logit_diff": worst, "argmax_agrees": agree}
    seconds = {name: [] for name in cases}
    for fn in cases.values():  # warm-up: the first call of each shape picks kernels
        fn()
    for r in range(rounds):
        names = list(cases)
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotated, so drifts hit every case alike
            start = time.perf_counter()
            cases[name]()
            seconds[name].append(time.perf_counter() - start)
    plain = statistics.median(seconds["padded, 1 token a row"])
    return {"rows": rows, "context": context, "k": k, "checks": checks,
            "max_abs_logit_diff": max(c["max_abs_logit_diff"] for c in checks.values()),
            "argmax_agrees": all(c["argmax_agrees"] for c in checks.values()),
            "cases": [{"case": name, "tokens": _tokens(name, rows, k, widths), "median_ms": 1000 * statistics.median(s),
                       "vs_padded_plain": statistics.median(s) / plain, "seconds": s}
                      for name, s in seconds.items()]}


def _tokens(name: str, rows: int, k: int, widths: dict[int, list[int]]) -> int:
    if name.startswith("padded"):
        return rows * (1 if "1 token" in name else k + 1)
    return sum(widths[int(name.split(", ")[-1].split(" of")[0])])


def table(results: list[dict]) -> str:
    lines = ["| rows | context | forward | tokens scored | median ms | × padded one-token |", "|---|---|---|---|---|---|"]
    for block in results:
        for case in block["cases"]:
            lines.append(f"| {block['rows']} | {block['context']} | {case['case']} | {case['tokens']} | "
                         f"{case['median_ms']:.1f} | {case['vs_padded_plain']:.2f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="4,8", help="comma-separated batch sizes")
    parser.add_argument("--context", default="128", help="tokens of history per row, comma-separated")
    parser.add_argument("--k", type=int, default=8, help="drafts a drafting row verifies")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("packed_forward.json"))
    args = parser.parse_args(argv)
    try:
        sizes = [int(r) for r in args.rows.split(",")]
        contexts = [int(c) for c in args.context.split(",")]
    except ValueError:
        parser.error(f"--rows and --context take comma-separated integers, got {args.rows!r}, {args.context!r}")
    for name, value in (("rows", min(sizes)), ("context", min(contexts)), ("k", args.k), ("rounds", args.rounds)):
        if value < 1:
            parser.error(f"--{name} must be >= 1, got {value}")
    model = load_model("smollm2").model
    results = []
    for context in contexts:
        for rows in sizes:
            print(f"{rows} rows, {context} tokens of context ...", flush=True)
            results.append(measure(model, rows, context, args.k, args.rounds, args.seed))
    print(table(results))
    for block in results:
        for form, check in block["checks"].items():
            print(f"{block['rows']} rows, {block['context']} context: {form} packed against padded logits, largest "
                  f"difference {check['max_abs_logit_diff']:.2e}, argmax {'agrees' if check['argmax_agrees'] else 'DIFFERS'}")
    data = {"model": "smollm2", "rounds": args.rounds, "results": results,
            "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
                        "torch": torch.__version__, "transformers": transformers.__version__}}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
