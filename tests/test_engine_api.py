"""The decoder's API contract: clear errors for bad input, stops, streaming, and the model cache."""

import json
from pathlib import Path

import pytest
import torch

from adaptive_spec import GenerationConfig, InvalidParameterError, SpeculativeDecoder, models
from adaptive_spec.drafters import ModelDrafter, NgramDrafter, build_drafter
from policies import StaticPolicy
from tiny import loaded, tiny_llama


@pytest.fixture(scope="module")
def decoder():
    return SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()], StaticPolicy("ngram", 4))


@pytest.mark.parametrize(
    "kwargs, name, value",
    [
        (dict(max_new_tokens=0), "max_new_tokens", "0"),
        (dict(temperature=-0.5), "temperature", "-0.5"),
        (dict(top_p=0.0), "top_p", "0.0"),
        (dict(top_p=1.5), "top_p", "1.5"),
        (dict(top_k=-1), "top_k", "-1"),
        (dict(max_new_tokens=1000), "max_new_tokens", "1000"),  # beyond the tiny model's 256 context
    ],
)
def test_bad_generation_parameters_name_parameter_and_value(decoder, kwargs, name, value):
    with pytest.raises(InvalidParameterError) as err:
        decoder.generate([1, 2, 3], **kwargs)
    assert err.value.name == name and value in str(err.value)


@pytest.mark.parametrize("prompt", ["", "   ", []])
def test_empty_prompt_is_rejected(decoder, prompt):
    with pytest.raises(InvalidParameterError, match="prompt"):
        decoder.generate(prompt, max_new_tokens=3)


def test_draft_length_out_of_range_is_rejected(decoder):
    with pytest.raises(InvalidParameterError, match="k=65"):
        decoder.generate([1, 2, 3], max_new_tokens=8, policy=StaticPolicy("ngram", 65))


def test_unknown_drafter_and_model_are_rejected(decoder):
    with pytest.raises(InvalidParameterError, match="drafter='medusa'"):
        decoder.generate([1, 2, 3], max_new_tokens=8, policy=StaticPolicy("medusa", 2))
    with pytest.raises(InvalidParameterError, match="drafter='eagle'"):
        build_drafter("eagle", decoder.target_model)
    with pytest.raises(InvalidParameterError, match="model='no-such-model'"):
        models.load_model("no-such-model")


def test_draft_with_another_vocabulary_is_rejected():
    target = loaded(tiny_llama(seed=0, vocab=64))
    with pytest.raises(InvalidParameterError, match="vocabulary size 32 differs"):
        SpeculativeDecoder(target, [ModelDrafter(tiny_llama(seed=1, vocab=32), name="small")])


def test_eos_stops_generation_inside_a_speculative_step():
    model = tiny_llama(seed=0)
    free = SpeculativeDecoder(loaded(model), [NgramDrafter()]).generate([1, 2, 3, 1, 2], max_new_tokens=30).token_ids
    eos = free[5]
    decoder = SpeculativeDecoder(loaded(model, eos=eos), [ModelDrafter(model, name="self")])
    result = decoder.generate([1, 2, 3, 1, 2], max_new_tokens=30, policy=StaticPolicy("self", 8))
    assert result.finish_reason == "eos"
    assert result.token_ids == free[: free.index(eos) + 1]


def test_length_and_stop_strings(decoder):
    full = decoder.generate([1, 2, 3, 1, 2], max_new_tokens=20)
    assert full.finish_reason == "length" and len(full.token_ids) == 20
    stop = f"<{full.token_ids[7]}><{full.token_ids[8]}>"
    cut = decoder.generate([1, 2, 3, 1, 2], max_new_tokens=20, stop_strings=(stop,))
    assert cut.finish_reason == "stop"
    assert cut.text.endswith(stop) and full.text.startswith(cut.text)
    assert len(cut.token_ids) <= 9


def test_one_stop_string_given_as_text_stops_at_that_string_not_at_any_of_its_characters(decoder):
    full = decoder.generate([1, 2, 3, 1, 2], max_new_tokens=20)
    stop = f"<{full.token_ids[7]}><{full.token_ids[8]}>"  # read character by character, "<" matches the first token
    as_text = decoder.generate([1, 2, 3, 1, 2], max_new_tokens=20, stop_strings=stop)
    assert as_text.token_ids == decoder.generate([1, 2, 3, 1, 2], max_new_tokens=20, stop_strings=(stop,)).token_ids
    assert as_text.text.endswith(stop) and len(as_text.token_ids) >= 8
    assert GenerationConfig(stop_strings=stop).stop_strings == (stop,)
    assert GenerationConfig(stop_strings=[stop]).stop_strings == (stop,)
    assert GenerationConfig(stop_strings=None).stop_strings == ()  # as transformers: no stop string


def test_a_drafter_drafting_ids_outside_the_vocabulary_is_one_clear_error_naming_it():
    from adaptive_spec.drafters.base import Drafter, Proposal

    class OutOfRange(Drafter):
        name = "outside"

        def propose(self, context, k, config, generator, early_stop=None):
            return Proposal(tokens=[10_000][:k])

    target = loaded(tiny_llama(seed=0))
    with pytest.raises(RuntimeError, match=r"drafter 'outside' drafted ids outside the vocabulary"):
        SpeculativeDecoder(target, [OutOfRange()]).generate([1, 2, 3], max_new_tokens=4,
                                                             policy=StaticPolicy("outside", 2))


def test_stream_yields_the_same_text_in_pieces(decoder):
    pieces = list(decoder.stream([1, 2, 3, 1, 2], max_new_tokens=25))
    assert len(pieces) > 3
    assert "".join(pieces) == decoder.generate([1, 2, 3, 1, 2], max_new_tokens=25).text


def test_generation_config_validates_on_construction():
    with pytest.raises(InvalidParameterError, match="top_p"):
        GenerationConfig(top_p=2)


# -- model cache -----------------------------------------------------------------------------------


def fake_builtin(tmp_path, calls):
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF")

    def convert(_, out_dir: Path):
        calls.append(out_dir)
        tiny_llama(seed=0, dtype=torch.float32).save_pretrained(out_dir)

    return models.BuiltinModel("fake", "fake", "fake-v1", lambda root: gguf), convert


def test_cache_is_built_once_then_reused(tmp_path, monkeypatch):
    calls = []
    builtin, convert = fake_builtin(tmp_path, calls)
    monkeypatch.setattr(models, "convert_gguf", convert)
    first = models.ensure_converted(builtin, tmp_path / "cache")
    assert models.ensure_converted(builtin, tmp_path / "cache") == first
    assert len(calls) == 1 and models.check_manifest(first) is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "no_manifest"])
def test_corrupt_or_half_written_cache_is_rebuilt(tmp_path, monkeypatch, damage):
    calls = []
    builtin, convert = fake_builtin(tmp_path, calls)
    monkeypatch.setattr(models, "convert_gguf", convert)
    folder = models.ensure_converted(builtin, tmp_path / "cache")
    weights = next(folder.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    if damage == "truncate":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
        weights.write_bytes(data)
    else:
        (folder / models.MANIFEST).unlink()
    assert models.check_manifest(folder) is not None
    rebuilt = models.ensure_converted(builtin, tmp_path / "cache")
    assert len(calls) == 2 and models.check_manifest(rebuilt) is None
    assert json.loads((rebuilt / models.MANIFEST).read_text())["version"] == models.MANIFEST_VERSION
