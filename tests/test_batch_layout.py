"""policies/batch_layout.py: the one rule the engine and the simulator share for a batch's forward."""

import pytest

from policies.batch_layout import PACKED_SHARE, packs, scored_tokens


def test_auto_packs_only_when_rows_leave_enough_of_the_padded_forward_empty():
    assert packs([9, 1, 1, 1]) and scored_tokens([9, 1, 1, 1]) == 12
    assert not packs([9, 9, 9, 1]) and scored_tokens([9, 9, 9, 1]) == 36  # 28 of 36: padding costs less
    assert not packs([1, 1, 1]) and not packs([9])  # nothing to save: one token a row, or one row
    edge = [4, 4, 3, 1]  # exactly PACKED_SHARE of the padded tokens packs
    assert sum(edge) == PACKED_SHARE * 4 * 4 and packs(edge) and not packs([4, 4, 3, 2])


def test_a_fixed_layout_is_kept_and_an_unknown_one_refused_by_name():
    assert packs([1, 1], "packed") and not packs([9, 1, 1, 1], "padded")
    assert scored_tokens([9, 1], "packed") == 10 and scored_tokens([9, 1], "padded") == 18
    with pytest.raises(ValueError, match="layout"):
        packs([1, 2], "ragged")
