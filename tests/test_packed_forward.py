"""benchmarks/packed_forward.py: its packed forward must score every row as the padded one does,
or its timings compare different work."""

import pytest
import torch

from benchmarks import packed_forward
from tiny import one_thread, tiny_llama


def test_the_packed_forward_scores_each_row_as_the_padded_one():
    with one_thread():
        result = packed_forward.measure(tiny_llama(seed=2), rows=3, context=6, k=2, rounds=2, seed=0)
    assert result["argmax_agrees"] and result["max_abs_logit_diff"] < 1e-9
    assert set(result["checks"]) == {"dense", "engine before", "engine"}
    assert all(c["argmax_agrees"] and c["max_abs_logit_diff"] < 1e-9 for c in result["checks"].values())
    names = [c["case"] for c in result["cases"]]
    assert names == ["padded, 1 token a row", "padded, 3 tokens a row", "dense packed, 0 of 3 rows drafting",
                     "dense packed, 1 of 3 rows drafting", "dense packed, 3 of 3 rows drafting",
                     "dense packed, copied, 1 of 3 rows drafting", "engine before, 1 of 3 rows drafting",
                     "engine packed, 1 of 3 rows drafting"]
    assert [c["tokens"] for c in result["cases"]] == [3, 9, 3, 5, 9, 5, 5, 5]
    assert all(len(c["seconds"]) == 2 for c in result["cases"])


def test_a_mask_that_lets_rows_see_each_other_is_caught():
    """The check has teeth: with the row mask opened, another row's history changes the logits."""
    model = tiny_llama(seed=2)
    batch = packed_forward.Batch(model, rows=2, context=6, generator=torch.Generator().manual_seed(0))
    tokens = packed_forward.random_tokens(model, (2, 2), torch.Generator().manual_seed(1))
    wide = batch.padded(tokens)
    original = packed_forward._additive
    try:
        packed_forward._additive = lambda mask, dtype: original(torch.ones_like(mask), dtype)
        leaky = batch.packed(tokens, [2, 2])
    finally:
        packed_forward._additive = original
    assert (leaky[1] - wide[1]).abs().max() > 1e-3


def test_the_engine_form_starts_every_forward_from_the_same_histories():
    """Timed again and again, the engine's packed forward must not grow its cache between calls."""
    model = tiny_llama(seed=2)
    batch = packed_forward.Batch(model, rows=2, context=6, generator=torch.Generator().manual_seed(0))
    engine = batch.engine()
    tokens = packed_forward.random_tokens(model, (2, 3), torch.Generator().manual_seed(1))
    with one_thread():
        first = engine.packed(tokens, [3, 1])
        again = engine.packed(tokens, [3, 1])
    assert engine.slots.slots == 6 and [len(t) for t in engine.slots.tokens] == [6, 6]
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_bad_arguments_are_refused_naming_them(capsys):
    with pytest.raises(SystemExit):
        packed_forward.main(["--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err
