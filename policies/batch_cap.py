"""How much speculation a batch can afford, from the batch's own measured costs.

Every row's draft competes with the others' tokens for the same forward: a wider step costs every
row more, and on CPU a multi-token row costs more than its width alone says (other matrix kernels),
so a draft that pays alone may not pay in a full batch. The batched engine therefore lets each
row draft what its own controller and match gate keep, and then cuts the drafts of the rows that
learning controllers serve, each to a length ``c_row`` (0: it decodes plainly this step), chosen by
``BatchDraftCap.allot`` to maximise the step's expected goodput (or its power, below):

    sum over rows of expected_tokens(row, c_row)  /  cost(rows, width(c_row...), context)

over every common longest length ``c`` (``c_row = min(draft, c)``, ``pick``) and, row by row, the
draft tokens taken in order of what they add ("Per row", below).

- expected tokens are each row's own, from its match gate's acceptance estimate for the very match
  it drafted from (``DecodeSession.expected``): a copying row's long match counts for many tokens,
  an open-ended row's weak one for barely one. Nothing has to be learned per length for the batch,
  and nothing is confounded with which rows happened to share the batch when a length was tried;
- the step's cost is a function of the batch's shape and context, two linear fits by decayed least
  squares (``warm`` starts them from a calibrated profile; no hand-set table): a plain step, one
  token a row, costs ``a + b * rows + e * rows * context``; a wider one
  ``a' + b' * rows + c' * rows * width + e' * rows * context``, its own intercept and slopes holding
  the jump from one-token rows to multi-token ones and its growth with the context the rows attend
  to (so that drafts that pay beside short prompts are not taken for paying beside long ones).
  ``context`` is the caller's: the cache's slots per row; a packed step's width is the tokens it
  scores over its rows. Each fit learns from its own kind of step alone and decays only as more of
  that kind arrive. A single row's steps have two fits of their own (it is never cut, but the
  engine prices its own forward on a step that carried a prompt): alone, a multi-token forward
  costs far more over a one-token one than in a batch (the weights' pass, paid once, no longer
  hides the other kernels). With ``rows`` a linear feature of one fit, single-row steps raised a
  batch's price of its smallest drafts by more than the bound below, so the bound refused drafts
  that cost a batch next to nothing and the fit, seeing none, never learned better; and a spell
  of one-row traffic shifted what batches had taught. One fit
  over both kinds (the jump a feature of it) priced a plain step from drafting steps whenever plain
  ones were few: drafting steps cannot tell the plain step's cost
  from the jump, and while a batch drafts its slots grow with the drafts, so the drafts' cost
  passed for the context's. A plain step was then priced at several times its cost, every draft
  looked cheap beside it, and every draft got past the bound below. Until a plain step of a
  batch has been timed, one is made plain (``pick``) to price it.

Per row (``cut``): a forward's cost follows the tokens it scores, not whose they are, so one
common length spends them badly where the rows' drafts differ: a copying row's long match and an
open-ended row's weak one are cut alike, and a bound that affords a few draft tokens gets them
spread over every drafting row, each too short to pay. So ``allot`` also weighs the bound rows'
draft tokens taken one at a time, each time the one that adds the most expected tokens (a row's
next token only after its previous one), and keeps whichever length per row, among those and the
common cuts, is worth the most under the same bound: never less than the common cut alone.

As a batch fills, a wider forward costs more than the drafts bring and the cut shrinks (to 0 where
nothing pays); it grows back as the batch empties or the traffic copies more. A single row is never
cut: its own controller already weighs its drafts against plain decoding. Every ``plain_every``
batched steps one is plain whatever pays: the cost fit needs one-token-wide steps of full batches to
price the jump to multi-token rows, and drafting that keeps winning would otherwise starve it of
them (a full batch then drifts into drafting that loses, priced from stale costs).

The bound (``plain_slowdown``; None: off): a row that verifies nothing this step (its
controller or gate found nothing worth drafting) gains nothing from the others' drafts and pays for
the wider forward, and one with a weak draft gains little more. So a length is allowed only if,
for every row, the step costs at most ``1 + plain_slowdown`` plain steps of the same rows per token
the row expects from it (one, for a row that verifies nothing), plus the row's credit: no request
is made slower than plain decoding by its neighbours beyond the bound. A row's credit (``credits``)
is kept over its request's life: the predicted seconds its tokens so far would have cost as plain
steps of the same batches, with the margin, less the predicted seconds its steps cost. A row ahead of that (its own drafts were
accepted) may pay for its neighbours' drafts out of its credit; a row with none keeps the per-step
bound: credit widens the bound, never narrows it. Without it, a copying row whose gate cut its draft
for one step stopped every other row's drafts on that step. A row whose draft the batch cuts to
nothing decodes plainly, and its controller learns a plain step (``DecodeSession.overrule``), not a
miss of its drafter.

The objective (``objective``): goodput counts a token as a token whichever row it comes from, so a
cut that doubles a copying row's tokens pays for a wider step that every open-ended row beside it
waits through; those rows, which gain nothing from drafts, are the latency tail. "power" weighs the
two as the classical power of a queue does (throughput over delay): the step's goodput over the
seconds per token of its slowest row, the step's cost over that row's expected tokens (one, for a
row that verifies nothing). While a row drafts nothing, a longer cut must raise the batch's tokens
by twice the share it raises the step's cost, not once; where every row drafts, the slowest row's
own gain counts toward it. The trade is priced by who pays for it, with no bound to set. On
CPU, where the jump to multi-token rows is steep, it left a batch of four almost never drafting,
and the bound did better at both four and eight (benchmarks/RESULTS.md): goodput is the default.

The machine's pace: the bound weighs a wider step against a plain one, so it needs their ratio,
and each fit learns from its own kind of step alone, at whatever speed the machine ran when that
kind last came. A spell of plain traffic taught the plain fit at one speed and a spell of drafting
the wider fit at another; on a machine whose speed swings by a quarter within seconds, the ratio a
batch started from was off by as much, so the bound let through drafts that cost more than it
allows, or refused ones that cost far less (replaying a server's step records through the cap
showed it). So the cap keeps a pace (``pace``): the seconds a step takes per second its fit prices
it at, a decayed geometric mean over the last steps of any kind (their common speed), and each fit
learns a step's seconds over the pace. The fits then learn shapes in common units, their ratio is
taught where both kinds run close together (as they do while rows draft: a plain step at least
every ``plain_every``), and a price is its fit's times the pace: seconds at the machine's speed now.
Pace and fits share the level, so a spell of one kind still leaves a little of its speed in that
kind's fit, in proportion to how fast the fit learns against the pace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from policies.validation import check_int

OBJECTIVES = ("goodput", "power")  # what a cut maximises (module docstring)
CUTS = ("per-row", "common")  # how the bound rows' drafts are cut (module docstring, "Per row")
FEATURES = {False: 3, True: 4}  # of each cost fit (``_features``): plain steps' and wider ones'
# each fit's key: (wider than one token a row, a single row); a single row's steps, never cut, are
# priced apart from batches' (module docstring)
FITS = [(wide, alone) for wide in (False, True) for alone in (False, True)]
CONTEXT_UNIT = 1000.0  # tokens: context enters the fit in thousands, near the other features' scale
# a ridge on each fit's context slope alone, in the fit's units (decayed steps x (rows x thousands
# of slots)^2 about their mean): while the steps' contexts barely differ the slope stays near 0 and
# a longer context is priced as the ones seen, not by a slope of timing noise stretched over the
# distance; steps whose contexts differ by hundreds of slots outweigh it
CONTEXT_PRIOR = 0.05
# a step over this many times its price (at the pace before it) is learned at that: a real slowdown
# still gets through (the pace follows it step by step), a single stall does not skew a fit
STALL = 3.0


@dataclass
class BatchDraftCap:
    decay: float = 0.99  # per step of the fit's kind (one token wide, or wider): a half-life of ~70 of them
    plain_every: int = 32
    # per observed step of any kind: a half-life of one step. The machine's speed swings within
    # seconds; replayed through the cap, one server's step records were priced best by the pace of the
    # last step or two (slower paces left more of each swing to the fits). 1: no pace, each fit
    # prices at the speed its own kind last ran
    pace_decay: float = 0.5
    # the most a step may cost a row over a plain step of the same rows, per token the row expects
    # from it (the bound, module docstring). None: the batch's goodput alone decides. 0.05 by a rule
    # fixed before the runs, on the corpus's dev prompts, at 4 and 8 requests in flight
    # (benchmarks/serve_tradeoff.py, ``choose_variant``): of no bound, this one and the "power"
    # objective, it left ``adaptive``'s worst ratio against plain decoding and drafting always, over
    # throughput and p95, the highest. Without a bound, open-ended requests paid for copying ones'
    # drafts at 8 in flight: p95 behind plain decoding's in every round; with it, 4 in flight lose
    # some throughput to drafting always (benchmarks/RESULTS.md)
    plain_slowdown: float | None = 0.05
    # what a cut maximises (module docstring, "The objective"): "goodput", the batch's expected tokens
    # per second, or "power", that over the seconds per token of the step's slowest row
    objective: str = "goodput"
    # how the bound rows' drafts are cut (module docstring, "Per row"): "per-row", each row's own
    # length, or "common", one longest length for every row
    cut: str = "per-row"
    # each fit's sums, by its key in FITS
    _sums: dict[tuple[bool, bool], tuple[list[list[float]], list[float]]] = field(
        default_factory=lambda: {key: ([[0.0] * FEATURES[key[0]] for _ in range(FEATURES[key[0]])],
                                       [0.0] * FEATURES[key[0]]) for key in FITS},
        repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got decay={self.decay!r}")
        if not 0 <= self.pace_decay <= 1:
            raise ValueError(f"pace_decay must be in [0, 1], got pace_decay={self.pace_decay!r}")
        check_int("plain_every", self.plain_every, 1)
        if self.plain_slowdown is not None and not 0 <= self.plain_slowdown < float("inf"):
            raise ValueError(f"plain_slowdown must be >= 0 or None, got plain_slowdown={self.plain_slowdown!r}")
        if self.cut not in CUTS:
            raise ValueError(f"cut must be one of {', '.join(CUTS)}, got cut={self.cut!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got objective={self.objective!r}")
        self._steps = self._last_plain = 0  # batched steps picked for, and the last one that was plain
        self._coef: dict[tuple[bool, bool], list[float] | None] | None = None  # each fit's weights (None: no step of its kind yet)
        self._log_pace = 0.0  # 0: the units of the samples ``warm`` took (a calibrated profile's seconds)

    # -- choosing ------------------------------------------------------------------------------------

    def pick(self, lengths: Sequence[int], expected: Sequence[Sequence[float] | None], bound: Sequence[bool],
             scored: Callable[[list[int]], float], credit: Sequence[float] | None = None,
             context: float = 0.0) -> int | None:
        """The longest draft the ``bound`` rows of a step may verify (each keeps at most that much of
        its own): the length with the most expected tokens per predicted second that the bound
        allows; None: no cut (a single row, no bound row drafting, or nothing prices a step yet).
        The common cut alone (``cut="common"``), whatever the cap's ``cut``.

        ``lengths``: each row's draft as its own controller and gate kept it; ``expected``: per row,
        the expected tokens of its step at each length ``0..lengths[row]`` (None: nothing estimates
        it, counted as one token at any length); ``scored``: the tokens a forward over rows that wide
        scores; ``credit``: each row's (``credits``; none: 0); ``context``: slots per row."""
        kept = self._choose(lengths, expected, bound, scored, credit, context, per_row=False)
        if kept is None:
            return None
        return max(k for k, b in zip(kept, bound) if b)

    def allot(self, lengths: Sequence[int], expected: Sequence[Sequence[float] | None], bound: Sequence[bool],
              scored: Callable[[list[int]], float], credit: Sequence[float] | None = None,
              context: float = 0.0) -> list[int] | None:
        """How much of its draft each row of a step verifies (a row not ``bound`` keeps all of its
        own); None: no cut. Under ``cut="per-row"`` the bound rows' lengths are chosen row by row
        (module docstring, "Per row"); under ``"common"`` they are ``pick``'s common cut. Arguments
        as ``pick``'s."""
        return self._choose(lengths, expected, bound, scored, credit, context, per_row=self.cut == "per-row")

    def _choose(self, lengths: Sequence[int], expected: Sequence[Sequence[float] | None], bound: Sequence[bool],
                scored: Callable[[list[int]], float], credit: Sequence[float] | None, context: float,
                per_row: bool) -> list[int] | None:
        rows = len(lengths)
        if rows <= 1 or not any(bound):
            return None
        self._steps += 1
        longest = max(n for n, b in zip(lengths, bound) if b)
        if not any(lengths):  # a plain step already
            self._last_plain = self._steps
        if not longest:  # nothing of the bound rows' to cut
            return None
        plain = [0 if b else n for n, b in zip(lengths, bound)]
        if self._steps - self._last_plain >= self.plain_every:
            self._last_plain = self._steps
            return plain
        base, drafting_priced = self.cost(rows, 1, context), self._fit()[True, False] is not None
        if base is None and drafting_priced:  # drafting steps timed, never a plain one
            self._last_plain = self._steps
            return plain
        if base is None or base <= 0 or not drafting_priced:  # cold, or a fit below zero: nothing priced
            return None
        credit = credit if credit is not None else [0.0] * rows
        estimate = [e if e is not None else [1.0] * (n + 1) for n, e in zip(lengths, expected)]
        best, best_value, best_tokens = plain, -1.0, 0
        for kept in _allotments(lengths, estimate, bound, per_row):
            widths = [1 + k for k in kept]
            tokens = [e[k] for k, e in zip(kept, estimate)]
            spent = self.cost(rows, scored(widths) / rows, context)
            drafted = sum(k for k, b in zip(kept, bound) if b)
            if drafted and self.plain_slowdown is not None and any(
                    spent > (1 + self.plain_slowdown) * base * t + max(0.0, x) for t, x in zip(tokens, credit)):
                continue  # a row would be slower than plain decoding by more than the bound and its credit
            value = self._value(tokens, spent)
            if value > best_value or (value == best_value and drafted < best_tokens):  # ties: fewer draft tokens
                best, best_value, best_tokens = kept, value, drafted
        if not best_tokens and not any(n for n, b in zip(lengths, bound) if not b):
            self._last_plain = self._steps
        return best

    def _value(self, tokens: list[float], spent: float) -> float:
        """What a cut is worth: the objective of its step, ``tokens`` expected per row in ``spent`` seconds."""
        if spent <= 0:
            return float("inf")
        goodput = sum(tokens) / spent
        # power: goodput over the slowest row's seconds per token (at least a plain row's, a step)
        return goodput if self.objective == "goodput" else goodput * min(tokens) / spent

    def credits(self, width: float, emitted: Sequence[int], context: float = 0.0) -> list[float] | None:
        """What a step of ``len(emitted)`` rows, ``width`` tokens wide, adds to each row's credit:
        its ``emitted`` tokens priced as plain steps of these rows, with the margin, less the step's
        predicted cost (both from the fit, so the machine's swings cancel). None while there is no
        bound or nothing prices a step."""
        rows = len(emitted)
        if self.plain_slowdown is None or not rows:
            return None
        base, spent = self.cost(rows, 1, context), self.cost(rows, width, context)
        if base is None or spent is None or base <= 0:
            return None
        return [(1 + self.plain_slowdown) * base * n - spent for n in emitted]

    def cost(self, rows: int, width: float, context: float = 0.0) -> float | None:
        """Predicted seconds of a step of ``rows`` rows ``width`` tokens wide at ``context`` slots; None
        before the fit."""
        fits = self._fit()
        coef = fits[width > 1, rows == 1]
        if coef is None:
            return None
        price = _price(coef, rows, width, context)
        plain = fits[False, rows == 1] if width > 1 else None
        if plain is not None:
            # a wider forward does a plain one's work and more: the wide fit, extrapolated to the
            # narrow widths it has seldom timed (a spell of long drafts teaches it wide ones), must
            # not price one below a plain step. Below it, a draft passed a bound of 0 and every
            # row, open-ended ones too, gained credit from the step, which let through the next
            price = max(price, _price(plain, rows, 1, context))
        return price * self.pace

    @property
    def pace(self) -> float:
        """Seconds a step takes now per second its fit prices it at (module docstring)."""
        return math.exp(self._log_pace)

    def _fit(self) -> dict[tuple[bool, bool], list[float] | None]:
        """Each fit's weights, solved once per observed step: a step prices a dozen shapes."""
        if self._coef is None:
            self._coef = {key: _solve(a, b, prior={len(b) - 1: CONTEXT_PRIOR}) for key, (a, b) in self._sums.items()}
        return self._coef

    # -- learning ------------------------------------------------------------------------------------

    def observe(self, rows: int, width: float, seconds: float, context: float = 0.0) -> None:
        """A step of ``rows`` rows, ``width`` tokens wide, at ``context`` slots, took ``seconds``. A
        packed forward (each row only its own tokens) is ``width`` = the tokens it scored over ``rows``."""
        if seconds <= 0 or rows < 1 or width < 1 or context < 0:
            return
        key = (width > 1, rows == 1)
        coef = self._fit()[key]
        # a fit of fewer steps than twice its features prices from too little to tell the pace by
        steady = self._sums[key][0][0][0] >= 2 * FEATURES[width > 1]  # the decayed count of its steps
        priced = _price(coef, rows, width, context) if coef is not None and steady else None
        pace = self.pace
        if priced is not None and priced > 0:
            # a stalled step (the machine preempted, a collection) counts at most STALL times its
            # price: it would otherwise teach its shape's fit a cost its neighbours never pay
            seconds = min(seconds, STALL * priced * pace)
            self._log_pace = self.pace_decay * self._log_pace + (1 - self.pace_decay) * math.log(seconds / priced)
        self._learn(rows, width, seconds / pace, context)

    def _learn(self, rows: int, width: float, seconds: float, context: float) -> None:
        """One step's sample into its kind's fit, in the fit's units."""
        x = _features(rows, width, context)
        self._coef = None
        xtx, xty = self._sums[width > 1, rows == 1]  # only the samples of its own kind decay
        for i, xi in enumerate(x):
            xty[i] = xty[i] * self.decay + xi * seconds
            for j, xj in enumerate(x):
                xtx[i][j] = xtx[i][j] * self.decay + xi * xj

    def warm(self, samples) -> int:
        """Start the cost fit from timed steps, ``(rows, width, seconds[, context])`` each (a
        profile's verify samples from ``calibrate --batch-sizes``), as if they were the first steps
        observed: live steps outweigh them as they decay. Returns how many samples were taken."""
        taken = 0
        for rows, width, seconds, *context in samples:
            context = context[0] if context else 0.0
            if seconds > 0 and rows >= 1 and width >= 1 and context >= 0:
                self._learn(rows, width, seconds, context)  # they set the units: the pace starts at 1
                taken += 1
        return taken


def _allotments(lengths: Sequence[int], expected: Sequence[Sequence[float]], bound: Sequence[bool],
                per_row: bool):
    """The kept lengths a step may verify, row by row, as ``_choose`` weighs them: every common cut
    ``0..longest`` of the bound rows' drafts, then (``per_row``) the bound rows' draft tokens taken
    one at a time, each time the one that adds the most expected tokens (a row's next token only
    after its previous one), from none to all. Rows not bound keep their own."""
    longest = max(n for n, b in zip(lengths, bound) if b)
    for c in range(longest + 1):
        yield [min(n, c) if b else n for n, b in zip(lengths, bound)]
    if not per_row:
        return
    kept = [0 if b else n for n, b in zip(lengths, bound)]
    while True:
        gains = [(expected[i][kept[i] + 1] - expected[i][kept[i]], -i) for i, (n, b) in enumerate(zip(lengths, bound))
                 if b and kept[i] < n]
        if not gains:
            return
        kept[-max(gains)[1]] += 1  # ties: the first row
        yield list(kept)


def _price(coef: list[float], rows: int, width: float, context: float = 0.0) -> float:
    return sum(c * x for c, x in zip(coef, _features(rows, width, context)))


def _features(rows: int, width: float, context: float = 0.0) -> tuple[float, ...]:
    """The feature row of a step in its kind's fit: a plain step's, or a wider one's."""
    spanned = rows * context / CONTEXT_UNIT
    return (1.0, float(rows), float(rows * width), spanned) if width > 1 else (1.0, float(rows), spanned)


def _solve(a: list[list[float]], b: list[float], prior: dict[int, float] | None = None) -> list[float] | None:
    """``a x = b`` for a small system (Gaussian elimination, partial pivoting) with a little ridge,
    so that steps all of one batch size (``1`` and ``rows`` collinear) still give a usable fit, and
    ``prior``'s ridge on the columns it names; None before any step."""
    scale = max((abs(v) for row in a for v in row), default=0.0)
    if scale == 0:
        return None
    prior = prior or {}
    # a column never seen (context never given), or one collinear with another, still leaves a solution
    m = [[v * (1 + 1e-6) + 1e-12 * scale + prior.get(i, 0.0) if i == j else v for j, v in enumerate(row)] + [rhs]
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
