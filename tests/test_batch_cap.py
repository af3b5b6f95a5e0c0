"""The batch's draft cap (issue 17): chosen from measured step costs and measured gains, no table."""

import pytest

from policies.batch_cap import BatchDraftCap


def cpu_like_cost(rows: int, width: int) -> float:
    """A forward that costs more the more tokens it scores, with a jump from one-token rows to
    multi-token ones (the shape the cap must discover)."""
    return 0.06 + 0.002 * rows + 0.012 * rows * width + (0.01 * rows if width > 1 else 0.0)


def run(cap: BatchDraftCap, rows: int, gains: dict[int, float], widths: dict[int, int], steps: int) -> list[int]:
    chosen = []
    for _ in range(steps):
        c = cap.choose(rows)
        chosen.append(c)
        width = widths[c]
        cap.observe(rows, width, cpu_like_cost(rows, width), c, rows, round(gains[c] * rows))
    return chosen


def test_a_single_row_is_never_capped():
    assert BatchDraftCap().choose(1) is None


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
    assert cap.measured() == {}  # what drafts gain is the traffic's: never carried over
    for _ in range(400):  # the machine is half as fast as at calibration: the live steps win
        for rows, width in ((2, 1), (5, 3), (8, 9), (3, 5)):
            cap.observe(rows, width, 2 * cpu_like_cost(rows, width))
    assert cap.cost(6, 3) == pytest.approx(2 * cpu_like_cost(6, 3), rel=0.02)


def test_drafts_that_pay_in_a_small_batch_are_cut_in_a_full_one():
    # each capped row emits 1 token plainly, more with longer drafts (diminishing), and widens the batch
    gains, widths = {0: 1.0, 2: 2.0, 4: 2.5, 8: 3.0, 16: 3.5}, {0: 1, 2: 3, 4: 5, 8: 9, 16: 17}
    cap = BatchDraftCap(explore=0.0)
    run(cap, 2, gains, widths, 40)
    run(cap, 3, gains, widths, 40)
    for rows in (2, 8):  # the fitted cost serves batch sizes not measured (8) too
        predicted = cap.predicted_goodput(rows)
        truth = {c: rows * gains[c] / cpu_like_cost(rows, widths[c]) for c in gains}
        assert max(predicted, key=predicted.get) == max(truth, key=truth.get), (rows, predicted, truth)
    assert (cap.choose(2), cap.choose(8)) == (2, 0)


def test_traffic_that_stops_copying_moves_the_cap_down():
    widths = {0: 1, 2: 3, 4: 5, 8: 9, 16: 17}
    cap = BatchDraftCap(explore=0.1, seed=2)
    copying = {0: 1.0, 2: 2.9, 4: 4.8, 8: 8.5, 16: 15.0}  # drafts almost always accepted
    assert run(cap, 4, copying, widths, 200)[-1] >= 8
    open_ended = {0: 1.0, 2: 1.1, 4: 1.1, 8: 1.15, 16: 1.2}  # almost never
    chosen = run(cap, 4, open_ended, widths, 400)
    assert sum(c == 0 for c in chosen[-100:]) >= 85  # exploration aside, plain decoding


def test_plain_decoding_is_measured_again_however_long_drafting_wins():
    widths = {0: 1, 2: 3, 4: 5, 8: 9, 16: 17}
    copying = {0: 1.0, 2: 2.9, 4: 4.8, 8: 8.5, 16: 15.0}
    cap = BatchDraftCap(explore=0.0, plain_every=20)
    chosen = run(cap, 4, copying, widths, 215)[15:]  # after the first trials
    assert chosen.count(0) == 10 and max(len(run_) for run_ in "".join("x" if c else "." for c in chosen).split(".")) < 20


def test_a_plain_row_in_the_batch_bounds_what_the_others_drafts_may_cost_it():
    def gentle(rows: int, width: int) -> float:  # a packed-like forward: a few more tokens cost little
        return 0.1 * rows ** 0.5 * (1 + 0.02 * (width - 1))

    copying = {0: 1.0, 2: 2.9, 4: 4.8, 8: 8.5, 16: 15.0}
    widths = {0: 1, 2: 3, 4: 5, 8: 9, 16: 17}  # cost over a plain step: 1.04, 1.08, 1.16, 1.32
    for slowdown, plain_rows, expected in ((None, 1, 16), (0.1, 0, 16), (0.1, 1, 4), (0.05, 2, 2), (0.0, 1, 0)):
        cap = BatchDraftCap(explore=0.0, plain_every=10_000, plain_slowdown=slowdown)
        for _ in range(30):
            c = cap.choose(4)
            cap.observe(4, widths[c], gentle(4, widths[c]), c, 4, round(copying[c] * 4))
        assert cap.choose(4, plain_rows) == expected, (slowdown, plain_rows)


def test_a_random_try_keeps_to_the_bound_while_a_row_decodes_plainly():
    def gentle(rows: int, width: int) -> float:
        return 0.1 * rows ** 0.5 * (1 + 0.02 * (width - 1))

    copying = {0: 1.0, 2: 2.9, 4: 4.8, 8: 8.5, 16: 15.0}
    widths = {0: 1, 2: 3, 4: 5, 8: 9, 16: 17}  # cost over a plain step: 1.04, 1.08, 1.16, 1.32
    cap = BatchDraftCap(explore=0.0, plain_every=10_000, plain_slowdown=0.1)
    for _ in range(30):
        c = cap.choose(4)
        cap.observe(4, widths[c], gentle(4, widths[c]), c, 4, round(copying[c] * 4))
    cap.explore = 1.0  # from here every step is a random try
    assert cap.allowed(4, 1) == (0, 2, 4) and cap.allowed(4, 0) == cap.caps
    with_plain = [cap.choose(4, plain_rows=1) for _ in range(200)]
    assert set(with_plain) == {0, 2, 4}  # all the allowed caps are tried, nothing wider
    assert {8, 16} <= {cap.choose(4) for _ in range(200)}  # with no plain row, every cap is


def test_drafts_a_gate_left_a_row_without_are_cut_to_what_that_row_can_afford():
    def cost(rows: int, width: float) -> float:  # no jump: packed drafts cost by the tokens they add
        return 0.05 + 0.01 * rows + 0.004 * rows * width

    cap = BatchDraftCap(plain_slowdown=0.1)
    cap.warm([(rows, width, cost(rows, width)) for rows in (2, 4, 8) for width in (1, 2, 3, 5, 9, 17)])
    packed = sum  # each row's own tokens
    # one row of 4 drafting k, over a plain step of the 4: k=2 -> 1.08, k=4 -> 1.15, k=8 -> 1.30
    assert cap.afford([8, 8, 8, 8], [True] * 4, 8, packed) == 8  # every row verifies: no bound
    assert cap.afford([8, 0, 0, 0], [True] * 4, 8, packed) == 2  # a row verifies nothing: cut to fit
    assert cap.afford([8, 0, 0, 0], [True] * 4, 16, packed) == 2
    assert BatchDraftCap(plain_slowdown=0.05, caps=(0, 2, 4, 8)).afford([8, 0], [True] * 2, 8, packed) == 8  # cold
    cap.plain_slowdown = 0.05
    assert cap.afford([8, 0, 0, 0], [True] * 4, 8, packed) == 0
    assert cap.afford([8, 0, 5, 0], [True, True, False, True], 8, packed) == 0  # a fixed row's own draft stays
    cap.plain_slowdown = None
    assert cap.afford([8, 0, 0, 0], [True] * 4, 8, packed) == 8
    no_plain = BatchDraftCap(plain_slowdown=0.05, caps=(2, 4, 8))
    no_plain.warm([(rows, width, cost(rows, width)) for rows in (2, 4, 8) for width in (1, 2, 3, 5, 9, 17)])
    assert no_plain.afford([8, 0, 0, 0], [True] * 4, 8, packed) == 2  # the smallest cap it has


def test_a_row_ahead_of_plain_decoding_pays_for_its_neighbours_drafts_out_of_its_credit():
    def cost(rows: int, width: float) -> float:  # as above: k=2 -> 1.08, k=4 -> 1.15, k=8 -> 1.30 at 4 rows
        return 0.05 + 0.01 * rows + 0.004 * rows * width

    cap = BatchDraftCap(plain_slowdown=0.05)
    cap.warm([(rows, width, cost(rows, width)) for rows in (2, 4, 8) for width in (1, 2, 3, 5, 9, 17)])
    base = cap.cost(4, 1)
    # a step of 4 rows whose first drafted 8 (9 tokens) and accepted all: its tokens as plain steps,
    # with the margin, less what the step cost, each row alike for its own tokens
    gained = cap.credits((9 + 3) / 4, [9, 1, 1, 1])
    spent = cap.cost(4, 3)
    assert gained == pytest.approx([1.05 * base * 9 - spent] + [1.05 * base - spent] * 3, rel=1e-6)
    assert gained[0] > 0 > gained[1]  # the copying row gained; the others paid for its draft
    assert cap.credits(1.0, [1, 1, 1, 1]) == pytest.approx([0.05 * base] * 4, rel=1e-6)  # plain: the margin
    # a copying row whose gate cut its draft this step, with credit from its earlier drafts, lets the
    # others' drafts stand up to what its credit covers; a row with none keeps the bound as before
    assert cap.afford([8, 0, 8, 8], [True] * 4, 8, sum, credit=[0.0, 1.0, 0.0, 0.0]) == 8
    assert cap.afford([8, 0, 8, 8], [True] * 4, 8, sum, credit=[1.0, 0.0, 1.0, 1.0]) == 0  # the poor row binds
    extra = cap.cost(4, (5 + 3) / 4) - 1.05 * base  # what cap 4 on one row costs beyond the margin
    assert cap.afford([8, 0, 0, 0], [True] * 4, 8, sum, credit=[0.0, extra * 1.01, extra * 1.01, extra * 1.01]) == 4
    assert cap.afford([8, 0, 0, 0], [True] * 4, 8, sum, credit=[0.0, extra * 1.01, extra * 0.9, 5.0]) == 2
    # before drafting: the least credit among the rows planning no draft widens the allowed caps alike,
    # and a row behind plain decoding (negative credit) keeps the per-step bound, no stricter
    assert cap.afford([8, 0, 0, 0], [True] * 4, 8, sum, credit=[0.0, -1.0, 0.0, 0.0]) == cap.afford([8, 0, 0, 0], [True] * 4, 8, sum)
    for c in (0, 2, 4, 8, 16):  # widths for allowed(): each cap as a step of one row drafting it
        cap.observe(4, (c + 4) / 4, cap.cost(4, (c + 4) / 4), c, 4, 4)
    assert cap.allowed(4, 1, slack=-1.0) == cap.allowed(4, 1) == (0,)  # cap 2 costs 1.075 plain steps
    assert cap.allowed(4, 1, slack=2 * extra) == (0, 2, 4)
    assert cap.allowed(4, 1, slack=10.0) == cap.caps
    assert cap.credits(1.0, [1, 1]) is not None and BatchDraftCap(plain_slowdown=None).credits(1.0, [1]) is None
    assert BatchDraftCap(plain_slowdown=0.05).credits(1.0, [1]) is None  # nothing prices a step yet


def test_a_fit_that_prices_a_plain_step_at_or_below_zero_bounds_nothing():
    cap = BatchDraftCap(plain_slowdown=0.05)
    cap.warm([(rows, 1, 0.05 * rows - 0.3) for rows in (6, 7, 8)] + [(rows, 9, 0.06 * rows) for rows in (6, 7, 8)])
    assert cap.cost(2, 1) <= 0
    assert cap.allowed(2, 1) == cap.caps and cap.afford([8, 0], [True, True], 8, sum) == 8


@pytest.mark.parametrize("kwargs", [{"caps": ()}, {"caps": (-1,)}, {"decay": 0.0}, {"explore": 2.0}, {"min_trials": -1},
                                    {"plain_every": 0}, {"plain_slowdown": -0.1}, {"plain_slowdown": float("nan")}])
def test_bad_settings_are_refused_by_name(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        BatchDraftCap(**kwargs)


def test_a_cap_the_bound_never_affords_still_ends_its_first_tries():
    """Tries are counted when a cap is chosen, gains when it runs: a cap that a row decoding plainly
    can never afford must not be chosen forever as untried (the goodput choice would never start)."""
    def cost(rows: int, width: float) -> float:
        return 0.05 + 0.01 * rows + 0.004 * rows * width

    cap = BatchDraftCap(plain_slowdown=0.05, explore=0.0, plain_every=10_000)
    cap.warm([(rows, width, cost(rows, width)) for rows in (2, 4, 8) for width in (1, 2, 3, 5, 9, 17)])
    credit, chosen, applied_steps = [0.0] * 4, [], {}
    for _ in range(200):  # row 0 never drafts; rows 1-3 draft 16 and have every draft accepted
        c = cap.choose(4, plain_rows=1, slack=credit[0])
        lengths = [0] + [min(16, c)] * 3
        applied = cap.afford(lengths, [True] * 4, c, sum, credit) if c else c
        lengths = [0] + [min(n, applied) for n in lengths[1:]]
        width = sum(1 + n for n in lengths) / 4
        credit = [x + g for x, g in zip(credit, cap.credits(width, [1 + n for n in lengths]))]
        cap.observe(4, width, cost(4, width), applied, 4, sum(1 + n for n in lengths))
        chosen.append(c)
        applied_steps[applied] = applied_steps.get(applied, 0) + 1
    assert chosen[: 3 * len(cap.caps)] == [c for c in cap.caps for _ in range(3)]  # each cap tried 3 times, in turn
    assert len(set(chosen[3 * len(cap.caps):])) < len(cap.caps)  # then the goodput choice, among the allowed
    # gains went to the caps that ran: cap 16 never ran, so nothing is recorded under it
    assert 16 not in cap.measured() and sum(m["steps"] for m in cap.measured().values()) == 200
    assert set(cap.measured()) == {c for c, n in applied_steps.items() if n}
    assert min(credit) >= -1e-9  # the plain row never fell behind plain decoding plus the margin


def test_drafts_that_pay_beside_short_contexts_are_not_taken_for_paying_beside_long_ones():
    """On CPU a multi-token step's extra cost grows with the context the rows attend to (a packed
    forward's attention spans every row's cache): priced by context, the same gain per row-step
    pays at 64 slots and not at 1024."""
    def cost(r, w, c):
        return 0.05 + 0.01 * r + 0.002 * r * w + (0.002 * r + 0.00004 * r * c) * (w > 1) + 0.00001 * r * c

    cap = BatchDraftCap(explore=0.0, plain_every=10_000, min_trials=0, plain_slowdown=None)
    assert cap.warm([(r, w, cost(r, w, c), c) for r in (2, 4, 8) for w in (1, 2, 3, 5, 9) for c in (64, 256, 1024)]) == 45
    for context in (64, 1024):
        assert cap.cost(8, 3, context) == pytest.approx(cost(8, 3, context), rel=0.02)
    cap.observe(8, 1, cost(8, 1, 64), 0, 8, 8, context=64)  # plain: 1 token a row-step
    cap.observe(8, 3, cost(8, 3, 64), 4, 8, 16, context=64)  # cap 4: 2 tokens a row-step, 3 wide
    short, long = cap.predicted_goodput(8, 64), cap.predicted_goodput(8, 1024)
    assert short[4] > short[0] and long[4] < long[0]
    assert cap.choose(8, context=64) == 4 and cap.choose(8, context=1024) == 0
