"""Prompt lookup: propose the tokens that followed the last occurrence of the current suffix.

When an answer repeats its prompt (rewrites, extraction, code edits), the tokens after the most
recent earlier occurrence of the last ``n`` tokens are an excellent guess, at almost no cost
(Saxena 2023, "prompt lookup decoding"; vLLM's ngram proposer). Longer n-grams are tried first
because they are more specific.

Worked example: context ``[1, 2, 3, 4, 9, 1, 2]``, ``max_ngram=3``, ``k=2``. The 3-gram
``[9, 1, 2]`` never occurred before; the 2-gram ``[1, 2]`` occurred at index 0, followed by
``[3, 4]``: the proposal is ``[3, 4]``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from adaptive_spec.drafters.base import Drafter, Proposal
from adaptive_spec.errors import InvalidParameterError


def find_ngram_continuation(context: np.ndarray, k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Tokens following the most recent earlier match of the context's suffix (longest n first).

    context: [T] token ids
    """
    return find_ngram_match(context, k, max_ngram, min_ngram)[0]


class NgramMatch(NamedTuple):
    tokens: list[int]  # the continuation, at most k tokens
    order: int  # how many context tokens matched (0: none)
    ambiguous: bool  # earlier occurrences of the matched n-gram were followed by different tokens


def find_ngram_match(context: np.ndarray, k: int, max_ngram: int = 3, min_ngram: int = 1) -> NgramMatch:
    """As ``find_ngram_continuation``, with what the controller needs to judge the draft: the
    order ``n`` that matched and whether the match is ambiguous.

    On copy-heavy prompts the first token drafted after an unambiguous 1-token match is accepted
    far more often than after an ambiguous one, which is why the match gate
    (``policies/match_gate.py``) tells them apart.

    >>> find_ngram_match(np.array([1, 2, 3, 4, 9, 1, 2]), k=2)
    NgramMatch(tokens=[3, 4], order=2, ambiguous=False)
    >>> find_ngram_match(np.array([5, 1, 5, 2, 5]), k=1)  # 5 was followed by 1, then by 2
    NgramMatch(tokens=[2], order=1, ambiguous=True)
    """
    total = context.shape[0]
    for n in range(min(max_ngram, total - 1), min_ngram - 1, -1):
        suffix = context[total - n :]
        # windows[i] = context[i : i + n] for every start whose window ends before the suffix does
        windows = np.lib.stride_tricks.sliding_window_view(context[: total - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            followers = context[hits + n]  # every hit ends before the suffix does, so these exist
            return NgramMatch(context[start : start + k].tolist(), n, bool((followers != followers[-1]).any()))
    return NgramMatch([], 0, False)


class NgramDrafter(Drafter):
    name = "ngram"
    reports_match_order = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        # 3 as in vLLM's default prompt_lookup_max: long enough to be specific, short enough to hit
        if not 1 <= min_ngram <= max_ngram:
            raise InvalidParameterError("max_ngram", max_ngram, f"need 1 <= min_ngram ({min_ngram}) <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, context, k, config, generator, early_stop=None) -> Proposal:
        if k <= 0 or len(context) < 2:
            return Proposal(tokens=[])
        match = find_ngram_match(np.asarray(context, dtype=np.int64), k, self.max_ngram, self.min_ngram)
        if not match.tokens:
            return Proposal(tokens=[])
        return Proposal(tokens=match.tokens, match_order=match.order, match_ambiguous=match.ambiguous)
