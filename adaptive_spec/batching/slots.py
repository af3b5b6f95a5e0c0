"""One KV cache for many requests, each rolled back on its own.

The cache is a transformers ``DynamicCache`` of shape ``[rows, heads, slots, head_dim]``. Rows
share the slot axis but not their contents: a boolean ``valid[row, slot]`` says which slots hold
one of the row's tokens, and each row's tokens sit in its valid slots in order. A step appends
the same number of slots to every row (the widest row's input); a row with fewer inputs, or
whose drafts were rejected, marks those slots invalid instead of cropping them, so unequal
acceptance never moves another row's keys. Every forward passes

- ``attention_mask = valid``: a query sees only its own row's valid slots (and, through the
  causal mask, only earlier slots);
- ``position_ids`` = each row's own token count: rotary positions follow the row's text, not the
  slot it landed in. This is the trap of padded batch speculation (EqSpec, arXiv 2510.22876):
  positions taken from slots drift apart from the text after unequal acceptance.

Invalid slots are garbage collected by ``compact`` (each row's valid slots gathered to the right,
left padding invalid) once they outnumber the longest row's tokens.

Two forms of the step's forward, the same logits (to rounding) and the same cache afterwards:

- padded: ``rows x width`` tokens, ``width`` the widest row's input, so one row's draft makes every
  row's step as wide;
- packed: only each row's own tokens go through the model, one after another in a single
  sequence; in attention alone they are spread back into their rows (a ``rows x width`` grid,
  the cache's own layout) and attend as in the padded form: their own row's valid slots and
  their own row's earlier new tokens. The projections and MLP, most of a forward's work, then
  cost a row that drafts nothing only its one token, which keeps rows that draft nothing
  (open-ended requests, the latency tail) fast beside rows that copy; the cache is never copied
  into another layout. It needs transformers' ``sdpa`` attention, which this module wraps: the
  wrapper spreads and gathers the queries only while a packed forward runs in the calling thread,
  and is the plain ``sdpa`` otherwise.

A packed forward can also carry *riders*: chunks of prompts on their way into the batch, each in a
cache of its own (``Prefill``). Their tokens go through the projections and MLP in the same
sequence as the rows' (one pass over the weights instead of a prefill forward of their own, which on
CPU costs nearly a whole step even for a few tokens); in attention each chunk sees only its own
prompt, causally, exactly as a prefill forward of its own would. A rider whose whole prompt is in
then joins as the last row (``join``).

In either form, on CPU, rows more than one token wide attend with grouped-query attention inside
torch's kernel rather than through transformers' copy of every key and value head per query head
(``_kernel_gqa``), a copy of the whole cache at every layer that made a draft dear for every row.

``layout="auto"`` packs exactly when the rows' widths differ (``policies.batch_layout``, which the
simulator's batching replica shares).

Attention windows computed from slot indices (sliding-window layers) would be wrong here, so
models with them are refused.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

from adaptive_spec.errors import InvalidParameterError
from policies.batch_layout import LAYOUTS, packs


@dataclass(frozen=True)
class _Spread:
    """Where a packed forward's tokens sit in the ``rows x width`` grid of its rows' new slots, and
    the riders (prompt chunks, each with a cache of its own) whose tokens follow the rows'."""
    rows: int
    width: int
    index: torch.Tensor  # per packed token, its place in the grid, row-major
    mask: torch.Tensor  # [rows, 1, width, slots + width], additive: what each grid query may see
    riders: tuple = ()  # (Prefill, tokens) per rider, in the packed sequence's order
    stowed: list = field(default_factory=list)  # this layer's riders' keys and values, cache included

    @property
    def head(self) -> int:
        """Tokens of the packed sequence that belong to the rows (the riders' follow)."""
        return self.index.numel()

    def stow(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int):
        """Append the riders' new keys and values to their own caches (kept for the attention that
        follows in this layer); the rows' part of ``key_states`` / ``value_states`` comes back."""
        sizes = [self.head] + [tokens for _, tokens in self.riders]
        keys, values = key_states.split(sizes, dim=2), value_states.split(sizes, dim=2)
        self.stowed[:] = [DynamicCache.update(rider.cache, k, v, layer_idx)
                          for (rider, _), k, v in zip(self.riders, keys[1:], values[1:])]
        return keys[0], values[0]

    def attend_riders(self, queries: torch.Tensor, **kwargs) -> list[torch.Tensor]:
        """Each rider's queries [1, heads, tokens, d] over its own prompt so far, causally -> [1, tokens, heads, d]."""
        out = []
        for part, (key, value) in zip(queries.split([t for _, t in self.riders], dim=2), self.stowed):
            tokens, held = part.shape[2], key.shape[2]
            if tokens == held:  # its first chunk: the kernel's causal path, as a prefill forward of its own takes
                out.append(_gqa_sdpa(part, key, value, None, causal=True, **kwargs))
                continue
            see = torch.ones(tokens, held, dtype=torch.bool, device=part.device).tril(held - tokens)
            out.append(_gqa_sdpa(part, key, value, see, **kwargs))
        return out

    def spread(self, packed: torch.Tensor) -> torch.Tensor:
        """[1, heads, tokens, d] -> [rows, heads, width, d]; grid places without a token are zero."""
        _, heads, _, d = packed.shape
        grid = packed.new_zeros(self.rows * self.width, heads, d)
        grid[self.index] = packed[0].transpose(0, 1)
        return grid.view(self.rows, self.width, heads, d).transpose(1, 2)

    def gather(self, grid: torch.Tensor) -> torch.Tensor:
        """An attention output [rows, width, heads, d] -> [1, tokens, heads, d]."""
        return grid.reshape(self.rows * self.width, *grid.shape[2:])[self.index][None]


_SPREAD = threading.local()  # .spread: the packed forward running in this thread, if any; .batch: in a batch step
_REGISTERED = ALL_ATTENTION_FUNCTIONS["sdpa"]
_SDPA = getattr(_REGISTERED, "original_sdpa", _REGISTERED)  # (this module imported again: not the wrapper)


def _rows_sdpa(module, query, key, value, attention_mask, **kwargs):
    """transformers' ``sdpa``, except in a batch step of this thread: inside a packed forward the
    queries are spread into their rows, attend to the rows' cache under the rows' mask, and are
    gathered back; and multi-token rows on CPU attend with grouped-query attention in the kernel."""
    spread = getattr(_SPREAD, "spread", None)
    riders = []
    if spread is not None:
        if spread.riders:
            riders = spread.attend_riders(query[:, :, spread.head:], **kwargs)
            query = query[:, :, : spread.head]
        query, attention_mask = spread.spread(query), spread.mask
    if getattr(_SPREAD, "batch", False) and _kernel_gqa(module, query):
        out, weights = _gqa_sdpa(query, key, value, attention_mask, **kwargs), None
    else:
        out, weights = _SDPA(module, query, key, value, attention_mask, **kwargs)
    if spread is None:
        return out, weights
    return torch.cat([spread.gather(out), *riders], dim=1) if riders else spread.gather(out), weights


def _kernel_gqa(module, query) -> bool:
    """Whether a batch step's attention should let torch's kernel share each key/value head among
    its query heads. transformers does so only without a mask (on CUDA a mask sends grouped-query
    attention to the slow math kernel) or for one-token queries; otherwise it copies every key and
    value head once per query head it serves, the whole cache, every layer and step. A batch step
    always has a mask, and a row's drafts make its queries many tokens wide: on CPU that copy was
    most of what a draft cost the other rows."""
    return query.device.type == "cpu" and query.shape[2] > 1 and getattr(module, "num_key_value_groups", 1) > 1


def _gqa_sdpa(query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
              causal: bool = False, **_):
    """[rows, heads, q, d] queries over [rows, kv_heads, k, d] keys and values -> [rows, q, heads, d],
    as transformers' ``sdpa`` returns it. A boolean mask says what each query sees; an additive one
    what it adds; ``causal`` (no mask) that each sees the keys up to its own position."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                          dropout_p=dropout, scale=scaling, is_causal=causal,
                                                          enable_gqa=True)
    return out.transpose(1, 2).contiguous()


_rows_sdpa.original_sdpa = _SDPA


def _install_rows_attention() -> None:
    if not hasattr(ALL_ATTENTION_FUNCTIONS["sdpa"], "original_sdpa"):
        AttentionInterface.register("sdpa", _rows_sdpa)


class RowsCache(DynamicCache):
    """A ``DynamicCache`` whose new keys and values, inside a packed forward, are spread into their
    rows' new slots before they are appended: the cache keeps the padded layout either way."""

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        spread = getattr(_SPREAD, "spread", None)
        if spread is not None:
            if spread.riders:
                key_states, value_states = spread.stow(key_states, value_states, layer_idx)
            key_states, value_states = spread.spread(key_states), spread.spread(value_states)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class Prefill:
    """A prompt on its way into the batch: the part of it prefilled so far, in a cache of its own."""

    def __init__(self, prompt: list[int]) -> None:
        if not prompt:
            raise ValueError("a prompt needs at least one token")
        self.prompt = list(prompt)
        self.cache = RowsCache()
        self.done = 0  # tokens prefilled
        self.logits: torch.Tensor | None = None  # [1, vocab] at its last position, once the whole prompt is in

    @property
    def remaining(self) -> int:
        return len(self.prompt) - self.done


class SlotCache:
    def __init__(self, model: PreTrainedModel, layout: str = "auto") -> None:
        if layout not in LAYOUTS:
            raise InvalidParameterError("layout", layout, f"expected one of {', '.join(LAYOUTS)}")
        windows = {getattr(model.config, "sliding_window", None)} | set(getattr(model.config, "layer_types", None) or [])
        if any(w not in (None, "full_attention") for w in windows):
            raise InvalidParameterError("model", type(model).__name__, "has sliding-window attention layers, which "
                                        "the batched engine cannot place by slot; serve it with batch size 1")
        self.model = model
        self.layout = layout
        # a packed forward spreads its queries into rows inside transformers' sdpa attention
        self.packs_masks = getattr(model.config, "_attn_implementation", None) == "sdpa"
        if layout == "packed" and not self.packs_masks:
            raise InvalidParameterError("layout", layout, f"needs sdpa attention, not "
                                        f"{getattr(model.config, '_attn_implementation', None)}")
        if self.packs_masks:
            _install_rows_attention()
        self.last_layout = "padded"  # the form of the last step's forward, and the tokens it scored
        self.last_tokens = 0
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.reset()

    @torch.inference_mode()  # the cache's tensors are made there: every change to them happens there too
    def reset(self) -> None:
        self.cache = RowsCache()
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=self.device)
        self.tokens: list[list[int]] = []  # per row: the tokens whose keys and values the row holds

    @property
    def rows(self) -> int:
        return len(self.tokens)

    @property
    def slots(self) -> int:
        return self.valid.shape[1]

    # -- rows join and leave ---------------------------------------------------------------------

    def add(self, prompt: list[int]) -> torch.Tensor:
        """Prefill ``prompt`` alone and join it as the last row; logits [1, vocab] of its last position."""
        return self.feed(Prefill(prompt))

    @torch.inference_mode()
    def feed(self, pending: Prefill, budget: int | None = None) -> torch.Tensor | None:
        """Prefill the next ``budget`` tokens of ``pending`` (all that remain: None) in a cache of its
        own, outside the batch. Once its whole prompt is in, it joins as the last row and its last
        position's logits [1, vocab] come back; None while tokens remain."""
        if budget is not None and budget < 1:
            raise ValueError(f"a prefill chunk needs at least one token, got {budget}")
        end = len(pending.prompt) if budget is None else min(len(pending.prompt), pending.done + budget)
        ids = torch.tensor([pending.prompt[pending.done:end]], dtype=torch.long, device=self.device)
        # positions follow from what the chunk's cache holds, as in one forward over the whole prompt
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_kwarg: pending.cache})
        pending.done = end
        if end < len(pending.prompt):
            return None
        pending.logits = out.logits[0, -1:]
        self.join(pending)
        return pending.logits

    @torch.inference_mode()
    def join(self, pending: Prefill) -> None:
        """``pending``, its whole prompt in, joins as the last row."""
        if pending.remaining:
            raise ValueError(f"a prompt joins once it is all in: {pending.remaining} of its tokens are not")
        self._join(pending.cache, len(pending.prompt))
        self.tokens.append(list(pending.prompt))
        self._check()

    def _join(self, single: DynamicCache, length: int) -> None:
        if not self.tokens:
            self.cache = single
            self.valid = torch.ones(1, length, dtype=torch.bool, device=self.device)
            return
        slots = self.slots
        if length > slots:  # the newcomer is longer: every row gets invalid slots on the left
            self._pad_left(self.cache, length - slots)
            self.valid = torch.cat([self.valid.new_zeros(self.rows, length - slots), self.valid], dim=1)
            slots = length
        self._pad_left(single, slots - length)
        for mine, theirs in zip(self.cache.layers, single.layers):
            mine.keys = torch.cat([mine.keys, theirs.keys], dim=0)
            mine.values = torch.cat([mine.values, theirs.values], dim=0)
        row = torch.arange(slots, device=self.device) >= slots - length
        self.valid = torch.cat([self.valid, row[None]], dim=0)

    @staticmethod
    def _pad_left(cache: DynamicCache, count: int) -> None:
        if count <= 0:
            return
        for layer in cache.layers:
            b, h, _, d = layer.keys.shape
            layer.keys = torch.cat([layer.keys.new_zeros(b, h, count, d), layer.keys], dim=2)
            layer.values = torch.cat([layer.values.new_zeros(b, h, count, layer.values.shape[3]), layer.values], dim=2)

    @torch.inference_mode()
    def remove(self, rows: list[int]) -> None:
        """Drop ``rows`` (indices); the others keep their order."""
        gone = set(rows)
        keep = [i for i in range(self.rows) if i not in gone]
        if not keep:
            self.reset()
            return
        index = torch.tensor(keep, device=self.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)
            layer.values = layer.values.index_select(0, index)
        self.valid = self.valid.index_select(0, index)
        self.tokens = [self.tokens[i] for i in keep]
        self.compact()

    # -- a step ------------------------------------------------------------------------------------

    def _packs(self, widths: list[int]) -> bool:
        return self.packs_masks and packs(widths, self.layout)

    @property
    def carries_riders(self) -> bool:
        """Whether ``extend`` can carry prompt chunks (packed forwards: sdpa attention, layout not forced padded)."""
        return self.packs_masks and self.layout != "padded"

    def scored(self, widths: list[int]) -> int:
        """Tokens a forward over rows ``widths`` tokens wide would score, in the form ``extend`` runs it."""
        return sum(widths) if self._packs(widths) else len(widths) * max(widths)

    @torch.inference_mode()
    def extend(self, inputs: list[list[int]], riders: list[tuple[Prefill, int]] = ()) -> list[torch.Tensor]:
        """Feed every row its tokens in one forward; per row, logits [len(inputs[row]), vocab].

        ``riders``: (prompt on its way in, tokens) pairs whose next chunks go through the same
        forward (packed); each advances by its chunk, and one whose whole prompt is then in holds its
        last position's logits (``Prefill.logits``) until it ``join``s."""
        if len(inputs) != self.rows or any(not tokens for tokens in inputs):
            raise ValueError(f"extend needs at least one token for each of the {self.rows} rows")
        if riders and not self.carries_riders:
            raise ValueError(f"prompt chunks ride only in packed forwards (layout {self.layout!r}, "
                             f"attention {getattr(self.model.config, '_attn_implementation', None)!r})")
        if any(tokens < 1 or tokens > rider.remaining for rider, tokens in riders):
            raise ValueError(f"a rider's chunk needs 1 to its remaining tokens, got "
                             f"{[(tokens, rider.remaining) for rider, tokens in riders]}")
        widths = [len(tokens) for tokens in inputs]
        width = max(widths)
        packed = bool(riders) or self._packs(widths)
        self.last_layout, self.last_tokens = ("packed", sum(widths)) if packed else ("padded", self.rows * width)
        if packed:
            return self._extend_packed(inputs, width, list(riders))
        ids = torch.zeros(self.rows, width, dtype=torch.long, device=self.device)
        for row, tokens in enumerate(inputs):
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        step = torch.arange(width, device=self.device)
        positions = torch.tensor([len(t) for t in self.tokens], device=self.device)[:, None] + step
        self.valid = torch.cat([self.valid, step[None, :] < torch.tensor(widths, device=self.device)[:, None]], dim=1)
        _SPREAD.batch = True
        try:
            out = self.model(input_ids=ids, attention_mask=self.valid.long(), position_ids=positions, use_cache=True,
                             **{self._cache_kwarg: self.cache})
        finally:
            _SPREAD.batch = False
        for row, tokens in enumerate(inputs):
            self.tokens[row].extend(tokens)
        self._check()
        return [out.logits[row, : len(tokens)] for row, tokens in enumerate(inputs)]

    def _extend_packed(self, inputs: list[list[int]], width: int, riders: list[tuple[Prefill, int]]) -> list[torch.Tensor]:
        rows, slots = self.rows, self.slots
        widths = [len(tokens) for tokens in inputs]
        step = torch.arange(width, device=self.device)
        fits = step[None, :] < torch.tensor(widths, device=self.device)[:, None]  # [rows, width]
        valid = torch.cat([self.valid, fits], dim=1)
        # as in the padded form: each grid query sees its row's valid slots, its row's new tokens causally
        see = valid[:, None, :].expand(rows, width, slots + width).clone()
        see[:, :, slots:] &= torch.ones(width, width, dtype=torch.bool, device=self.device).tril()
        dtype = self.cache.layers[0].keys.dtype  # the attention's, which the mask must match
        mask = torch.zeros(see.shape, dtype=dtype, device=self.device).masked_fill(~see, torch.finfo(dtype).min)[:, None]
        positions = [p for row, w in enumerate(widths) for p in range(len(self.tokens[row]), len(self.tokens[row]) + w)]
        ids = [t for tokens in inputs for t in tokens]
        keep = list(range(len(ids)))  # every row token's logits; of a rider's chunk, its last position's
        for rider, tokens in riders:
            positions += range(rider.done, rider.done + tokens)
            ids += rider.prompt[rider.done: rider.done + tokens]
            keep.append(len(ids) - 1)
        ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        spread = _Spread(rows, width, fits.flatten().nonzero().flatten(), mask, tuple(riders))
        extra = {"logits_to_keep": torch.tensor(keep, device=self.device)} if riders else {}
        _SPREAD.spread, _SPREAD.batch = spread, True
        try:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=torch.tensor([positions], device=self.device),
                             use_cache=True, **{self._cache_kwarg: self.cache}, **extra)
        finally:
            _SPREAD.spread, _SPREAD.batch = None, False
        self.valid = valid
        for row, tokens in enumerate(inputs):
            self.tokens[row].extend(tokens)
        self._check()
        logits = out.logits[0]
        for index, (rider, tokens) in enumerate(riders):
            rider.done += tokens
            if not rider.remaining:
                rider.logits = logits[sum(widths) + index:][:1]
        return list(logits[: sum(widths)].split(widths))

    @torch.inference_mode()
    def rollback(self, row: int, length: int) -> None:
        """Row ``row`` keeps its first ``length`` tokens: the slots of the others become invalid."""
        held = len(self.tokens[row])
        if not 0 < length <= held:
            raise ValueError(f"cannot roll row {row} back to {length} tokens: it holds {held}")
        if length < held:
            slots = self.valid[row].nonzero().flatten()
            self.valid[row, slots[length:]] = False
            del self.tokens[row][length:]

    @torch.inference_mode()
    def compact(self) -> None:
        """Gather each row's valid slots to the right once invalid slots outnumber the longest row."""
        longest = max((len(t) for t in self.tokens), default=0)
        if not self.tokens or self.slots <= 2 * longest:
            return
        index = torch.zeros(self.rows, longest, dtype=torch.long, device=self.device)
        for row, tokens in enumerate(self.tokens):
            index[row, longest - len(tokens):] = self.valid[row].nonzero().flatten()
        for layer in self.cache.layers:
            _, h, _, d = layer.keys.shape
            layer.keys = layer.keys.gather(2, index[:, None, :, None].expand(-1, h, -1, d))
            layer.values = layer.values.gather(2, index[:, None, :, None].expand(-1, h, -1, layer.values.shape[3]))
        self.valid = torch.arange(longest, device=self.device)[None, :] >= torch.tensor(
            [longest - len(t) for t in self.tokens], device=self.device)[:, None]
        self._check()

    def _check(self) -> None:
        """Real checks (``python -O`` keeps them): the slots line up with the cache and each row's
        valid slots with its tokens; otherwise keys would be read at the wrong positions silently."""
        held = self.cache.get_seq_length()
        if held != self.slots:
            raise RuntimeError(f"KV cache out of step: {held} positions for {self.slots} slots")
        counts = self.valid.sum(dim=1).tolist()
        if counts != [len(t) for t in self.tokens]:
            raise RuntimeError(f"KV cache out of step: valid slots per row {counts}, tokens per row "
                               f"{[len(t) for t in self.tokens]}")
