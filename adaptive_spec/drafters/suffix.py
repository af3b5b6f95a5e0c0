"""Suffix decoding: draft from the request itself and from what past requests of the same key output.

Prompt lookup (``ngram``) sees only the current request. Production traffic repeats itself *across*
requests: an extraction template answered for input after input, an agent re-emitting the same tool
calls, a support bot's stock paragraphs. SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975; the
proposer vLLM took up through Snowflake's Arctic Inference) matches the context's suffix both in the
request and in a store of recent outputs, drafts the most frequent continuation with an empirical
probability per token, and lets the draft grow with the match: ``factor`` tokens per matched token,
as its ``MAX_SPEC = alpha * match_length``.

Each request gets a view bound to its traffic key (``for_request``); its completed output is added to
that key's history (``learn``), so the next request of the key can draft from it. The match length
(bucketed) and whether the first token was the only continuation ever seen go to the controller's match
gate as the n-gram drafter's do, so a long confident match is verified in full and a short ambiguous
one cut; ``Proposal.confidences`` carries the per-token probabilities.

Arctic Inference ships as a source distribution that builds a CUDA extension against vLLM; this is a
compact CPU implementation of the same proposer over a flat buffer (``suffix_index``,
``suffix_store``) instead of a materialised tree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptive_spec.drafters.base import Drafter, Proposal
from adaptive_spec.drafters.suffix_index import SuffixDraft, context_draft
from adaptive_spec.drafters.suffix_store import HistoryLimits, HistoryStore
from adaptive_spec.errors import InvalidParameterError

# match lengths the match gate learns apart: short matches one by one, long ones by octave (the
# gate's estimates need repeats of a kind, and a 19-token match behaves like a 23-token one)
_BUCKETS = (1, 2, 3, 4, 8, 16, 32)


def match_bucket(match_len: int) -> int:
    """The match-gate kind of a ``match_len``-token match.

    >>> [match_bucket(n) for n in (1, 3, 5, 9, 40)]
    [1, 3, 4, 8, 32]
    """
    return max(b for b in _BUCKETS if b <= match_len)


@dataclass(frozen=True)
class SuffixSettings:
    max_depth: int = 32  # longest suffix matched: beyond it a match is as specific as it gets
    # The three below were chosen on the dev split of benchmarks/corpus/repetitive.jsonl (adaptive
    # with ngram against adaptive with ngram + suffix, steps and seconds per prompt); the published
    # tables use its test split.
    # draft up to factor x match length tokens (SuffixDecoding's alpha): a 1-token match after a
    # template's punctuation still drafts the key that follows; on this CPU a wider verify costs
    # about the same, and the match gate cuts what does not pay
    factor: float = 8.0
    # stop a draft at a token estimated this unlikely after its prefix (Arctic Inference uses 0.1
    # on raw frequencies; these estimates are smoothed, see suffix_index)
    min_prob: float = 0.2
    # tokens before a history match that weigh its occurrences (suffix_index.context_weights): about
    # a record's previous line; 0 switches it off
    window: int = 32

    def __post_init__(self) -> None:
        if not (isinstance(self.max_depth, int) and self.max_depth >= 2):
            raise InvalidParameterError("max_depth", self.max_depth, "must be an integer >= 2")
        if not (isinstance(self.window, int) and self.window >= 0):
            raise InvalidParameterError("window", self.window, "must be an integer >= 0")
        if not self.factor > 0:
            raise InvalidParameterError("factor", self.factor, "must be > 0")
        if not 0 <= self.min_prob <= 1:
            raise InvalidParameterError("min_prob", self.min_prob, "must be in [0, 1]")


class SuffixDrafter(Drafter):
    """The ``suffix`` drafter; ``store`` holds the past outputs (per key unless shared)."""

    name = "suffix"
    reports_match_order = True

    def __init__(self, store: HistoryStore | None = None, settings: SuffixSettings | None = None) -> None:
        self.store = store if store is not None else HistoryStore(HistoryLimits())
        self.settings = settings or SuffixSettings()
        self.key = ""

    def for_request(self, key: str) -> "SuffixDrafter":
        view = SuffixDrafter(self.store, self.settings)
        view.key = key
        return view

    def learn(self, output: list[int]) -> None:
        self.store.add(self.key, list(output))

    def gauges(self) -> dict[str, float]:
        return {f"suffix_history_{name}": value for name, value in self.store.stats().items()}

    def draft(self, context: list[int], k: int) -> SuffixDraft:
        """The better of the request's own match and the history's: the longer match, then the
        higher expected number of accepted tokens."""
        s = self.settings
        ids = np.asarray(context, dtype=np.int64)
        own = context_draft(ids, s.max_depth, k, s.min_prob)
        past = self.store.draft(self.key, ids, s.max_depth, k, s.min_prob, s.window)
        best = max(own, past, key=lambda d: (d.match_len if d.tokens else 0, d.expected_accepted))
        if not best.tokens:
            return best
        keep = max(1, min(k, int(s.factor * best.match_len)))
        return best._replace(tokens=best.tokens[:keep], probs=best.probs[:keep])

    def propose(self, context, k, config, generator, early_stop=None) -> Proposal:
        if k <= 0 or len(context) < 2:
            return Proposal(tokens=[])
        draft = self.draft(context, k)
        if not draft.tokens:
            return Proposal(tokens=[])
        return Proposal(tokens=draft.tokens, confidences=tuple(draft.probs), match_order=match_bucket(draft.match_len),
                        match_ambiguous=not draft.unanimous)
