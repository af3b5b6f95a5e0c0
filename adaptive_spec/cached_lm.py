"""A causal LM plus its KV cache, and the exact rollback speculative decoding needs.

The cache always holds the keys and values of ``self.tokens``, nothing more. Feeding tokens
extends both; rolling back crops both to a prefix. Rejected draft tokens are thus removed without
recomputing anything before them, so the cost of a step does not grow with the output length
beyond attention itself.

Sliding-window layers (Gemma 3) are a trap for rollback: a layer that keeps only the last
``window`` positions cannot be cropped back past what it already dropped. We build the cache
without the model config, so every layer keeps full history; the sliding window is still
enforced by the attention mask, which is computed from absolute positions.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel


class CachedLM:
    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.device = next(model.parameters()).device if any(True for _ in model.parameters()) else torch.device("cpu")
        params = inspect.signature(model.forward).parameters
        # transformers 5.x renamed past_key_values -> cache; accept either so a pin bump is not a break
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.cache = DynamicCache()
        self.tokens: list[int] = []

    @property
    def vocab_size(self) -> int:
        head = self.model.get_output_embeddings()
        # out_features also exists on quantized Linear modules, whose .weight is a method
        return int(getattr(head, "out_features", None) or head.weight.shape[0])

    def reset(self) -> None:
        self.cache = DynamicCache()
        self.tokens = []

    @torch.inference_mode()
    def extend(self, new_tokens: list[int], num_logits: int = 1) -> torch.Tensor:
        """Feed ``new_tokens``; return logits [num_logits, vocab] for the last positions."""
        if not new_tokens:
            raise ValueError("extend needs at least one token")
        input_ids = torch.tensor([new_tokens], dtype=torch.long, device=self.device)  # [1, T]
        out = self.model(
            input_ids=input_ids,
            use_cache=True,
            logits_to_keep=num_logits,
            **{self._cache_kwarg: self.cache},
        )
        self.tokens.extend(new_tokens)
        self._check_length()
        return out.logits[0, -num_logits:]  # [num_logits, vocab]

    def rollback(self, length: int) -> None:
        """Drop everything after the first ``length`` tokens from the cache."""
        excess = len(self.tokens) - length
        if excess < 0:
            raise ValueError(f"cannot roll back to {length} tokens: cache holds {len(self.tokens)}")
        if excess:
            _crop(self.cache, length, excess)
            del self.tokens[length:]

    def _check_length(self) -> None:
        """A real check (``python -O`` keeps it): keys and values must line up with ``self.tokens``.

        They part only when two requests feed one cache at once (a CachedLM serves one request at a
        time) or a transformers change alters how the cache grows; either would score tokens at the
        wrong positions and decode wrong text without any error.
        """
        held = self.cache.get_seq_length()
        if held != len(self.tokens):
            raise RuntimeError(f"KV cache out of step: it holds {held} positions for {len(self.tokens)} tokens")

    def common_prefix(self, context: list[int]) -> int:
        """Length of the longest common prefix between the cached tokens and ``context``."""
        cached = self.tokens
        n = min(len(cached), len(context))
        if cached[:n] == context[:n]:  # the usual case: only the tail differs
            return n
        lo = 0
        while lo < n and cached[lo] == context[lo]:
            lo += 1
        return lo

    def sync(self, context: list[int], num_logits: int = 1) -> torch.Tensor:
        """Make the cache hold ``context``, feeding only what it lacks; logits of the last positions.

        At least the last token of ``context`` is always fed, so logits exist for it.
        """
        keep = min(self.common_prefix(context), len(context) - 1)
        self.rollback(keep)
        return self.extend(context[keep:], num_logits)


def _crop(cache: DynamicCache, length: int, excess: int) -> None:
    try:
        cache.crop(-excess)  # transformers >= 5.2x: negative count of tokens to remove
    except ValueError:
        cache.crop(length)  # older releases: the absolute length to keep
    if cache.get_seq_length() != length:  # pragma: no cover - a transformers change we must hear about
        raise RuntimeError(f"KV cache rollback failed: expected {length} tokens, cache has {cache.get_seq_length()}")
