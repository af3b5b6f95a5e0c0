"""The chunked-prefill benchmark's two ways for a chunk to go in, on a tiny model."""

import pytest

from adaptive_spec import SpeculativeDecoder
from benchmarks.prefill_chunk import join_while_decoding, main
from tiny import loaded, one_thread, tiny_llama

SHORT = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 30, 31, 32]]
LONG = [(7 * i + 3) % 61 for i in range(100)]


@pytest.fixture(scope="module")
def decoder():
    with one_thread():
        yield SpeculativeDecoder(loaded(tiny_llama(seed=0)), [])


def test_a_chunk_riding_and_a_chunk_alone_join_in_the_same_steps_with_the_same_tokens(decoder):
    with one_thread():
        rides = join_while_decoding(decoder, SHORT, LONG, 32, 6, lead_steps=2, way="rides")
        alone = join_while_decoding(decoder, SHORT, LONG, 32, 6, lead_steps=2, way="alone")
    assert len(rides["join_steps_s"]) == len(alone["join_steps_s"]) == 4  # 100 tokens, 32 a step
    assert rides["tokens"] == alone["tokens"]
    solo = [decoder.generate(p, max_new_tokens=6).token_ids for p in [*SHORT, LONG]]
    assert rides["tokens"] == solo


@pytest.mark.parametrize("ways", ["fast", "rides,sideways", ""])
def test_a_bad_way_is_refused_by_name_before_any_model_loads(ways, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--ways", ways, "--out", str(tmp_path / "out.json")])
    assert "ways=" in capsys.readouterr().err
