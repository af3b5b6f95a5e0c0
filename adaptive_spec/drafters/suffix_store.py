"""What the ``suffix`` drafter remembers of past traffic: recent completed outputs, per traffic key.

``History`` holds one key's outputs in a flat token buffer (documents separated by ``SEP``) with an
index from every 2-gram (and every token) to the positions where it ends, so a lookup starts from the
places where the context's last two tokens (or last one) occur instead of scanning the buffer. Memory is bounded three
ways, oldest output first: ``max_tokens`` in all, ``max_outputs`` outputs, ``max_age_s`` seconds.
Because eviction is first in, first out, the live outputs are one contiguous range of positions, and
an evicted output's index entries are a prefix of each position list: they are dropped lazily, on
lookup and whenever the buffer is compacted.

``HistoryStore`` keeps one ``History`` per traffic key (at most ``max_keys``, the least recently used
dropped first) or, with ``shared=True``, one for all keys. What one key's outputs teach never reaches
another key's drafts unless sharing is on: a draft never changes an output (verification is lossless),
but drafts change *timing*, so a shared history lets one tenant's requests speed up or slow down on
another tenant's text; that is a side channel, which is why sharing is off by default.

Saved and loaded only when asked (``save`` / ``load``): a versioned JSON file; a file that is corrupt,
of another version or of another model is ignored with a warning, never fatal.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import sys
import threading
import time
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaptive_spec.drafters.suffix_index import NO_DRAFT, SEP, SuffixDraft, match_and_continue
from adaptive_spec.errors import InvalidParameterError

log = logging.getLogger(__name__)

# occurrences a lookup starts from, the most recent first: a common token's thousands of occurrences
# would cost milliseconds, and recent outputs are the better guide to the next one
MAX_CANDIDATES = 512
FORMAT = "adaptive-spec-suffix-history"
VERSION = 1


@dataclass(frozen=True)
class HistoryLimits:
    # SuffixDecoding's evaluation caches tens of thousands of outputs; a lookup here costs the same at
    # any size (it starts from a 2-gram's positions), memory grows ~24 bytes a token
    max_tokens: int = 100_000
    max_outputs: int = 10_000
    max_age_s: float | None = None  # None: outputs age out only by count and size
    max_keys: int = 64  # per-key histories kept (least recently used dropped first)
    shared: bool = False  # one history for every traffic key (a side channel between tenants)

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_outputs", "max_keys"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise InvalidParameterError(name, value, "must be an integer >= 1")
        if self.max_age_s is not None and not (isinstance(self.max_age_s, (int, float)) and self.max_age_s > 0):
            raise InvalidParameterError("max_age_s", self.max_age_s, "must be a number > 0 or None")


def _pair(a: int, b: int) -> int:
    return (a << 32) | b  # token ids are far below 2**32


class History:
    """Recent outputs of one traffic key, searchable by suffix; see the module docstring."""

    def __init__(self, limits: HistoryLimits, clock=time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._buffer = np.full(1024, SEP, dtype=np.int64)
        self._offset = 0  # absolute position of _buffer[0]
        self._end = 0  # absolute position one past the last written entry
        self._outputs: deque[tuple[int, int, float]] = deque()  # (start, length, added at), oldest first
        self._index: dict[int, array] = {}  # 2-gram -> absolute end positions, ascending
        self._unigrams: dict[int, array] = {}  # token -> absolute positions, ascending
        self.tokens = 0  # live tokens, separators excluded

    # -- writing -------------------------------------------------------------------------------------

    def add(self, tokens: list[int], added_at: float | None = None) -> None:
        """Remember one completed output, then evict the oldest beyond the limits."""
        if not tokens:
            return
        if len(tokens) > self.limits.max_tokens:  # keep its end: the part most like what follows
            tokens = tokens[-self.limits.max_tokens:]
        start = self._end
        self._reserve(len(tokens) + 1)
        at = start - self._offset
        self._buffer[at : at + len(tokens)] = tokens
        self._buffer[at + len(tokens)] = SEP
        self._end = start + len(tokens) + 1
        index, unigrams = self._index, self._unigrams
        for i, token in enumerate(tokens):
            positions = unigrams.get(token)
            if positions is None:
                positions = unigrams[token] = array("q")
            positions.append(start + i)
            if i:
                key = _pair(tokens[i - 1], token)
                positions = index.get(key)
                if positions is None:
                    positions = index[key] = array("q")
                positions.append(start + i)
        self._outputs.append((start, len(tokens), self._clock() if added_at is None else added_at))
        self.tokens += len(tokens)
        self.evict()

    def evict(self) -> None:
        """Drop the oldest outputs while any limit is exceeded."""
        limits, outputs = self.limits, self._outputs
        now = self._clock()
        while outputs and (self.tokens > limits.max_tokens or len(outputs) > limits.max_outputs
                           or (limits.max_age_s is not None and now - outputs[0][2] > limits.max_age_s)):
            self.tokens -= outputs.popleft()[1]
        if self._live_start() - self._offset > self._buffer.shape[0] // 2:
            self._compact()

    def _live_start(self) -> int:
        return self._outputs[0][0] if self._outputs else self._end

    def _reserve(self, extra: int) -> None:
        used = self._end - self._offset
        if used + extra <= self._buffer.shape[0]:
            return
        self._compact()
        used = self._end - self._offset
        if used + extra > self._buffer.shape[0]:
            grown = np.full(max(2 * self._buffer.shape[0], used + extra), SEP, dtype=np.int64)
            grown[:used] = self._buffer[:used]
            self._buffer = grown

    def _compact(self) -> None:
        """Move the live outputs to the front of the buffer and drop evicted index entries."""
        start = self._live_start()
        shift = start - self._offset
        if shift > 0:
            used = self._end - start
            self._buffer[:used] = self._buffer[shift : shift + used]
            self._buffer[used:] = SEP
            self._offset = start
        for index in (self._index, self._unigrams):
            for key in list(index):
                positions = index[key]
                stale = bisect.bisect_left(positions, start)
                if stale == len(positions):
                    del index[key]
                elif stale:
                    del positions[:stale]

    # -- reading -------------------------------------------------------------------------------------

    def draft(self, context: np.ndarray, max_depth: int, max_tokens: int, min_prob: float, window: int = 0) -> SuffixDraft:
        """The longest match of ``context``'s suffix among the live outputs and its most frequent
        continuation: searched from the occurrences of the last two tokens, or of the last one when
        those two never occurred together with a token after them (a slot's new value followed by
        the template's punctuation). Only the ``MAX_CANDIDATES`` most recent occurrences are
        searched, which bounds a lookup's cost whatever the history's size. context: [T]"""
        if context.shape[0] < 1 or not self._outputs:
            return NO_DRAFT
        used = self._end - self._offset
        draft = NO_DRAFT
        if context.shape[0] >= 2:
            candidates = self._live(self._index, _pair(int(context[-2]), int(context[-1])))
            if candidates is not None:
                draft = match_and_continue(self._buffer[:used], candidates, context, 2, max_depth, max_tokens,
                                           min_prob, window)
        if not draft.tokens:
            candidates = self._live(self._unigrams, int(context[-1]))
            if candidates is not None:
                draft = match_and_continue(self._buffer[:used], candidates, context, 1, max_depth, max_tokens,
                                           min_prob, window)
        return draft

    def _live(self, index: dict[int, array], key: int) -> np.ndarray | None:
        """The most recent live positions under ``key``, as buffer offsets (None: none)."""
        positions = index.get(key)
        if positions is None:
            return None
        stale = bisect.bisect_left(positions, self._live_start())
        if stale:
            del positions[:stale]
        if not positions:
            return None
        recent = positions[-MAX_CANDIDATES:] if len(positions) > MAX_CANDIDATES else positions
        return np.array(recent, dtype=np.int64) - self._offset

    def outputs(self) -> list[tuple[list[int], float]]:
        """The live outputs, oldest first, with the clock time each was added."""
        return [(self._buffer[s - self._offset : s - self._offset + n].tolist(), t) for s, n, t in self._outputs]

    def memory_bytes(self) -> int:
        """The buffer plus the index's arrays and dictionary (allocated sizes)."""
        total = int(self._buffer.nbytes)
        for index in (self._index, self._unigrams):
            total += sum(sys.getsizeof(positions) for positions in index.values())
            total += sys.getsizeof(index) + 32 * len(index)  # the keys' int objects
        return total


class HistoryStore:
    """One ``History`` per traffic key (or one shared), bounded, optionally saved to a file."""

    def __init__(self, limits: HistoryLimits | None = None, clock=time.monotonic) -> None:
        self.limits = limits or HistoryLimits()
        self._clock = clock
        self._histories: OrderedDict[str, History] = OrderedDict()
        self._lock = threading.Lock()  # the worker drafts and adds; a shutdown hook may save

    def __getstate__(self) -> dict:  # pickled by a bench checkpoint: everything but the lock
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def for_key(self, key: str) -> History:
        key = "" if self.limits.shared else key
        with self._lock:
            history = self._histories.get(key)
            if history is None:
                history = self._histories[key] = History(self.limits, self._clock)
                while len(self._histories) > self.limits.max_keys:
                    self._histories.popitem(last=False)
            else:
                self._histories.move_to_end(key)
            return history

    def clear(self) -> None:
        """Forget every key's outputs."""
        with self._lock:
            self._histories.clear()

    def add(self, key: str, tokens: list[int]) -> None:
        history = self.for_key(key)
        with self._lock:
            history.add(tokens)

    def draft(self, key: str, context: np.ndarray, max_depth: int, max_tokens: int, min_prob: float,
              window: int = 0) -> SuffixDraft:
        key = "" if self.limits.shared else key
        with self._lock:
            history = self._histories.get(key)  # a lookup never makes a history (nor evicts one for it)
            if history is None:
                return NO_DRAFT
            self._histories.move_to_end(key)
            history.evict()  # age limits apply even while nothing new arrives
            return history.draft(context, max_depth, max_tokens, min_prob, window)

    def stats(self) -> dict:
        """``keys``, ``outputs``, ``tokens`` and ``memory_bytes`` over every key's history."""
        with self._lock:
            histories = list(self._histories.values())
            return {"keys": len(histories), "outputs": sum(len(h._outputs) for h in histories),
                    "tokens": sum(h.tokens for h in histories),
                    "memory_bytes": sum(h.memory_bytes() for h in histories)}

    # -- persistence ---------------------------------------------------------------------------------

    def save(self, path: str | Path, model: str) -> None:
        """Write every key's outputs (with their ages) to ``path`` atomically."""
        path = Path(path)
        now = self._clock()
        with self._lock:
            keys = {key: [{"age_s": round(max(0.0, now - t), 3), "tokens": tokens} for tokens, t in h.outputs()]
                    for key, h in self._histories.items()}
        payload = {"format": FORMAT, "version": VERSION, "model": model, "shared": self.limits.shared, "keys": keys}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(payload, separators=(",", ":")))
        os.replace(tmp, path)

    def load(self, path: str | Path, model: str) -> int:
        """Read outputs saved by ``save``; returns how many were loaded. A missing file loads
        nothing; a corrupt file, another version, another model or another sharing mode is ignored
        with a warning (the history starts empty)."""
        path = Path(path)
        if not path.exists():
            return 0
        try:
            payload = json.loads(path.read_text())
            problem = _check_payload(payload, model, self.limits.shared)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            problem = f"unreadable ({exc.__class__.__name__}: {exc})"
        if problem:
            log.warning("suffix history %s ignored: %s; starting empty", path, problem)
            return 0
        now = self._clock()
        loaded = 0
        for key, outputs in payload["keys"].items():
            history = self.for_key(key)
            with self._lock:
                for output in outputs:
                    history.add(output["tokens"], added_at=now - output["age_s"])
                    loaded += 1
        return loaded


def _check_payload(payload, model: str, shared: bool) -> str | None:
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        return "not a suffix history file"
    if payload.get("version") != VERSION:
        return f"version {payload.get('version')!r}, this build reads {VERSION}"
    if payload.get("model") != model:
        return f"written for model {payload.get('model')!r}, not {model!r} (token ids differ between models)"
    if payload.get("shared") != shared:
        return f"written with shared={payload.get('shared')!r}, now shared={shared!r}"
    keys = payload.get("keys")
    if not isinstance(keys, dict):
        return "no keys"
    for outputs in keys.values():
        if not isinstance(outputs, list):
            return "malformed outputs"
        for output in outputs:
            if not (isinstance(output, dict) and isinstance(output.get("age_s"), (int, float))
                    and isinstance(output.get("tokens"), list)
                    and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in output["tokens"])):
                return "malformed output"
    return None
