"""How much speculation a batch can afford, from the batch's own measured costs.

In a padded batch every row pays for the widest row: a step scores ``rows x width`` tokens, so
one row's long draft makes every other row's step dearer, and a draft that pays alone may not pay
in a full batch. The batched engine therefore caps the drafts of the rows its learning
controllers serve at a common length, ``cap`` (0: they decode plainly this step), and this
controller picks the cap that maximises the batch's goodput, from two things it measures on the
engine's own steps (no hand-set table; ``warm`` starts the cost fit from a calibrated profile):

- the step's cost as a function of the batch's shape and context, ``seconds = a + b * rows
  + c * rows * width + d * rows * [width > 1] + e * rows * context + f * rows * context * [width > 1]``,
  fitted by decayed least squares over every step (any batch size, any cap): ``d`` is the jump from
  one-token rows to multi-token ones, which on CPU costs more than the width alone says (other
  matrix kernels), and ``f`` its growth with the context the rows attend to (a multi-token
  forward's attention takes its masked path over every slot, each query over its row's cache), so
  that drafts that pay beside short prompts are not taken for paying beside long ones; ``context``
  is the caller's: the cache's slots per row;
- per cap, what one capped row gains per step: tokens emitted (1 + accepted drafts) and the batch
  width the cap led to, decayed means over every step taken under that cap.

Predicted goodput of cap ``c`` at ``rows`` rows: ``rows * tokens(c) / cost(rows, width(c))``. As a
batch fills, the wider forward costs more per row than the drafts bring, so the chosen cap shrinks
(to 0 where nothing pays), and grows back as the batch empties or the traffic copies more. A single
row is never capped: its own controller already weighs its drafts against plain decoding. Each cap
is tried ``min_trials`` times first; afterwards a fraction ``explore`` of steps tries a random cap
(seeded; while a row decodes plainly, only among the caps ``plain_slowdown`` allows), so a cap that
lost under other traffic is measured again, and cap 0 (plain decoding, the baseline every other cap
must beat) is taken at least once every ``plain_every`` batched steps: the
cost fit needs one-token-wide steps of full batches to price the jump to multi-token rows, and a
cap that keeps winning would otherwise starve it of them (a full batch then drifts into drafting
that loses, priced from stale costs).

The cap is chosen before the rows draft; once each row's own controller has cut its draft,
``afford`` cuts the bound rows' drafts further if a row is left with nothing to verify and the
step would cost it more than ``plain_slowdown`` allows (the engine and the replica both call it).
The bound is kept over a request's life, not step by step: each row carries a credit (``credits``),
the predicted seconds its tokens so far would have cost as plain steps of the same batches, with
the margin, less the predicted seconds its steps cost. A row ahead of that (its own drafts were
accepted) may pay for its neighbours' drafts out of its credit on a step where it verifies
nothing, until the credit is spent; a row with none (it only decoded plainly, or its own drafts
failed) keeps the per-step bound: credit widens the bound, never narrows it. Without it, a copying
row whose draft its gate cut for one step stopped every other row's drafts on that step.
The step counts as the cap it ran under, ``afford``'s cut: a cap's gain is what it brings where
it applies. Counted as the chosen cap's, a cap first tried while credits were still empty (a
batch's first steps) kept the gain of a plain step and was not chosen again.
A row whose draft the batch refuses altogether decodes plainly, and its controller learns a plain
step (``DecodeSession.overrule``), not a miss of its drafter.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from policies.guard import GuardConfig
from policies.validation import check_int

CAPS = (0, 2, 4, 8, 16)
FEATURES = 6  # of the cost fit (``_features``)
CONTEXT_UNIT = 1000.0  # tokens: context enters the fit in thousands, near the other features' scale


@dataclass
class _Mean:
    value: float = 0.0
    weight: float = 0.0
    count: int = 0

    def add(self, x: float, decay: float) -> None:
        self.weight = self.weight * decay + 1.0
        self.value += (x - self.value) / self.weight
        self.count += 1


@dataclass
class BatchDraftCap:
    caps: tuple[int, ...] = CAPS
    decay: float = 0.99  # per step: a half-life of ~70 steps, for costs and for each cap's gains
    min_trials: int = 3
    explore: float = 0.05
    plain_every: int = 32
    # while a row of the batch decodes plainly (its controller found nothing worth drafting), the
    # most a step may cost over a plain step of the same rows: that row gains nothing from the
    # others' drafts and pays for the wider forward, so without a bound the batch's goodput buys
    # copying rows' speed with open-ended rows' latency. The guard's own tolerance of a speculative
    # step against plain ones: a request is not made slower than plain decoding by its neighbours
    # either. Measured through the server (benchmarks/serve_tradeoff.py), a looser bound bought
    # little throughput at a few requests for a worse p95. None: the batch's goodput alone decides
    plain_slowdown: float | None = GuardConfig.off_margin
    seed: int = 0
    _tokens: dict[int, _Mean] = field(default_factory=dict, repr=False)  # cap -> tokens per capped row-step
    _width: dict[int, _Mean] = field(default_factory=dict, repr=False)  # cap -> the batch's width
    _xtx: list[list[float]] = field(default_factory=lambda: [[0.0] * FEATURES for _ in range(FEATURES)], repr=False)
    _xty: list[float] = field(default_factory=lambda: [0.0] * FEATURES, repr=False)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.caps or any(not isinstance(c, int) or isinstance(c, bool) or c < 0 for c in self.caps):
            raise ValueError(f"caps must be integers >= 0, got caps={self.caps!r}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got decay={self.decay!r}")
        check_int("min_trials", self.min_trials, 0)
        check_int("plain_every", self.plain_every, 1)
        self._steps = self._last_plain = 0  # batched steps chosen for, and the last one that was plain
        # times each cap was chosen: its first tries are counted here, not by the steps it ran (a cap a
        # plain row never affords would otherwise be tried forever)
        self._trials: dict[int, int] = {}
        if not 0 <= self.explore <= 1:
            raise ValueError(f"explore must be in [0, 1], got explore={self.explore!r}")
        if self.plain_slowdown is not None and not 0 <= self.plain_slowdown < float("inf"):
            raise ValueError(f"plain_slowdown must be >= 0 or None, got plain_slowdown={self.plain_slowdown!r}")
        self._rng = random.Random(self.seed)
        self._coef: list[float] | None = None  # the cost fit's weights ([]: none yet) until the next step

    # -- choosing ------------------------------------------------------------------------------------

    def choose(self, rows: int, plain_rows: int = 0, slack: float = 0.0, context: float = 0.0) -> int | None:
        """The cap for a step of ``rows`` rows, ``plain_rows`` of them decoding plainly whatever the
        cap, the least credit among them ``slack`` seconds, at ``context`` slots; None: no cap (a
        single row)."""
        if rows <= 1:
            return None
        self._steps += 1
        untried = [c for c in self.caps if self._trials.get(c, 0) < self.min_trials]
        if untried:
            chosen = untried[0]
        elif 0 in self.caps and self._steps - self._last_plain >= self.plain_every:
            chosen = 0
        elif self._rng.random() < self.explore:  # a try is bound too: a plain row pays for it alike
            chosen = self._rng.choice(self.allowed(rows, plain_rows, slack, context))
        else:
            predicted = self.predicted_goodput(rows, context)
            chosen = max(self.allowed(rows, plain_rows, slack, context), key=lambda c: predicted.get(c, 0.0))
        if chosen == 0:
            self._last_plain = self._steps
        self._trials[chosen] = self._trials.get(chosen, 0) + 1
        return chosen

    def allowed(self, rows: int, plain_rows: int = 0, slack: float = 0.0, context: float = 0.0) -> tuple[int, ...]:
        """The caps a step of ``rows`` rows may take while ``plain_rows`` of them decode plainly: those
        whose measured width costs at most ``1 + plain_slowdown`` plain steps plus ``slack`` seconds
        (at least 0), the least credit among those rows (all while no row is plain, there is no
        bound, or nothing prices a step yet); cap 0, or the smallest, always."""
        bound = self.cost(rows, 1, context) if plain_rows and self.plain_slowdown is not None else None
        if bound is None or bound <= 0:  # a fit extrapolated below zero prices nothing
            return self.caps
        limit = (1 + self.plain_slowdown) * bound + max(0.0, slack)
        return tuple(c for c in self.caps if c == 0 or (c in self._width and self.cost(rows, self._width[c].value, context) <= limit)
                     ) or (min(self.caps),)

    def afford(self, lengths: Sequence[int], bound: Sequence[bool], cap: int,
               scored: Callable[[list[int]], float], credit: Sequence[float] | None = None, context: float = 0.0) -> int:
        """The largest cap up to ``cap`` that a step's drafts can afford once they are known.

        ``choose`` comes before drafting and counts as plain only the rows whose controllers planned
        no draft, but a row's gate may still cut its draft to nothing, and that row then pays for
        the others' drafts as much. ``lengths``: each row's draft as its own controller cut it;
        ``bound``: the rows the cap binds; ``scored``: the tokens a forward over rows that wide
        scores; ``credit``: each row's (``credits``; none: 0). While any row would verify nothing,
        the step's predicted cost may exceed a plain step of the same rows by ``plain_slowdown``
        plus the least credit among those rows (at least 0) at most; the bound rows' drafts are cut
        to the largest cap that keeps to it (0, or the smallest cap, when none does)."""
        if not cap or self.plain_slowdown is None or all(lengths):  # every row verifies: nothing to bound
            return cap
        base = self.cost(len(lengths), 1, context)
        if base is None or base <= 0:
            return cap
        slack = min((c for c, n in zip(credit, lengths) if not n), default=0.0) if credit is not None else 0.0
        slack = max(0.0, slack)  # a row behind (its own drafts failed) keeps the per-step bound, no stricter
        limit = (1 + self.plain_slowdown) * base + slack
        for c in sorted({cap, *(c for c in self.caps if c < cap)}, reverse=True):
            widths = [1 + (min(n, c) if b else n) for n, b in zip(lengths, bound)]
            if min(widths) > 1 or self.cost(len(widths), scored(widths) / len(widths), context) <= limit:
                return c
        return 0 if 0 in self.caps else min(self.caps)

    def credits(self, width: float, emitted: Sequence[int], context: float = 0.0) -> list[float] | None:
        """What a step of ``len(emitted)`` rows, ``width`` tokens wide, adds to each row's credit:
        its ``emitted`` tokens priced as plain steps of these rows, with the margin, less the step's
        predicted cost (both from the fit, so the machine's swings cancel). None while there is no
        bound or nothing prices a step."""
        rows = len(emitted)
        if self.plain_slowdown is None or not rows:
            return None
        coef = self._fit()
        if coef is None:
            return None
        base, spent = _price(coef, rows, 1, context), _price(coef, rows, width, context)
        if base <= 0:
            return None
        return [(1 + self.plain_slowdown) * base * n - spent for n in emitted]

    def predicted_goodput(self, rows: int, context: float = 0.0) -> dict[int, float]:
        """Tokens per second the batch would make at ``rows`` rows and ``context`` slots under each measured cap."""
        out = {}
        for cap in self.caps:
            tokens, width = self._tokens.get(cap), self._width.get(cap)
            if tokens is None or not tokens.count:
                continue
            seconds = self.cost(rows, width.value, context)
            if seconds is not None and seconds > 0:
                out[cap] = rows * tokens.value / seconds
        return out

    def cost(self, rows: int, width: float, context: float = 0.0) -> float | None:
        """Predicted seconds of a step of ``rows`` rows ``width`` tokens wide at ``context`` slots; None
        before the fit."""
        coef = self._fit()
        return None if coef is None else _price(coef, rows, width, context)

    def _fit(self) -> list[float] | None:
        """The cost fit's weights, solved once per observed step: a step prices a dozen shapes."""
        if self._coef is None:
            self._coef = _solve(self._xtx, self._xty) or []
        return self._coef or None

    # -- learning ------------------------------------------------------------------------------------

    def observe(self, rows: int, width: float, seconds: float, cap: int | None = None, capped_rows: int = 0,
                capped_tokens: int = 0, context: float = 0.0) -> None:
        """A step of ``rows`` rows, ``width`` tokens wide, at ``context`` slots, took ``seconds``;
        under ``cap`` (None: no cap applied) its ``capped_rows`` rows emitted ``capped_tokens``
        tokens. A packed forward (each row only its own tokens) is ``width`` = the tokens it scored
        over ``rows``."""
        if seconds <= 0 or rows < 1 or width < 1 or context < 0:
            return
        x = _features(rows, width, context)
        self._coef = None
        for i in range(FEATURES):
            self._xty[i] = self._xty[i] * self.decay + x[i] * seconds
            for j in range(FEATURES):
                self._xtx[i][j] = self._xtx[i][j] * self.decay + x[i] * x[j]
        if cap is not None and capped_rows > 0:
            self._tokens.setdefault(cap, _Mean()).add(capped_tokens / capped_rows, self.decay)
            self._width.setdefault(cap, _Mean()).add(width, self.decay)

    def warm(self, samples) -> int:
        """Start the cost fit from timed steps, ``(rows, width, seconds[, context])`` each (a
        profile's verify samples from ``calibrate --batch-sizes``), as if they were the first steps
        observed: live steps outweigh them as they decay. Gains per cap are traffic's, never carried
        over. Returns how many samples were taken."""
        taken = 0
        for rows, width, seconds, *context in samples:
            context = context[0] if context else 0.0
            if seconds > 0 and rows >= 1 and width >= 1 and context >= 0:
                self.observe(rows, width, seconds, context=context)
                taken += 1
        return taken

    def measured(self) -> dict[int, dict[str, float]]:
        """Per tried cap: tokens per capped row-step and the batch width it led to."""
        return {cap: {"tokens_per_row_step": m.value, "width": self._width[cap].value, "steps": m.count}
                for cap, m in sorted(self._tokens.items()) if m.count}


def _price(coef: list[float], rows: int, width: float, context: float = 0.0) -> float:
    return sum(c * x for c, x in zip(coef, _features(rows, width, context)))


def _features(rows: int, width: float, context: float = 0.0) -> tuple[float, ...]:
    multi = 1.0 if width > 1 else 0.0
    spanned = rows * context / CONTEXT_UNIT
    return 1.0, float(rows), float(rows * width), rows * multi, spanned, spanned * multi


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """``a x = b`` for a small system (Gaussian elimination, partial pivoting) with a little ridge,
    so that steps all of one batch size (``1`` and ``rows`` collinear) still give a usable fit;
    None before any step."""
    scale = max((abs(v) for row in a for v in row), default=0.0)
    if scale == 0:
        return None
    # a column never seen (no multi-token step yet) gets a weight of 0 rather than no solution
    m = [[v * (1 + 1e-6) + 1e-12 * scale if i == j else v for j, v in enumerate(row)] + [rhs]
         for i, (row, rhs) in enumerate(zip(a, b))]
    n = len(b)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12 * scale:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [v - f * p for v, p in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]
