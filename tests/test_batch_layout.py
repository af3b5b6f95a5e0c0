"""policies/batch_layout.py: the one rule the engine and the simulator share for a batch's forward."""

import random

import pytest
from policies.batch_layout import SlotAxis, attention_pairs, moved_entries, packs, scored_tokens, work


def test_auto_packs_beside_short_caches_and_pads_beside_long_ones():
    one_drafting = [9, 1, 1, 1, 1, 1, 1, 1]
    assert packs(one_drafting, slots=64) and scored_tokens(one_drafting, slots=64) == 16
    # every query of a packed forward meets every row's cache: beside long caches padding is cheaper
    assert not packs(one_drafting, slots=4000) and scored_tokens(one_drafting, slots=4000) == 72
    assert not packs([9] * 7 + [1], slots=512)  # 64 of 72 tokens: little to leave out, much to attend
    assert not packs([1, 1, 1], slots=64) and not packs([9], slots=64) and not packs([5, 5], slots=64)


def test_the_rule_takes_the_form_with_less_work():
    for widths in ([9, 1], [9, 1, 1, 1], [5, 5, 1, 1], [9, 9, 9, 9, 9, 9, 9, 1], [3, 1, 1, 1, 1, 1, 1, 1]):
        for slots in (16, 128, 512, 2048):
            assert packs(widths, slots=slots) == (work(widths, slots, True) < work(widths, slots, False))


def test_attention_pairs_and_moved_entries_count_what_each_form_computes():
    # padded: 2 rows x 9 queries, each over its row's 100 slots and the step's 9
    assert attention_pairs([9, 1], 100, packed=False) == 2 * 9 * 109
    # packed: 10 queries, each over both rows' 100 slots and the step's 10 tokens
    assert attention_pairs([9, 1], 100, packed=True) == 10 * 210
    assert moved_entries([9, 1], 100, packed=True) == 200 and moved_entries([9, 1], 100, packed=False) == 0


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
def test_the_rules_weights_are_what_this_machines_calibrations_fit(profile):
    """The rule's weights stand for this CPU: each committed calibration's fit (attention pairs and
    moved entries over a scored token) within 3x of them (batched timings here swing by +-10% a
    sample, and the split between tokens and the knee moves with them)."""
    from pathlib import Path

    from policies.batch_layout import MOVED_WEIGHT, PAIR_WEIGHT
    from simulator.cost_model import fit_cost_model
    from simulator.profile import load_profile

    loaded = load_profile(Path(__file__).parents[1] / "simulator" / "profiles" / profile)
    assert any(s.packed for s in loaded.verify)  # calibrated with packed forwards
    w = fit_cost_model(loaded).verify.weights
    token = w["excess_tokens"] + w["batch_tokens"]
    assert PAIR_WEIGHT / 3 < w["attention_pairs"] / token < PAIR_WEIGHT * 3
    assert MOVED_WEIGHT / 3 < w["moved_entries"] / token < MOVED_WEIGHT * 3
