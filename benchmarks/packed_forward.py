"""A batch's verify forward, padded against packed: what one row's draft costs the other rows.

The batched engine scores its rows in one padded forward, ``rows x width`` tokens, where ``width``
is the widest row: one row verifying a draft of ``k`` makes every row's step ``k + 1`` tokens wide,
so rows that draft nothing (open-ended requests, the tail of the latency distribution) pay for it.
A packed ("ragged", "varlen") forward scores only the tokens each row has: the rows' new tokens one
after another in a single sequence, each row's histories side by side in one cache, and a mask that
lets each token see its own row's history and its own row's earlier new tokens only.

This measures both on the embedded model with transformers' own forward (a 4-D attention mask and
per-token positions; no engine code): for each batch size, one-token rows, then ``drafting`` rows
verifying ``k`` drafts beside one-token rows, padded and packed, interleaved over ``--rounds``. It
also checks that the packed forward scores every row as the padded one does: the largest logit
difference and whether every position's argmax agrees (each row's history is its own random text).

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
    for d, w in widths.items():
        cases[f"packed, {d} of {rows} rows drafting"] = (lambda w=w: batch.packed(tokens, w))
    # the packed forward against the padded one, row by row (drafting rows first: all positions compared)
    wide = batch.padded(tokens)
    agree, worst = True, 0.0
    for w in widths.values():
        for row, logits in enumerate(batch.packed(tokens, w)):
            reference = wide[row, :w[row]]
            worst = max(worst, float((logits - reference).abs().max()))
            agree &= bool(torch.equal(logits.argmax(-1), reference.argmax(-1)))
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
    return {"rows": rows, "context": context, "k": k, "max_abs_logit_diff": worst, "argmax_agrees": agree,
            "cases": [{"case": name, "tokens": _tokens(name, rows, k, widths), "median_ms": 1000 * statistics.median(s),
                       "vs_padded_plain": statistics.median(s) / plain, "seconds": s}
                      for name, s in seconds.items()]}


def _tokens(name: str, rows: int, k: int, widths: dict[int, list[int]]) -> int:
    if name.startswith("padded"):
        return rows * (1 if "1 token" in name else k + 1)
    return sum(widths[int(name.split(", ")[1].split(" of")[0])])


def table(results: list[dict]) -> str:
    lines = ["| rows | forward | tokens scored | median ms | × padded one-token |", "|---|---|---|---|---|"]
    for block in results:
        for case in block["cases"]:
            lines.append(f"| {block['rows']} | {case['case']} | {case['tokens']} | {case['median_ms']:.1f} | "
                         f"{case['vs_padded_plain']:.2f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="4,8", help="comma-separated batch sizes")
    parser.add_argument("--context", type=int, default=128, help="tokens of history per row")
    parser.add_argument("--k", type=int, default=8, help="drafts a drafting row verifies")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("packed_forward.json"))
    args = parser.parse_args(argv)
    sizes = [int(r) for r in args.rows.split(",")]
    for name, value in (("rows", min(sizes)), ("context", args.context), ("k", args.k), ("rounds", args.rounds)):
        if value < 1:
            parser.error(f"--{name} must be >= 1, got {value}")
    model = load_model("smollm2").model
    results = []
    for rows in sizes:
        print(f"{rows} rows ...", flush=True)
        results.append(measure(model, rows, args.context, args.k, args.rounds, args.seed))
    print(table(results))
    for block in results:
        print(f"{block['rows']} rows: packed against padded logits, largest difference {block['max_abs_logit_diff']:.2e}, "
              f"argmax {'agrees' if block['argmax_agrees'] else 'DIFFERS'} at every position")
    data = {"model": "smollm2", "rounds": args.rounds, "results": results,
            "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
                        "torch": torch.__version__, "transformers": transformers.__version__}}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
