"""The demo (issue 19): a shifting stream under adaptive, a fixed n-gram config and plain decoding.

Its numbers are the machine's and are not asserted here; its structure is, and so is its check
that every output equals plain decoding's, on a tiny random model with a character tokenizer."""

import doctest

import pytest
from typer.testing import CliRunner

from adaptive_spec import demo, drafters, models
from adaptive_spec.cli import app
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.models import LoadedModel
from adaptive_spec.telemetry import read_requests
from policies.outcome import StepOutcome
from tiny import one_thread, tiny_llama

runner = CliRunner()


class CharTokenizer:
    """Each character is a token (its code point modulo the vocabulary): the demo's prompts are text."""

    chat_template = None
    eos_token_id = None

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def __call__(self, text: str) -> dict:
        return {"input_ids": [ord(c) % self.vocab_size for c in text]}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(65 + i) for i in ids)

    def get_vocab(self) -> dict:
        return {chr(65 + i): i for i in range(self.vocab_size)}

    def __len__(self) -> int:
        return self.vocab_size


@pytest.fixture
def tiny_model(monkeypatch):
    model = tiny_llama(seed=0, vocab=64)
    model.config.max_position_embeddings = 512  # the copy prompts are ~220 characters
    monkeypatch.setattr(models, "load_model", lambda *a, **k: LoadedModel("tiny", model, CharTokenizer(64)))


def test_the_module_examples_run():
    result = doctest.testmod(demo)
    assert result.failed == 0 and result.attempted > 0  # a module whose examples vanished passes no test


def test_the_stream_shifts_copy_open_copy_and_each_config_goes_first_in_turn():
    stream = demo.build_stream(3)
    assert [r.kind for r in stream] == ["copy"] * 3 + ["open"] * 3 + ["copy"] * 3
    assert [r.phase for r in stream] == [1] * 3 + [2] * 3 + [3] * 3
    assert len({r.text for r in stream if r.kind == "copy"}) == 6  # the second copy phase is new text
    assert [demo.rotated(demo.CONFIGS, i)[0] for i in range(3)] == list(demo.CONFIGS)


def test_controller_use_reports_drafters_draft_lengths_and_plain_steps():
    step = lambda drafter, k, proposed=None: StepOutcome(drafter, k, k if proposed is None else proposed, 0, 1, 0.0, 0.0)  # noqa: E731
    off = demo.controller_use([step("none", 0)] * 4)
    assert off.speculative_steps == 0 and off.describe() == "no drafts verified (4 plain steps)"
    use = demo.controller_use([step("ngram", 4), step("none", 0), step("ngram", 8), step("ngram", 16, 0)])
    # a lookup that found nothing (asked for 16, proposed 0) decoded plainly
    assert use.by_drafter == {"ngram": (4, 8, 2)} and (use.speculative_steps, use.steps) == (2, 4)


def _run(index, phase, kind, adaptive_tokens, seconds):
    request = demo.StreamRequest(index, phase, kind, "text")
    tokens = {"adaptive": adaptive_tokens, "static:ngram:8": [1, 2, 3], "plain": [1, 2, 3]}
    return demo.RequestRun(request, list(demo.CONFIGS), tokens, seconds, demo.controller_use([]))


def test_the_summary_has_each_phase_and_all_and_a_difference_is_not_identical():
    runs = [_run(0, 1, "copy", [1, 2, 3], {"adaptive": 1.0, "static:ngram:8": 1.0, "plain": 2.0}),
            _run(1, 2, "open", [1, 2, 3], {"adaptive": 2.0, "static:ngram:8": 3.0, "plain": 2.0}),
            _run(2, 3, "copy", [1, 2, 9], {"adaptive": 1.0, "static:ngram:8": 1.0, "plain": 4.0})]
    summary = demo.summarize(runs)
    assert [row["phase"] for row in summary["rows"]] == ["1 copy-heavy", "2 open-ended", "3 copy-heavy", "all"]
    assert summary["rows"][0]["configs"]["adaptive"]["speedup_vs_plain"] == pytest.approx(2.0)
    assert summary["rows"][1]["configs"]["static:ngram:8"]["speedup_vs_plain"] == pytest.approx(2 / 3)
    assert summary["rows"][3]["configs"]["adaptive"]["speedup_range"] == pytest.approx((1.0, 4.0))
    assert summary["equal_to_plain"] == {"adaptive": 2, "static:ngram:8": 3}
    assert not summary["identical"]


def test_demo_serves_the_stream_records_it_and_finds_every_output_identical_to_plain(tiny_model, tmp_path, monkeypatch):
    store = tmp_path / "telemetry.sqlite"
    built = []
    build = drafters.build_drafter
    monkeypatch.setattr(drafters, "build_drafter", lambda spec, target: built.append(spec) or build(spec, target))
    with one_thread():
        result = runner.invoke(app, ["demo", "--model", "tiny", "--max-new-tokens", "6", "--requests-per-phase", "1",
                                     "--telemetry", f"sqlite:{store}"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    out = result.output
    for label in ("1 copy-heavy", "2 open-ended", "3 copy-heavy", "all", *demo.CONFIGS, "speculation"):
        assert label in out, label
    assert out.count("tok/s: adaptive") == 3  # one live line per request
    assert "identical to plain decoding: yes" in out and "served in" in out
    assert f"adaptive-spec dashboard --telemetry-db {store}" in out
    assert "adaptive-spec serve" in out and "adaptive-spec simulate" in out
    # the stream's requests, one traffic key per config; the warm-up is not recorded
    keys = sorted(row["key"] for row in read_requests(store))
    assert keys == sorted(f"demo/{name}" for name in demo.CONFIGS for _ in range(3))
    assert built == ["ngram"]  # prompt lookup only, unless --drafters asks for more


def test_demo_drafters_option_loads_the_drafters_given(tiny_model, monkeypatch):
    built = []
    build = drafters.build_drafter
    monkeypatch.setattr(drafters, "build_drafter", lambda spec, target: built.append(spec) or build(spec, target))
    with one_thread():
        result = runner.invoke(app, ["demo", "--model", "tiny", "--max-new-tokens", "4", "--requests-per-phase", "1",
                                     "--drafters", "ngram,int8", "--telemetry", "off"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert built == ["ngram", "int8"] and "identical to plain decoding: yes" in result.output


@pytest.mark.parametrize("args, name", [
    (["--requests-per-phase", "0"], "requests_per_phase"),
    (["--max-new-tokens", "0"], "max_new_tokens"),
    (["--telemetry", "bogus"], "telemetry"),
    (["--drafters", "bogus"], "drafters"),
])
def test_bad_demo_options_fail_before_the_model_loads(monkeypatch, args, name):
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))
    result = runner.invoke(app, ["demo", *args])
    assert isinstance(result.exception, InvalidParameterError) and result.exception.name == name
