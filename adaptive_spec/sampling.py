"""Turning logits into the distributions that the verifier compares.

The same warping (temperature, then top-k, then top-p, as transformers orders its warpers) is
applied to the target's logits (giving ``p``) and the draft's logits (giving ``q``). Rejection
sampling is exact with respect to the *warped* target distribution, which is what plain sampling
with the same parameters would draw from.
"""

from __future__ import annotations

import torch


def warp_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Apply temperature / top-k / top-p to ``logits`` [..., vocab]; filtered entries become -inf."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    if temperature != 1.0:
        # the largest logit moved to 0 first (softmax is the same): a tiny temperature (1e-40 is a
        # valid request) then sends the others to -inf, the greedy limit it approaches, where the
        # raw logits overflowed to inf, inf - inf made nan, and the sampler raised; in the batched
        # engine that failed every row of the batch
        logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop the low tail whose mass is <= 1 - top_p; the most likely token always stays
        remove_sorted = cumulative <= (1.0 - top_p)
        remove_sorted[..., -1] = False
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def logits_to_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """[..., vocab] logits -> [..., vocab] probabilities after warping."""
    return warp_logits(logits, temperature, top_k, top_p).softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token per row of ``probs`` [n, vocab] -> [n]."""
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
