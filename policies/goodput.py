"""Goodput-optimal draft length: the ``k`` that maximises expected tokens per second.

A step with draft length ``k`` emits ``E[tokens](k)`` tokens in expectation (see
``policies.acceptance``) and costs ``draft_s(k) + verify_s(k)`` seconds; ``k = 0`` is plain
decoding, one token for one forward. The controller picks

    k* = argmax_k  E[tokens](k) / (draft_s(k) + verify_s(k)),   k in 0..max_k.

Worked example (costs in units of a 1-token forward, as measured on a 2-core CPU): acceptance
0.8 at every position, free n-gram drafts, verify ``1.8 + 0.05 k``::

    k   E[tokens]   seconds   tokens/s
    0   1.00        1.00      1.00
    1   1.80        1.85      0.97
    4   3.36        2.00      1.68
    8   4.33        2.20      1.97
    12  4.73        2.40      1.97

so speculation pays from ``k = 2`` and the optimum is flat around ``k = 9..11``; with acceptance
0.4 no ``k`` beats plain decoding and ``k* = 0``.
"""

from __future__ import annotations

from collections.abc import Sequence


def goodput_by_k(expected_tokens: Sequence[float], step_seconds: Sequence[float]) -> list[float]:
    """Expected tokens per second for each ``k`` (entries with no cost estimate give 0)."""
    if len(expected_tokens) != len(step_seconds):
        raise ValueError(
            f"expected_tokens and step_seconds must have one entry per k, got "
            f"{len(expected_tokens)} and {len(step_seconds)}"
        )
    return [t / s if s > 0 else 0.0 for t, s in zip(expected_tokens, step_seconds)]


def best_draft_len(expected_tokens: Sequence[float], step_seconds: Sequence[float],
                   min_k: int = 0) -> tuple[int, float]:
    """``(k*, tokens_per_second)`` maximising goodput over ``k in min_k..len-1``.

    Ties go to the smaller ``k`` (less drafting work and rollback for the same speed).

    >>> best_draft_len([1.0, 1.8, 2.44], [1.0, 1.85, 1.9])
    (2, 1.2842105263157895)
    >>> best_draft_len([1.0, 1.4], [1.0, 1.85])  # speculation loses: plain decoding
    (0, 1.0)
    >>> best_draft_len([1.0, 1.4], [1.0, 1.85], min_k=1)  # best speculative k, even if losing
    (1, 0.7567567567567567)
    """
    if len(expected_tokens) != len(step_seconds):
        goodput_by_k(expected_tokens, step_seconds)  # raises the length error
    if min_k >= len(expected_tokens):
        raise ValueError(f"min_k must be < {len(expected_tokens)} (the number of k values), got min_k={min_k}")
    # one pass, no intermediate list: this runs for every drafter at every step
    best_k, best_rate = min_k, -1.0
    for k in range(min_k, len(expected_tokens)):
        seconds = step_seconds[k]
        rate = expected_tokens[k] / seconds if seconds > 0 else 0.0
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k, best_rate
