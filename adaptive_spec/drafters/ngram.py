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

from adaptive_spec.drafters.base import Drafter, Proposal
from adaptive_spec.errors import InvalidParameterError
from policies.lookup import MAX_NGRAM, MIN_NGRAM, NgramMatch, find_ngram_continuation, find_ngram_match, lookup

__all__ = ["NgramDrafter", "NgramMatch", "find_ngram_continuation", "find_ngram_match"]


class NgramDrafter(Drafter):
    name = "ngram"
    reports_match_order = True

    def __init__(self, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        # 3 as in vLLM's default prompt_lookup_max: long enough to be specific, short enough to hit
        if not 1 <= min_ngram <= max_ngram:
            raise InvalidParameterError("max_ngram", max_ngram, f"need 1 <= min_ngram ({min_ngram}) <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, context, k, config, generator, early_stop=None) -> Proposal:
        tokens, order, ambiguous = lookup(context, k, self.max_ngram, self.min_ngram)
        if not tokens:
            return Proposal(tokens=[])
        return Proposal(tokens=tokens, match_order=order, match_ambiguous=ambiguous)
