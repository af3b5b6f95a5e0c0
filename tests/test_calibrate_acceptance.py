"""calibrate's acceptance measurement: per kind, and with ``per_prompt`` also per prompt id.

A prompt's own class holds exactly its own steps, so a kind's counts are the sum of its prompts'
(hit rates weighted by steps agree), and the per-prompt profile tells a repetitive prompt from a
non-repetitive one of the same kind, which the kind's average cannot."""

import doctest

import pytest

import adaptive_spec.calibrate as calibrate_module
from adaptive_spec.calibrate import _per_position, measure_acceptance
from adaptive_spec.config import GenerationConfig
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.prompts import Prompt
from simulator.acceptance import acceptance_from_dict
from tiny import loaded, one_thread, tiny_llama

# the tiny model's tokenizer reads <i> as token i: a prompt that repeats a pattern gives the n-gram
# lookup matches; one of distinct tokens gives it nothing to match at the start
LOOP = "".join(f"<{i}>" for i in [5, 6, 7, 8] * 6)
FLAT = "".join(f"<{i}>" for i in range(10, 34))
PROMPTS = [Prompt("loop-a", LOOP, kind="mixed"), Prompt("flat-a", FLAT, kind="mixed"), Prompt("loop-b", LOOP + "<5>", kind="other")]


@pytest.fixture(scope="module")
def decoder():
    with one_thread():
        yield SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()])


def test_per_kind_only_by_default(decoder):
    out = measure_acceptance(decoder, PROMPTS, max_new_tokens=24)
    assert set(out) == {"mixed", "other"}


def test_per_prompt_classes_partition_their_kind(decoder):
    out = measure_acceptance(decoder, PROMPTS, max_new_tokens=24, per_prompt=True)
    assert set(out) == {"mixed", "other", "loop-a", "flat-a", "loop-b"}
    kind_only = measure_acceptance(decoder, PROMPTS, max_new_tokens=24)
    assert out["mixed"] == kind_only["mixed"]  # adding prompt classes changes nothing about the kinds
    # one prompt alone in its kind: the same counts under both names
    assert out["loop-b"] == out["other"]
    # the kind's hit rate is its prompts' hit rates weighted by their steps (each generation has the
    # same number of full-length steps only by chance, so weight by what each measured)
    a, f, mixed = out["loop-a"]["ngram"], out["flat-a"]["ngram"], out["mixed"]["ngram"]
    assert min(a["hit_rate"], f["hit_rate"]) <= mixed["hit_rate"] <= max(a["hit_rate"], f["hit_rate"])
    assert a["hit_rate"] > f["hit_rate"]  # the repeating prompt finds matches the flat one does not


def test_an_id_that_is_also_a_kind_is_refused(decoder):
    clash = [Prompt("mixed", LOOP, kind="copy"), Prompt("b", FLAT, kind="mixed")]
    with pytest.raises(InvalidParameterError, match="per_prompt.*'mixed'"):
        measure_acceptance(decoder, clash, max_new_tokens=8, per_prompt=True)


def test_a_prompt_whose_answer_ends_at_once_still_has_a_class(decoder):
    """Its steps are never counted (no full draft before the end of sequence); a trace that sent it
    must still replay, on its kind's estimates."""
    first = decoder.generate(FLAT, GenerationConfig(max_new_tokens=1), force_plain=True).token_ids[0]
    with one_thread():
        ends = SpeculativeDecoder(loaded(tiny_llama(seed=0), eos=first), [NgramDrafter()])
        out = measure_acceptance(ends, PROMPTS, max_new_tokens=24, per_prompt=True)
    assert out["flat-a"] == out["mixed"]


def test_every_class_loads_as_a_simulator_profile(decoder):
    """Shares are rounded down, so no class's match shares add up to more than 1 (the loader refuses that)."""
    out = measure_acceptance(decoder, PROMPTS, max_new_tokens=24, per_prompt=True)
    for klass, per_drafter in out.items():
        for drafter, spec in per_drafter.items():
            acceptance_from_dict(spec, f"acceptance.{klass}.{drafter}")
            assert sum(m["share"] for m in spec.get("matches", [])) <= 1.0


def test_the_modules_examples():
    result = doctest.testmod(calibrate_module)
    assert result.failed == 0 and result.attempted > 0  # a module whose examples vanished passes no test


def test_a_position_with_too_few_drafts_takes_the_fallback():
    counts = {"tested": [10, 4, 0], "accepted": [5, 4, 0]}
    assert _per_position(counts) == [0.5]
    assert _per_position(counts, [0.9, 0.8, 0.7]) == [0.5, 0.8, 0.7]
    assert _per_position({"tested": [2, 1], "accepted": [2, 1]}, [0.6, 0.9]) == [0.6, 0.9]


def test_a_prompt_class_is_never_shorter_than_its_kind(decoder):
    """A prompt with few drafts borrows its kind's later positions instead of reading as never accepted."""
    out = measure_acceptance(decoder, PROMPTS, max_new_tokens=24, per_prompt=True)
    for prompt in PROMPTS:
        own, kind = out[prompt.id]["ngram"]["per_position"], out[prompt.kind]["ngram"]["per_position"]
        assert len(own) >= len(kind)


def test_acceptance_says_each_prompt_as_it_starts(decoder):
    said = []
    measure_acceptance(decoder, PROMPTS, max_new_tokens=8, progress=said.append)
    assert said == [f"acceptance [{i}/{len(PROMPTS)}] {p.id}" for i, p in enumerate(PROMPTS, 1)]


def test_a_prompt_that_does_not_fit_is_refused_before_the_timing_passes(decoder, monkeypatch):
    monkeypatch.setattr(calibrate_module, "time_steps", lambda *a, **k: pytest.fail("timed before the check"))
    too_long = [PROMPTS[0], Prompt("long", "<5>" * 250, kind="other")]  # the tiny model's context: 256
    with pytest.raises(InvalidParameterError, match="prompt 'long'") as info:
        calibrate_module.calibrate(decoder, too_long, repeats=1, max_new_tokens=8)
    assert info.value.name == "max_new_tokens"
