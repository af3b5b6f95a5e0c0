"""Prompt lookup, the search itself: the tokens that followed the last occurrence of the context's
suffix, with the kind of match found. Pure numpy, so that the simulator can run the very lookup the
engine runs on a recorded token stream (``simulator/drafts.py``) without torch; the drafter around
it is ``adaptive_spec.drafters.ngram``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# the engine's NgramDrafter defaults (3 as in vLLM's prompt_lookup_max): the simulator's lookups use them too
MAX_NGRAM, MIN_NGRAM = 3, 1
DRAFTER = "ngram"  # the drafter whose lookup this is


def find_ngram_continuation(context: np.ndarray, k: int, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> list[int]:
    """Tokens following the most recent earlier match of the context's suffix (longest n first).

    context: [T] token ids
    """
    return find_ngram_match(context, k, max_ngram, min_ngram)[0]


class NgramMatch(NamedTuple):
    tokens: list[int]  # the continuation, at most k tokens
    order: int  # how many context tokens matched (0: none)
    ambiguous: bool  # earlier occurrences of the matched n-gram were followed by different tokens


def find_ngram_match(context: np.ndarray, k: int, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> NgramMatch:
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


def lookup(context, k: int, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> tuple[list[int], int | None, bool]:
    """A draft of at most ``k`` tokens for ``context`` (token ids): tokens, match order, ambiguous;
    ``([], None, False)`` where nothing matched. The ``ngram`` drafter proposes exactly this."""
    if k <= 0 or len(context) < 2:
        return [], None, False
    match = find_ngram_match(np.asarray(context, dtype=np.int64), k, max_ngram, min_ngram)
    return (match.tokens, match.order, match.ambiguous) if match.tokens else ([], None, False)


class PromptLookup:
    """The ``ngram`` drafter's lookup over token lists, in the shape shadow drafting calls
    (``policies.shadow``): the engine's drafter with its defaults, minus torch.

    >>> PromptLookup().lookup([1, 2, 3, 4, 9, 1, 2], 2)
    ([3, 4], 2, False)
    >>> PromptLookup().lookup([7], 4)
    ([], None, False)
    """

    name = DRAFTER

    def lookup(self, context, k: int) -> tuple[list[int], int | None, bool]:
        return lookup(context, k)
