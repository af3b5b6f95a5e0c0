"""The batch's cut of its rows' drafts (issue 17): chosen from measured step costs and each row's
own expected tokens, no table."""

import random

import pytest

from policies.acceptance import expected_tokens_by_k
from policies.batch_cap import BatchDraftCap, _price


def cpu_like_cost(rows: int, width: float) -> float:
    """A forward that costs more the more tokens it scores, with a jump from one-token rows to
    multi-token ones (the shape the cut must weigh)."""
    return 0.06 + 0.002 * rows + 0.012 * rows * width + (0.01 * rows if width > 1 else 0.0)


def gentle(rows: int, width: float) -> float:
    """A packed-like forward with no jump: drafts cost by the tokens they add. One row of 4
    drafting k, over a plain step of the 4: k=2 -> 1.08, k=4 -> 1.15, k=8 -> 1.30."""
    return 0.05 + 0.01 * rows + 0.004 * rows * width


def warmed(cost=cpu_like_cost, **kwargs) -> BatchDraftCap:
    cap = BatchDraftCap(**{"plain_every": 10_000, **kwargs})
    cap.warm([(rows, width, cost(rows, width)) for rows in (1, 2, 4, 8) for width in (1, 1.5, 2, 3, 5, 9, 17)])
    return cap


def copying(k: int, rate: float = 0.95) -> list[float]:
    """Expected tokens at each length 0..k of a draft each token of which is accepted with ``rate``."""
    return expected_tokens_by_k([rate] * k)


PACKED = sum  # each row's own tokens
PADDED = lambda widths: len(widths) * max(widths)  # noqa: E731


def test_a_single_row_or_a_batch_of_fixed_configs_is_never_cut():
    cap = warmed()
    assert cap.pick([8], [copying(8)], [True], PACKED) is None
    assert cap.pick([8, 8], [copying(8)] * 2, [False, False], PACKED) is None  # the callers' own choices stand
    assert cap.pick([0, 0], [[1.0]] * 2, [True, True], PACKED) is None  # nothing drafted: nothing to cut
    assert BatchDraftCap().pick([8, 8], [copying(8)] * 2, [True] * 2, PACKED) is None  # cold: nothing prices a step


def test_the_step_cost_is_learned_as_a_function_of_the_batch_shape():
    cap = BatchDraftCap()
    for rows in (2, 5, 8):
        for width in (1, 3, 9, 17):
            cap.observe(rows, width, cpu_like_cost(rows, width))
    for rows, width in ((3, 5), (8, 1), (6, 12)):
        assert cap.cost(rows, width) == pytest.approx(cpu_like_cost(rows, width), rel=1e-3)


def test_a_calibrated_profile_prices_steps_before_the_first_and_live_steps_take_over():
    timed = [(rows, width, cpu_like_cost(rows, width)) for rows in (1, 2, 4, 8) for width in (1, 2, 3, 5, 9)]
    cap = BatchDraftCap()
    assert cap.cost(6, 3) is None  # cold: nothing to price a step with
    assert cap.warm(timed + [(4, 3, 0.0)]) == len(timed)  # a sample without a time is left out
    assert cap.cost(6, 3) == pytest.approx(cpu_like_cost(6, 3), rel=1e-3)
    for _ in range(400):  # the machine is half as fast as at calibration: the live steps win
        for rows, width in ((2, 1), (5, 3), (8, 9), (3, 5)):
            cap.observe(rows, width, 2 * cpu_like_cost(rows, width))
    assert cap.cost(6, 3) == pytest.approx(2 * cpu_like_cost(6, 3), rel=0.02)


def test_a_wider_steps_price_against_a_plain_ones_is_not_taken_from_the_machines_swings():
    """Plain traffic on a fast spell, then drafting on a slow one: each fit learned its kind at
    another speed, and without the pace the two prices' ratio (what the bound weighs) came out half
    as large again as the shapes'. With it the ratio stays near the shapes' (a spell still leaves a
    little of its speed in the fit it teaches, while the pace catches up), and a price is at the
    speed the machine runs now."""
    cap = warmed(gentle)
    for _ in range(200):  # a server that has run a while: its fits hold many steps, not a profile's few
        for shape in ((4, 1), (4, 5), (8, 1), (8, 9)):
            cap.observe(*shape, gentle(*shape))
    for _ in range(300):
        cap.observe(4, 1, 0.8 * gentle(4, 1))
    assert cap.cost(4, 1) == pytest.approx(0.8 * gentle(4, 1), rel=0.01)
    for _ in range(300):
        cap.observe(4, 5, 1.25 * gentle(4, 5))
    assert cap.cost(4, 5) / cap.cost(4, 1) == pytest.approx(gentle(4, 5) / gentle(4, 1), rel=0.05)
    assert cap.cost(4, 1) == pytest.approx(1.25 * gentle(4, 1), rel=0.05)
    assert cap.cost(8, 9) / cap.cost(8, 1) == pytest.approx(gentle(8, 9) / gentle(8, 1), rel=0.05)
    cap.observe(4, 5, 20 * gentle(4, 5))  # a stalled step: the steps after it bring the pace back
    for _ in range(10):
        cap.observe(4, 5, 1.25 * gentle(4, 5))
    assert cap.cost(4, 1) == pytest.approx(1.25 * gentle(4, 1), rel=0.05)


def alone_and_batched(rows: int, width: float) -> float:
    """CPU-like: alone, a multi-token forward costs much more than a one-token one; in a batch,
    where one pass over the weights serves every row, a few more tokens cost next to nothing."""
    if rows == 1:
        return 0.055 + (0.02 + 0.004 * width if width > 1 else 0.0)
    return 0.055 + 0.008 * rows + 0.0006 * rows * width


def test_single_row_steps_are_priced_apart_from_batches():
    """A single row is never cut; its steps in the batches' fits (``rows`` a linear feature) priced a
    batch's smallest drafts above the bound, and a spell of one-row traffic shifted what batches
    taught. Its own forward is still priced (the engine charges it so on steps carrying prompts)."""
    cap = BatchDraftCap(plain_every=10_000)
    shapes = [(rows, width) for rows in (1, 2, 4, 8) for width in (1, 1.25, 1.5, 2, 3, 5, 9)]
    assert cap.warm([(r, w, alone_and_batched(r, w), 100) for r, w in shapes]) == len(shapes)
    priced = {(r, w): cap.cost(r, w, 100) for r, w in shapes if r > 1}
    for (rows, width), seconds in [*priced.items(), ((1, 1), cap.cost(1, 1, 100)), ((1, 5), cap.cost(1, 5, 100))]:
        assert seconds == pytest.approx(alone_and_batched(rows, width), rel=1e-3)
    for _ in range(1000):  # one-row traffic at the calibrated speed: the batches' prices stay as they were
        cap.observe(1, 1, 0.055, 100)
        cap.observe(1, 5, 0.095, 100)
    assert {shape: cap.cost(*shape, 100) for shape in priced} == pytest.approx(priced, rel=1e-4)
    # a copying row beside three that draft nothing: one more token costs the batch under 1 %, well
    # inside the bound, so the copying row drafts
    lengths, expected = [8, 0, 0, 0], [copying(8)] + [[1.0]] * 3
    assert cap.pick(lengths, expected, [True] * 4, PACKED, context=100) >= 1


@pytest.mark.parametrize("rows", [2, 3, 4, 8])
@pytest.mark.parametrize("rate", [0.3, 0.6, 0.9])
def test_the_cut_is_the_length_with_the_most_expected_tokens_per_second(rows, rate):
    """Against a brute force over every length, with the true costs: the fit is exact here."""
    cap = warmed(plain_slowdown=None)
    lengths, expected = [8] * rows, [copying(8, rate)] * rows
    for scored in (PACKED, PADDED):
        truth = {c: rows * expected[0][c] / cpu_like_cost(rows, scored([1 + c] * rows) / rows) for c in range(9)}
        assert cap.pick(lengths, expected, [True] * rows, scored) == max(truth, key=truth.get), (rows, rate)


@pytest.mark.parametrize("copiers", [1, 2, 4])
@pytest.mark.parametrize("rate", [0.6, 0.95])
def test_power_is_goodput_over_the_slowest_rows_seconds_per_token(copiers, rate):
    """Against a brute force over every length, with the true costs: copying rows beside rows that
    verify nothing, the cut maximising the step's tokens times its fewest over its cost squared."""
    cap = warmed(objective="power", plain_slowdown=None)
    lengths = [8] * copiers + [0] * (4 - copiers)
    expected = [copying(8, rate)] * copiers + [[1.0]] * (4 - copiers)
    truth = {}
    for c in range(9):
        tokens = [e[min(n, c)] for n, e in zip(lengths, expected)]
        seconds = cpu_like_cost(4, PACKED([1 + min(n, c) for n in lengths]) / 4)
        truth[c] = sum(tokens) * min(tokens) / seconds ** 2
    assert cap.pick(lengths, expected, [True] * 4, PACKED) == max(truth, key=truth.get)


def test_power_spares_the_rows_that_draft_nothing_where_goodput_would_not():
    """One copying row beside three open-ended ones: the wider step's jump makes the copier's
    tokens pay for the batch (goodput) but not for the three that wait through it (power); once
    every row copies, no row only waits and power drafts as goodput does."""
    lone, idle = [8, 0, 0, 0], [copying(8), [1.0], [1.0], [1.0]]
    assert warmed(plain_slowdown=None).pick(lone, idle, [True] * 4, PACKED) == 8
    power = warmed(objective="power", plain_slowdown=None)
    assert power.pick(lone, idle, [True] * 4, PACKED) == 0
    assert power.pick([8] * 4, [copying(8)] * 4, [True] * 4, PACKED) == 8


def test_drafts_that_pay_in_a_small_batch_are_cut_in_a_full_one():
    cap = warmed(plain_slowdown=None)
    modest = copying(8, 0.6)
    assert cap.pick([8, 8], [modest] * 2, [True] * 2, PADDED) > 0
    assert cap.pick([8] * 8, [modest] * 8, [True] * 8, PADDED) == 0


def test_each_row_counts_for_what_its_own_match_promises():
    """A copying row's strong match is worth a long draft beside open-ended rows' weak ones: the
    cut follows the rows' own expectations, not which lengths happened to pay before."""
    cap = warmed(gentle, plain_slowdown=None)
    weak, idle = copying(8, 0.05), [1.0]
    assert cap.pick([16, 0, 0, 0], [copying(16), idle, idle, idle], [True] * 4, PACKED) == 16
    assert cap.pick([8, 8, 8, 8], [weak] * 4, [True] * 4, PACKED) == 0
    assert cap.pick([8, 8, 8, 8], [copying(8)] * 4, [True] * 4, PACKED) == 8
    assert cap.pick([16, 0, 0, 0], [copying(16, 0.1), [1.0], [1.0], [1.0]], [True] * 4, PACKED) == 0
    # nothing estimates a draft (no gate): it counts as one token whatever its length
    assert cap.pick([16, 0, 0, 0], [None, [1.0], [1.0], [1.0]], [True] * 4, PACKED) == 0


def test_plain_decoding_is_measured_again_however_long_drafting_wins():
    cap = warmed(plain_every=20, plain_slowdown=None)
    picked = [cap.pick([8] * 4, [copying(8)] * 4, [True] * 4, PACKED) for _ in range(200)]
    assert picked.count(0) == 10 and set(picked) == {0, 8}
    assert max(len(run) for run in "".join("x" if c else "." for c in picked).split(".")) < 20
    # a step that is plain anyway counts: no plain step is forced right after one
    cap = warmed(plain_every=3, plain_slowdown=None)
    picked = [cap.pick(lengths, [copying(n) for n in lengths], [True] * 2, PACKED)
              for lengths in ([8, 8], [0, 0], [8, 8], [8, 8], [8, 8])]
    assert picked == [8, None, 8, 8, 0]


def test_a_row_that_verifies_nothing_bounds_what_the_others_drafts_may_cost_it():
    lengths, expected = [8, 0, 0, 0], [copying(8, 0.999), [1.0], [1.0], [1.0]]
    for slowdown, cut in ((None, 8), (0.2, 5), (0.1, 2), (0.05, 1), (0.0, 0)):
        assert warmed(gentle, plain_slowdown=slowdown).pick(lengths, expected, [True] * 4, PACKED) == cut, slowdown
    cap = warmed(gentle, plain_slowdown=0.1)
    assert cap.pick([8] * 4, [copying(8, 0.999)] * 4, [True] * 4, PACKED) == 8  # every row gains: no bound binds
    # a fixed config's row (not bound: its draft stays) that verifies nothing binds the others all the same
    assert cap.pick([8, 0, 5, 0], [copying(8, 0.999), [1.0], copying(5), [1.0]], [True, True, False, True], PACKED) == 0


def test_a_weak_draft_of_its_own_does_not_let_a_row_pay_for_its_neighbours():
    """A row that verifies a draft it will most likely reject is barely better off than one that
    verifies nothing: it is held to the bound by what it expects, not by whether it drafted."""
    cap = warmed(gentle, plain_slowdown=0.1)
    strong = copying(8, 0.999)
    # four rows one token wider cost 1.15 plain steps: a row expecting 1.02 tokens from it is held back
    assert cap.pick([8, 1, 1, 1], [strong] + [copying(1, 0.02)] * 3, [True] * 4, PACKED) == 0
    assert cap.pick([8, 1, 1, 1], [strong] + [copying(1, 0.9)] * 3, [True] * 4, PACKED) == 8


def test_a_row_ahead_of_plain_decoding_pays_for_its_neighbours_drafts_out_of_its_credit():
    cap = warmed(gentle, plain_slowdown=0.05)
    base = cap.cost(4, 1)
    # a step of 4 rows whose first drafted 8 (9 tokens) and accepted all: its tokens as plain steps,
    # with the margin, less what the step cost, each row alike for its own tokens
    gained = cap.credits((9 + 3) / 4, [9, 1, 1, 1])
    spent = cap.cost(4, 3)
    assert gained == pytest.approx([1.05 * base * 9 - spent] + [1.05 * base - spent] * 3, rel=1e-6)
    assert gained[0] > 0 > gained[1]  # the copying row gained; the others paid for its draft
    assert cap.credits(1.0, [1, 1, 1, 1]) == pytest.approx([0.05 * base] * 4, rel=1e-6)  # plain: the margin
    assert BatchDraftCap(plain_slowdown=None).credits(1.0, [1]) is None  # no bound: nothing to keep
    assert BatchDraftCap(plain_slowdown=0.05).credits(1.0, [1]) is None  # nothing prices a step yet

    strong, idle = copying(8, 0.999), [1.0]
    lengths, expected = [8, 0, 0, 0], [strong, idle, idle, idle]
    assert cap.pick(lengths, expected, [True] * 4, PACKED) == 1  # no credit: k=2 already costs 1.08 plain steps
    extra = cap.cost(4, (5 + 3) / 4) - 1.05 * base  # what a draft of 4 on one row costs beyond the margin
    assert cap.pick(lengths, expected, [True] * 4, PACKED, credit=[0.0] + [extra * 1.01] * 3) == 4
    assert cap.pick(lengths, expected, [True] * 4, PACKED, credit=[0.0, extra * 1.01, extra * 0.9, 5.0]) == 3  # the poorest binds
    assert cap.pick(lengths, expected, [True] * 4, PACKED, credit=[0.0, 5.0, 5.0, 5.0]) == 8
    # a row behind plain decoding (negative credit) keeps the per-step bound, no stricter
    assert cap.pick(lengths, expected, [True] * 4, PACKED, credit=[0.0, -1.0, 0.0, 0.0]) == 1
    cap.plain_slowdown = 0.1
    assert cap.pick(lengths, expected, [True] * 4, PACKED, credit=[0.0, -1.0, 0.0, 0.0]) == 2


def test_a_fit_that_prices_a_plain_step_at_or_below_zero_cuts_nothing():
    cap = BatchDraftCap(plain_slowdown=0.05)
    cap.warm([(rows, 1, 0.05 * rows - 0.3) for rows in (6, 7, 8)] + [(rows, 9, 0.06 * rows) for rows in (6, 7, 8)])
    assert cap.cost(2, 1) <= 0
    assert cap.pick([8, 0], [copying(8), [1.0]], [True, True], PACKED) is None
    assert cap.credits(1.0, [1, 1], 0.0) is None  # nor does it hand out credit priced from it


def test_a_cut_that_brings_nothing_more_is_not_taken():
    cap = warmed(plain_slowdown=None)
    cap.cost = lambda rows, width, context=0.0: 0.1  # any width costs a plain step's price
    # drafts that win nothing tie with none at all: ties go to the shorter cut
    assert cap.pick([4, 0], [[1.0] * 5, None], [True, False], PACKED) == 0
    assert cap.pick([4, 0], [[1.0, 1.5, 2.0, 2.5, 3.0], None], [True, False], PACKED) == 4


def test_a_step_the_cut_made_plain_counts_as_the_plain_step_that_prices_the_batch():
    cap = warmed(plain_every=3, plain_slowdown=0.0)
    # the bound of 0 refuses every draft beside a row that verifies nothing: the cut makes the step plain
    beside_plain = ([8, 0], [copying(8), [1.0]], [True, True], PACKED)
    alone_pays = ([8, 8], [copying(8)] * 2, [True, True], PACKED)
    assert [cap.pick(*beside_plain), cap.pick(*alone_pays), cap.pick(*alone_pays), cap.pick(*alone_pays)] == [0, 8, 8, 0]


def test_a_wider_step_is_never_priced_below_a_plain_one_of_the_same_rows():
    """A wide fit taught only long drafts extrapolates to narrow widths by its slopes; priced below
    a plain step, a one-token draft passed a bound of 0 and gave every row credit."""
    cap = BatchDraftCap(plain_every=10_000, plain_slowdown=0.0)
    # the wide fit sees only width 9 (a fixed config's traffic), slightly cheaper per row than the
    # plain fit's steps would make it: its intercept and width slope cannot be told apart
    cap.warm([(rows, 1, 0.10 + 0.01 * rows) for rows in (2, 4, 8)] + [(rows, 9, 0.09 + 0.012 * rows) for rows in (2, 4, 8)])
    unclamped = cap._fit()[True, False]
    assert _price(unclamped, 4, 1.25) < cap.cost(4, 1)  # the extrapolation the clamp catches
    assert cap.cost(4, 1.25) == pytest.approx(cap.cost(4, 1))
    assert cap.cost(4, 9) == pytest.approx(0.09 + 0.012 * 4, rel=0.02)  # what it has timed stands
    # no row gains credit from such a step (unclamped, each row would have, open-ended ones too)
    assert max(cap.credits(1.25, [1, 1, 1, 1])) <= 1e-12


def test_drafts_that_pay_beside_short_contexts_are_not_taken_for_paying_beside_long_ones():
    """On CPU a multi-token step's extra cost grows with the context the rows attend to (a packed
    forward's attention spans every row's cache): priced by context, the same draft pays at 64
    slots and not at 1024."""
    def cost(r, w, c):
        return 0.05 + 0.01 * r + 0.002 * r * w + (0.002 * r + 0.00004 * r * c) * (w > 1) + 0.00001 * r * c

    cap = BatchDraftCap(plain_every=10_000, plain_slowdown=None)
    assert cap.warm([(r, w, cost(r, w, c), c) for r in (2, 4, 8) for w in (1, 2, 3, 5, 9) for c in (64, 256, 1024)]) == 45
    for context in (64, 1024):
        assert cap.cost(8, 3, context) == pytest.approx(cost(8, 3, context), rel=0.02)
    lengths, expected = [2] * 8, [[1.0, 1.6, 2.0]] * 8
    assert cap.pick(lengths, expected, [True] * 8, PACKED, context=64) == 2
    assert cap.pick(lengths, expected, [True] * 8, PACKED, context=1024) == 0


def test_a_plain_step_is_priced_from_plain_steps_however_long_the_batch_drafts():
    """Two plain steps a few slots apart, then a stretch of drafting whose slots grow with its drafts:
    a plain step at the end is priced near its cost (one fit over both kinds priced it at several
    times its cost, from the two plain steps' noise stretched over the slots that followed), so
    drafts are not made to look cheap beside it, and a row that verifies nothing keeps its bound."""
    def cost(r, w, c):
        return 0.05 + 0.005 * r + (0.004 * r + 0.006 * r * (w - 1) if w > 1 else 0) + 0.00002 * r * c

    cap = BatchDraftCap(plain_every=10_000, plain_slowdown=0.05)
    cap.observe(8, 1, cost(8, 1, 84) * 0.95, 84)
    cap.observe(8, 1, cost(8, 1, 86) * 1.05, 86)
    rng, context = random.Random(0), 87
    for _ in range(30):
        widest = rng.choice([2, 5, 9])
        width = 1 + (widest - 1) * rng.uniform(0.1, 0.6)
        cap.observe(8, width, cost(8, width, context), context)
        context += widest
    assert cap.cost(8, 1, context) == pytest.approx(cost(8, 1, context), rel=0.25)
    assert cap.cost(8, 3, context) == pytest.approx(cost(8, 3, context), rel=0.02)
    # one row's sure draft of 8 costs the seven that verify nothing far more than 5% of a plain step
    lengths, expected = [8] + [0] * 7, [copying(8, 0.999)] + [[1.0]] * 7
    assert cap.pick(lengths, expected, [True] * 8, PACKED, context=context) == 0


def test_a_batch_that_has_only_drafted_makes_one_step_plain_to_price_it():
    cap = BatchDraftCap(plain_slowdown=None)
    cap.warm([(8, w, 0.1 + 0.01 * w) for w in (2, 5, 9)])
    assert cap.cost(8, 1) is None  # nothing prices a plain step yet
    assert cap.pick([8] * 8, [copying(8)] * 8, [True] * 8, PACKED) == 0
    cap.observe(8, 1, 0.1)
    assert cap.pick([8] * 8, [copying(8)] * 8, [True] * 8, PACKED) == 8


@pytest.mark.parametrize("kwargs", [{"decay": 0.0}, {"decay": 1.5}, {"plain_every": 0}, {"plain_slowdown": -0.1},
                                    {"plain_slowdown": float("nan")}, {"pace_decay": 1.1}, {"pace_decay": -0.1},
                                    {"objective": "latency"}])
def test_bad_settings_are_refused_by_name(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        BatchDraftCap(**kwargs)


def _linear_cap(**kwargs) -> BatchDraftCap:
    """A cap warmed on exact linear costs: a plain step of ``r`` rows 0.1 + 0.01 r seconds, a wider
    one 0.005 s more per token it scores."""
    cap = BatchDraftCap(**kwargs)
    cap.warm([(r, 1, 0.1 + 0.01 * r) for r in range(2, 7)]
             + [(r, w, 0.1 + 0.01 * r + 0.005 * r * w) for r in range(2, 7) for w in (1.5, 2, 3, 5)])
    return cap


def test_per_row_cuts_give_the_batch_s_draft_tokens_to_the_row_that_gains_most_from_them():
    """A copying row's strong draft and a weak one beside an open-ended row, the weak and the
    open-ended rows' credit affording four draft tokens: one common length splits them two and
    two, where row by row the copying row keeps all four and the weak row none, for more expected
    tokens at the same price."""
    strong, weak = [1.0, 1.9, 2.8, 3.7, 4.6], [1.0, 1.05, 1.07, 1.08, 1.09]
    args = ([4, 4, 0], [strong, weak, None], [True, True, True], sum, [0.0, 0.03, 0.03])
    assert _linear_cap(cut="common").allot(*args) == [2, 2, 0]
    assert _linear_cap(cut="common").pick(*args) == 2
    per_row = _linear_cap()
    assert per_row.cut == "per-row" and per_row.allot(*args) == [4, 0, 0]
    assert per_row.pick(*args) == 2  # pick is the common cut whatever the cap's
    # the bound still holds row by row: without the open row's credit no draft token is affordable
    assert _linear_cap().allot([4, 4, 0], [strong, weak, None], [True, True, True], sum) == [0, 0, 0]
    # a row the cap does not bind keeps its draft, and its tokens count toward the price
    assert _linear_cap().allot([4, 4, 3], [strong, weak, None], [True, True, False], sum, [0.0, 0.03, 0.03]) == [1, 0, 3]


def test_per_row_cuts_are_never_worth_less_than_the_common_cut():
    """Row by row the cap weighs the common cuts too: over random batches its choice is worth at
    least what the common cut's is, by the cap's own objective."""
    import random

    rng = random.Random(7)
    for _ in range(200):
        rows = rng.randint(2, 6)
        lengths = [rng.choice([0, 0, 2, 4, 8]) for _ in range(rows)]
        expected = []
        for n in lengths:
            p = rng.random()
            expected.append([sum(p ** j for j in range(i + 1)) for i in range(n + 1)])
        bound = [rng.random() < 0.8 for _ in range(rows)]
        credit = [rng.uniform(0, 0.05) for _ in range(rows)]
        common, per_row = _linear_cap(cut="common"), _linear_cap()
        a, b = common.allot(lengths, expected, bound, sum, credit), per_row.allot(lengths, expected, bound, sum, credit)
        if a is None:
            assert b is None
            continue

        def worth(kept):
            spent = per_row.cost(rows, sum(1 + k for k in kept) / rows)
            return sum(e[k] for e, k in zip(expected, kept)) / spent

        assert worth(b) >= worth(a) - 1e-12
        assert all(k <= n for k, n in zip(b, lengths)) and all(k == n for k, n, bd in zip(b, lengths, bound) if not bd)
