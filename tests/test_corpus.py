"""benchmarks/corpus: a public prompt corpus, built reproducibly, split dev/test per kind, every source documented."""

from __future__ import annotations

import collections
import doctest
import json
from pathlib import Path

import pytest

from adaptive_spec.prompts import load_prompts, select_split
from benchmarks.corpus import build

CORPUS_DIR = Path(build.__file__).parent
ROWS = [json.loads(line) for line in build.CORPUS.read_text(encoding="utf-8").splitlines()]
README = (CORPUS_DIR / "README.md").read_text(encoding="utf-8")
KINDS = {"multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag", "code_edit"}


def test_every_row_has_the_schema_and_a_unique_id():
    for row in ROWS:
        assert list(row) == ["id", "prompt", "kind", "split", "source"], row["id"]
        assert all(isinstance(v, str) and v.strip() for v in row.values()), row["id"]
        assert row["split"] in ("dev", "test")
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids))
    assert len(ROWS) >= 80


def test_every_kind_is_in_both_splits_about_half_and_half():
    counts = collections.Counter((r["kind"], r["split"]) for r in ROWS)
    assert {r["kind"] for r in ROWS} == KINDS
    for kind in KINDS:
        dev, test = counts[(kind, "dev")], counts[(kind, "test")]
        assert dev >= 1 and test >= 1 and abs(dev - test) <= 1, (kind, dev, test)


def test_the_file_is_what_the_builder_writes_from_the_saved_sources():
    assert build.build() == build.CORPUS.read_text(encoding="utf-8")  # python -m benchmarks.corpus.build --check


def test_the_split_is_a_function_of_the_ids_alone():
    rows = [{k: r[k] for k in ("id", "prompt", "kind", "source")} for r in ROWS]
    shuffled = sorted(rows, key=lambda r: r["prompt"])  # another order, the same split
    by_id = {r["id"]: r["split"] for r in build.with_split(shuffled)}
    assert by_id == {r["id"]: r["split"] for r in ROWS}


def test_prompts_fit_the_model_s_window_and_cut_texts_say_so():
    for row in ROWS:
        assert len(row["prompt"]) <= build.CONTEXT_CHARS + 600, row["id"]  # ~600 tokens at most, window 8,192
    summaries = [r for r in ROWS if r["kind"] == "summarization"]
    assert any(r["prompt"].endswith(" [...]") for r in summaries)
    for row in (r for r in ROWS if r["kind"] == "rag"):
        assert row["prompt"].rstrip().endswith("?") or "\n" in row["prompt"]  # the question is kept, last
    result = doctest.testmod(build)
    assert result.failed == 0 and result.attempted > 0  # a module whose examples vanished passes no test


def test_every_source_is_documented_with_its_licence_and_saved():
    functions = {(f["file"], f["function"]) for f in map(json.loads, build.CPYTHON.read_text().splitlines())}
    sentences = build.sentences(build.KAFKA.read_text(encoding="utf-8"))
    backgrounds = {e["file"]: e["background"] for e in map(json.loads, build.FACTBOOK.read_text().splitlines())}
    for row in ROWS:
        where, origin = row["source"].split(" ", 1)
        if where.startswith("cpython-"):
            _, file, function = where.split(":")
            assert (file, function) in functions and origin == "(PSF License)", row["source"]
        elif where.startswith("verwandlung:"):  # the prompt is that sentence of the saved text
            n = int(where.split(":")[1])
            assert row["prompt"] == f"Translate German to English: {sentences[n - 1]}", row["id"]
            assert origin == build.ORIGIN_KAFKA and origin.split(" (")[0] in README, row["source"]
        elif where.startswith("factbook:"):  # the prompt is that background, whole or cut
            text = backgrounds[where.split(":", 1)[1]]
            assert row["prompt"].removeprefix("Summarize: ").removesuffix(" [...]") in text, row["id"]
            assert origin == build.ORIGIN_FACTBOOK and origin.split(" (")[0] in README, row["source"]
        else:
            assert where.startswith("spec-bench:") and origin.split(" (")[0] in README, row["source"]
    for name in ("spec_bench_question.jsonl", "Spec-Bench.LICENSE", "cpython_functions.jsonl", "CPython.LICENSE.txt",
                 "kafka_die_verwandlung_I.txt", "factbook_backgrounds.jsonl"):
        assert (build.SOURCES / name).is_file() and name in README, name
    assert build.SPEC_BENCH_COMMIT in README
    for heading in ("## Licences", "## How the prompts were made", "## Split", "## What was tuned on what"):
        assert heading in README, heading


def test_translation_and_summarization_ship_only_openly_licensed_text():
    """Spec-Bench's translation (WMT14) and summarization (CNN/DailyMail) texts are not openly
    licensed: they are neither in the saved question file nor in the corpus."""
    categories = {json.loads(line)["category"] for line in build.SPEC_BENCH.read_text(encoding="utf-8").splitlines()}
    assert not categories & {"translation", "summarization"}
    for row in ROWS:
        if row["kind"] in ("translation", "summarization"):
            assert row["source"].endswith("public domain)") and "spec-bench" not in row["source"], row["id"]
    translations = [r for r in ROWS if r["kind"] == "translation"]
    for row in translations:
        sentence = row["prompt"].removeprefix("Translate German to English: ")
        assert sentence != row["prompt"] and build.SENTENCE_CHARS[0] <= len(sentence) <= build.SENTENCE_CHARS[1]


def test_bench_reads_the_corpus_and_its_test_split(tmp_path):
    prompts = load_prompts(build.CORPUS)
    test = select_split(prompts, "test")
    assert len(test) == sum(r["split"] == "test" for r in ROWS)
    assert {p.kind for p in test} == KINDS and all(p.source for p in test)


@pytest.mark.parametrize("text,limit,expected", [
    ("Short enough.", 50, "Short enough."),
    ("First one. Second one. Third one.", 25, "First one. Second one. [...]"),
    ("no sentence end here at all", 12, "no sentence [...]"),
])
def test_cut_keeps_whole_sentences(text, limit, expected):
    assert build.cut(text, limit) == expected


def test_the_repetitive_workloads_are_what_their_builder_writes_and_share_no_profile():
    from benchmarks.corpus import repetitive

    sources = {}
    for workload in repetitive.WORKLOADS:
        path = CORPUS_DIR / workload.file
        assert repetitive.render(repetitive.build(workload)) == path.read_text(encoding="utf-8"), workload.file
        rows = load_prompts(path)
        assert [r.split for r in rows] == ["dev"] * repetitive.DEV + ["test"] * (repetitive.COUNT - repetitive.DEV)
        assert {r.kind for r in rows} == {workload.kind}
        sources[workload.file] = {json.loads(line)["source"] for line in path.read_text().splitlines()}
    main_corpus = {r["source"].split()[0] for r in ROWS}
    files = list(sources)
    assert not sources[files[0]] & sources[files[1]]
    assert not {s.split()[0] for s in sources[files[0]] | sources[files[1]]} & main_corpus


def test_the_code_workload_prompt_holds_no_code_to_copy():
    # what `suffix` can draft there must come from earlier answers, not from the prompt
    rows = load_prompts(CORPUS_DIR / "repetitive_code.jsonl")
    for row in rows:
        assert not any(code in row.prompt for code in ("def ", "self.", "__init__", "return ", "```")), row.id


def test_a_stride_with_too_few_profiles_is_refused():
    from benchmarks.corpus import repetitive

    with pytest.raises(ValueError, match="offset 500"):
        repetitive.build(repetitive.Workload("x.jsonl", "{text}", "k", "x", 500))
