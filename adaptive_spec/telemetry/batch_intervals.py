"""The batched engine's decode forwards summed into interval rows (``batch_intervals`` in the store).

A forward is a few additions to the counters of its (model, rows) series. All series share one
interval clock: the first forward after ``interval_s`` (or a request's end after it, ``due``) closes
every open series, so each interval holds at most one row per size of forward seen in it, whatever
the step or request rate. A batch that empties leaves its last interval open until the next forward
(or the recorder's close).
"""

from __future__ import annotations

from policies.batch_step import CAP_CALLS


class _Counts:
    __slots__ = ("start", "end", "forwards", "drafting", "seconds", "cut_tokens", "prompt_tokens", "calls")

    def __init__(self, now: float) -> None:
        self.start = self.end = now
        self.forwards = self.drafting = self.cut_tokens = self.prompt_tokens = 0
        self.seconds = 0.0
        self.calls = dict.fromkeys(CAP_CALLS, 0)


class BatchIntervals:
    """Open interval counters by (model, rows); ``add`` and ``close`` return the rows closed
    (``store.COLUMNS["batch_intervals"]``, given the writer's ``run_id``). Not thread-safe: the
    recorder calls it under its lock."""

    def __init__(self, run_id: str, interval_s: float = 1.0) -> None:
        self.run_id, self.interval_s = run_id, interval_s
        self._open: dict[tuple[str, int], _Counts] = {}
        self._opened: float | None = None

    def add(self, model: str, step, now: float) -> list[tuple]:
        closed = self.due(now)
        if self._opened is None:
            self._opened = now
        counts = self._open.get((model, step.rows))
        if counts is None:
            counts = self._open[model, step.rows] = _Counts(now)
        counts.end = now
        counts.forwards += 1
        counts.drafting += step.drafting
        counts.seconds += step.seconds
        counts.cut_tokens += step.cut_tokens
        counts.prompt_tokens += step.prompt_tokens
        counts.calls[step.cap] += 1
        return closed

    def due(self, now: float) -> list[tuple]:
        """The rows of the open interval if it has run ``interval_s`` by ``now``; none otherwise."""
        return self.close() if self._opened is not None and now - self._opened >= self.interval_s else []

    def close(self) -> list[tuple]:
        rows = [(self.run_id, model, n, c.start, c.end, c.forwards, c.drafting, c.seconds, c.cut_tokens,
                 c.prompt_tokens, *(c.calls[call] for call in CAP_CALLS)) for (model, n), c in self._open.items()]
        self._open, self._opened = {}, None
        return rows
