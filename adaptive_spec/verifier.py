"""Deciding which draft tokens the target keeps. Pure functions: the tests call them directly.

Notation (Leviathan et al. 2023; Chen et al. 2023): the drafter proposed ``k`` tokens
``d_1..d_k`` with probabilities ``q`` (or none, for deterministic drafters such as n-gram
lookup); the target scored the pending token and the drafts in one pass, giving ``p`` at
``k + 1`` positions. Position ``i`` of ``p`` is the target's distribution for the token after
``d_i`` (``d_0`` being the pending token).

Each step emits ``n + 1`` tokens: the ``n`` *accepted* drafts, then either a *recovered* token
(drawn at the first rejection) or a *bonus* token (drawn from ``p[k]`` when all were accepted).

Worked example (greedy): drafts ``[5, 7, 2]``, target argmax per position ``[5, 7, 9, 4]``.
``d_1`` and ``d_2`` match, ``d_3 = 2 != 9``: two accepted, the recovered token is ``9``, and the
step emits ``[5, 7, 9]``. Had the argmax been ``[5, 7, 2, 4]``, all three would be accepted and
the bonus token ``4`` appended: ``[5, 7, 2, 4]``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Verdict(NamedTuple):
    num_accepted: int  # accepted prefix length, 0..k
    next_token: int  # recovered token (num_accepted < k) or bonus token (num_accepted == k)


def verify_greedy(draft_tokens: list[int], target_logits: torch.Tensor) -> Verdict:
    """Longest prefix of ``draft_tokens`` matching the target's argmax.

    target_logits: [k + 1, vocab]
    """
    k = len(draft_tokens)
    _check_shapes(k, target_logits)
    argmax = target_logits.argmax(dim=-1).tolist()  # k + 1 ints: one sync with the device
    n = 0
    while n < k and argmax[n] == draft_tokens[n]:
        n += 1
    return Verdict(n, argmax[n])


def rejection_sample(
    draft_tokens: list[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> Verdict:
    """Exact speculative sampling: the emitted tokens are distributed as sampling from ``p``.

    draft_tokens: k proposed ids
    draft_probs:  [k, vocab] the draft's q at each proposed position, or None for a deterministic
                  drafter (q is then one-hot on the proposed token)
    target_probs: [k + 1, vocab] the target's p

    Token ``d_i`` is accepted with probability ``min(1, p(d_i) / q(d_i))``. At the first rejection
    the recovered token is drawn from ``norm(max(0, p - q))``; if all ``k`` are accepted the bonus
    token is drawn from ``p[k]``.
    """
    k = len(draft_tokens)
    _check_shapes(k, target_probs)
    if draft_probs is not None and tuple(draft_probs.shape) != (k, target_probs.shape[-1]):
        raise ValueError(f"draft_probs must be [k={k}, vocab={target_probs.shape[-1]}], got {tuple(draft_probs.shape)}")
    device = target_probs.device
    if k:
        idx = torch.arange(k, device=device)
        tokens = torch.tensor(draft_tokens, device=device)
        p_d = target_probs[idx, tokens]  # [k]
        q_d = draft_probs[idx, tokens] if draft_probs is not None else torch.ones_like(p_d)
        u = torch.rand(k, generator=generator, device=device, dtype=p_d.dtype)
        # u < p/q  <=>  u * q < p, which also handles q == 0 without dividing
        accepted = (u * q_d < p_d).tolist()
    else:
        accepted = []
    n = 0
    while n < k and accepted[n]:
        n += 1
    if n == k:
        dist = target_probs[k]
    else:
        if draft_probs is not None:
            residual = (target_probs[n] - draft_probs[n]).clamp_min(0)
        else:
            residual = target_probs[n].clone()
            residual[draft_tokens[n]] = 0.0
        # the residual is all zero only when p == q at this position, where rejection has
        # probability zero; guard against rounding anyway by falling back to p
        dist = residual if residual.sum() > 0 else target_probs[n]
    next_token = torch.multinomial(dist, 1, generator=generator).item()
    return Verdict(n, int(next_token))


def _check_shapes(k: int, target: torch.Tensor) -> None:
    if target.dim() != 2 or target.shape[0] != k + 1:
        raise ValueError(f"target scores must be [k + 1 = {k + 1}, vocab], got {tuple(target.shape)}")
