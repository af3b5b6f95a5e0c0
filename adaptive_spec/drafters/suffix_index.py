"""Suffix matching over token streams: the lookup behind the ``suffix`` drafter.

SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975) keeps suffix trees over the current request and
over past outputs; at every step it finds the longest suffix of the context that the trees hold, then
walks down from that node along the most frequent child, one token at a time, each with its empirical
probability (how many of the occurrences that reached this node continued with that token). The draft
is as long as the match allows (a long match says the text is being repeated) and stops at a token
less likely than ``min_prob``.

The same two questions can be answered without materialising the tree: the *occurrences* of a
suffix are the positions where the context's last tokens appear, and the children of the node are
the tokens that follow those occurrences. ``match_and_continue`` does exactly that over a flat token
buffer, given the positions where the context's last token (or last two) occur:

1. extend the match backwards over the candidates, keeping those that still agree, up to
   ``max_depth`` tokens: the survivors of the longest length are the node's occurrences;
2. from those occurrences, repeatedly take the most frequent next token (ties: the most recent
   occurrence), its probability = its count / (the occurrences that have a next token + 1), and keep
   only the occurrences that continued with it. The + 1 is one unseen continuation: a suffix seen
   once is not a certainty (0.5), one seen 9 times out of 9 nearly is (0.9); without it a single
   occurrence in the request would outrank a continuation the history saw hundreds of times.

A separator (``SEP``, never a token id) between documents stops both walks at a document boundary.

Worked example (one document ``[5, 1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 4]``, context ``[7, 1, 2]``): ``[1, 2]``
occurs three times, ``[7, 1, 2]`` never, so the match is 2 tokens long; after it came ``3``, ``3`` and ``4``:
the draft is ``3`` with probability 2/4, then ``9`` with probability 2/3 (both occurrences followed by 9).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

SEP = -1  # between documents in a buffer: equals no token, so no match or continuation crosses it


class SuffixDraft(NamedTuple):
    tokens: list[int]  # the continuation, most frequent first token, then its most frequent child...
    probs: list[float]  # each token's estimated probability given the tokens before it (see above)
    match_len: int  # how many context tokens the match spans (0: none)
    occurrences: int  # how many times the matched suffix occurred (with a token after it)
    unanimous: bool = False  # every occurrence continued with the first token

    @property
    def expected_accepted(self) -> float:
        """Expected accepted tokens if each token is right with its probability (the score
        SuffixDecoding ranks candidate drafts by)."""
        total, alive = 0.0, 1.0
        for p in self.probs:
            alive *= p
            total += alive
        return total


NO_DRAFT = SuffixDraft([], [], 0, 0)


def match_and_continue(buffer: np.ndarray, candidates: np.ndarray, context: np.ndarray, seed_len: int,
                       max_depth: int, max_tokens: int, min_prob: float, window: int = 0) -> SuffixDraft:
    """The longest match of ``context``'s suffix in ``buffer`` and its most frequent continuation.

    buffer: [N] token ids with ``SEP`` between documents; the last entry must be ``SEP`` or lie
        before the end of the usable region (continuations read ``buffer[e + j]``)
    candidates: [C] end positions ``e`` in ``buffer`` where the context's last ``seed_len`` tokens
        occur (the caller's index guarantees it); those with no token after them are dropped
    context: [T] the request's tokens so far

    >>> buf = np.array([5, 1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 4, SEP])
    >>> d = match_and_continue(buf, np.array([2, 6, 10]), np.array([7, 1, 2]), 1, 8, 2, 0.1)
    >>> d.tokens, [round(p, 2) for p in d.probs], d.match_len, d.occurrences
    ([3, 9], [0.5, 0.67], 2, 3)
    """
    # only occurrences with a token after them can be continued: the longest match is among those
    candidates = candidates[candidates + 1 < buffer.shape[0]]
    candidates = candidates[buffer[candidates + 1] != SEP]
    if candidates.size == 0 or max_tokens <= 0:
        return NO_DRAFT
    # 1. extend the match backwards; ``alive`` holds the occurrences of the longest suffix so far
    alive = candidates
    depth = seed_len
    limit = min(max_depth, context.shape[0])
    while depth < limit:
        before = alive - depth
        ok = before >= 0
        keep = alive[ok][buffer[before[ok]] == context[-1 - depth]]
        if keep.size == 0:
            break
        alive = keep
        depth += 1
    # 2. walk down the most frequent continuation (each occurrence counted with its weight)
    weights = context_weights(buffer, alive, context, depth, window)
    tokens: list[int] = []
    probs: list[float] = []
    positions = alive + 1  # where each occurrence's next token sits
    occurrences = 0
    unanimous = False
    while len(tokens) < max_tokens and positions.size:
        inside = positions < buffer.shape[0]
        positions, weights = positions[inside], weights[inside]
        following = buffer[positions]
        has_next = following != SEP
        positions, following, weights = positions[has_next], following[has_next], weights[has_next]
        if positions.size == 0:
            break
        if not tokens:
            occurrences = int(positions.size)
        if positions.size == 1:
            # one occurrence left: the rest of the draft is its continuation, read at once (a walk
            # token by token costs a few numpy calls per token, most of a lookup's time)
            weight = float(weights[0])
            prob = weight / (weight + 1.0)
            if prob < min_prob:
                break
            run = buffer[positions[0] : positions[0] + max_tokens - len(tokens)]
            ends = np.flatnonzero(run == SEP)
            run = run[: ends[0]] if ends.size else run
            unanimous = True if not tokens else unanimous
            tokens += run.tolist()
            probs += [prob] * run.shape[0]
            break
        if (following == following[0]).all():  # every occurrence agrees: no counting needed
            token = int(following[0])
            best = total = float(weights.sum())
        else:
            values, inverse = np.unique(following, return_inverse=True)
            counts = np.bincount(inverse, weights=weights)
            best, total = counts.max(), counts.sum()
            tied = values[counts == best]
            if tied.size > 1:  # most recent occurrence among the tied tokens
                among = np.isin(following, tied)
                token = int(following[among][np.argmax(positions[among])])
            else:
                token = int(tied[0])
        prob = float(best / (total + 1.0))
        if prob < min_prob:
            break
        if not tokens:
            unanimous = bool(best == total)
        tokens.append(token)
        probs.append(prob)
        chosen = following == token
        positions, weights = positions[chosen] + 1, weights[chosen]
    if not tokens:
        return SuffixDraft([], [], depth, occurrences)
    return SuffixDraft(tokens, probs, depth, occurrences, unanimous)


def context_weights(buffer: np.ndarray, ends: np.ndarray, context: np.ndarray, depth: int, window: int) -> np.ndarray:
    """A weight per occurrence: 2 ** (how many of the ``window`` tokens before its match also occur in
    the ``window`` tokens before the context's matched suffix), over the largest. All 1.0 for
    ``window`` 0.

    Templated text has slots: a JSON record's value differs from record to record, so the suffix
    after a value (``",\n  "``) matches after *every* key of every past record, and frequency alone
    cannot say which key comes next. The tokens just before the match can: the occurrence that
    followed the same key (``"region": "...",\n  "``) shares it with the context. Each shared
    token doubles the occurrence's vote, as independent evidence would.

    ends: [C] end positions of the occurrences of the matched suffix (``depth`` tokens long)
    """
    if window <= 0:
        return np.ones(ends.shape[0])
    start = context.shape[0] - depth
    mine = context[max(0, start - window) : start]
    if mine.size == 0:
        return np.ones(ends.shape[0])
    positions = (ends - depth)[:, None] - np.arange(window)[None, :]  # [C, window], nearest first
    tokens = buffer[np.maximum(positions, 0)]
    # an occurrence's window stops at the start of its document (a separator) or of the buffer
    inside = np.cumprod((positions >= 0) & (tokens != SEP), axis=1).astype(bool)
    shared = (np.isin(tokens, mine) & inside).sum(axis=1)
    # relative to the best-matching occurrence, so the weights add up to an effective number of
    # occurrences like the context's, which the probability's pseudo-count is measured against
    return np.exp2((shared - shared.max()).astype(np.float64))


def context_draft(context: np.ndarray, max_depth: int, max_tokens: int, min_prob: float) -> SuffixDraft:
    """``match_and_continue`` over the request itself (prompt + output so far): the per-request
    tree of SuffixDecoding, searched directly (a request is short enough to scan every step).

    context: [T]

    >>> d = context_draft(np.array([4, 1, 2, 3, 8, 4, 1, 2]), 8, 3, 0.1)
    >>> d.tokens, d.match_len
    ([3, 8, 4], 3)
    """
    total = context.shape[0]
    if total < 2:
        return NO_DRAFT
    # every earlier position of the last token; the continuation may run into the suffix itself
    candidates = np.flatnonzero(context[: total - 1] == context[-1])
    return match_and_continue(context, candidates, context, 1, max_depth, max_tokens, min_prob)
