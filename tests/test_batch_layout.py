"""policies/batch_layout.py: the one rule the engine and the simulator share for a batch's forward."""

import random

import pytest
from policies.batch_layout import SlotAxis, attention_pairs, packs, scored_tokens


def test_auto_packs_exactly_when_the_rows_widths_differ():
    one_drafting = [9, 1, 1, 1, 1, 1, 1, 1]
    assert packs(one_drafting) and scored_tokens(one_drafting) == 16
    assert packs([9] * 7 + [1]) and scored_tokens([9] * 7 + [1]) == 64
    # nothing to leave out: one row, one-token rows, rows all as wide
    assert not packs([1, 1, 1]) and not packs([9]) and not packs([5, 5])
    assert scored_tokens([5, 5]) == 10 and scored_tokens([1, 1, 1]) == 3


def test_attention_pairs_are_the_grid_of_rows_by_the_widest_width_in_either_form():
    # 2 rows x 9 queries, each over its row's 100 slots and the step's 9 new ones
    assert attention_pairs([9, 1], 100) == 2 * 9 * 109
    assert attention_pairs([1, 1, 1], 50) == 3 * 1 * 51


def test_a_fixed_layout_is_kept_and_an_unknown_one_refused_by_name():
    assert packs([1, 1], "packed") and not packs([9, 1, 1, 1], "padded")
    assert scored_tokens([9, 1], "packed") == 10 and scored_tokens([9, 1], "padded") == 18
    with pytest.raises(ValueError, match="layout"):
        packs([1, 2], "ragged")


def test_slot_axis_follows_the_engine_cache_through_joins_steps_rollbacks_and_leaves():
    """The simulator follows the engine's slot axis without a cache: run the real SlotCache through
    random joins, steps of random widths, rollbacks and leaves, and compare after every change."""
    from adaptive_spec.batching import SlotCache
    from tiny import tiny_llama

    rng = random.Random(3)
    cache, axis = SlotCache(tiny_llama(seed=3)), SlotAxis()
    compactions = 0
    for _ in range(80):
        if cache.rows < 4 and rng.random() < 0.4:
            length = rng.randint(2, 30)
            cache.add([rng.randint(5, 60) for _ in range(length)])
            axis.join(length)
        elif cache.rows:
            widths = [rng.choice([1, 1, 3, 9]) for _ in range(cache.rows)]
            cache.extend([[rng.randint(5, 60) for _ in range(w)] for w in widths])
            axis.forward(widths)
            for row, w in enumerate(widths):
                rejected = w - 1 if rng.random() < 0.7 else rng.randint(0, w - 1)  # mostly: every draft rejected
                cache.rollback(row, len(cache.tokens[row]) - rejected)
            if rng.random() < 0.2:
                cache.remove([rng.randrange(cache.rows)])
            before = cache.slots
            cache.compact()
            compactions += cache.slots < before
            axis.settle([len(t) for t in cache.tokens])
        assert axis.slots == cache.slots
    assert compactions > 0  # the run reached the rule that shrinks the axis


@pytest.mark.parametrize("profile", ["smollm2_cpu_batched.json", "smollm2_cpu_batched_test.json"])
def test_each_calibration_of_this_machine_prices_packing_below_padding(profile):
    """The rule packs unequal rows because a packed forward computes a padded one's attention over
    fewer tokens: each committed calibration of this CPU (with packed forwards timed) must agree,
    never pricing a packed sample's shape above the same rows padded, and below them for most."""
    from pathlib import Path

    from simulator.cost_model import fit_cost_model
    from simulator.profile import load_profile

    loaded = load_profile(Path(__file__).parents[1] / "simulator" / "profiles" / profile)
    packed = [s for s in loaded.verify if s.packed]
    assert packed  # calibrated with packed forwards
    cost = fit_cost_model(loaded)
    cheaper = 0
    for s in packed:
        widths = [s.tokens] * s.packed + [1] * (s.batch - s.packed)
        tokens = sum(widths)
        as_packed = cost.verify_s(tokens / s.batch, s.context_len, s.batch, tokens, s.batch * s.context_len,
                                  attention_pairs(widths, s.context_len))
        as_padded = cost.verify_s(s.tokens, s.context_len, s.batch)
        assert as_packed <= as_padded * (1 + 1e-9), (s, as_packed, as_padded)
        cheaper += as_packed < as_padded
    assert cheaper > len(packed) / 2
