"""Repetitive workloads from public data: one template applied to country after country.

Production traffic repeats itself across requests (an extraction service fills the same record for
every document it sees, a code generator writes the same scaffold for every entity); the ``suffix``
drafter exists for that. Each workload is one instruction over the "Background" text of World
Factbook country profiles (public domain, ``sources/factbook_backgrounds.jsonl``; see README.md), cut
at the last full sentence within ``MAX_CHARS``:

- ``repetitive.jsonl``: a JSON record with nine keys the prompt lists (kind ``json_extraction``).
- ``repetitive_code.jsonl``: a Python class for the country (kind ``code_template``). Nothing of the
  code is in the prompt: what repeats is what the model wrote for the countries before.

Profiles the main corpus summarises are left out, and the two workloads take disjoint profiles, so no
two workloads share text. ``split`` ``dev`` for the first ``DEV`` profiles (what tuning may look at),
``test`` for the rest (what the published tables use); file order is the stream's order.

    python -m benchmarks.corpus.repetitive            # rewrite both files
    python -m benchmarks.corpus.repetitive --check    # exit 1 if either is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FACTBOOK = HERE / "sources" / "factbook_backgrounds.jsonl"
CORPUS = HERE / "corpus.jsonl"
ORIGIN = "The World Factbook (CIA; public domain)"
JSON_TEMPLATE = ("Fill in this record for the country described below. Reply with only the JSON object, with the keys "
            "\"name\", \"region\", \"independence_year\", \"former_ruler\", \"capital\", \"head_of_state\", "
            "\"main_conflict\", \"main_export\" and \"joined_un\".\n\nCountry profile: {text}")
MAX_CHARS = 500  # a paragraph: the answer, not the prompt, should dominate a request's time
CODE_TEMPLATE = ("Write a Python class for the country described below that stores its name, capital and "
                 "independence year, with a method that returns them as a dictionary.\n\nCountry profile: {text}")
COUNT, DEV = 24, 8
STRIDE = 10  # every 10th profile: regions and eras spread over the stream


@dataclass(frozen=True)
class Workload:
    file: str
    template: str
    kind: str
    id_prefix: str
    offset: int  # where the stride starts: workloads with different offsets take disjoint profiles


WORKLOADS = (Workload("repetitive.jsonl", JSON_TEMPLATE, "json_extraction", "json-extraction", 0),
             Workload("repetitive_code.jsonl", CODE_TEMPLATE, "code_template", "country-class", 5))


def cut(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` up to its last sentence end within ``limit`` characters (all of it if none).

    >>> cut("One. Two three. Four five six.", 16)
    'One. Two three.'
    """
    if len(text) <= limit:
        return text
    head = text[:limit]
    end = head.rfind(". ")
    return head[: end + 1] if end > 0 else head


def build(workload: Workload) -> list[dict]:
    used = {json.loads(line)["source"].split()[0] for line in CORPUS.read_text().splitlines() if line.strip()}
    profiles = [json.loads(line) for line in FACTBOOK.read_text().splitlines() if line.strip()]
    eligible = [p for p in profiles if f"factbook:{p['file']}" not in used and len(p["background"]) >= 200]
    chosen = eligible[workload.offset::STRIDE][:COUNT]
    if len(chosen) < COUNT:
        raise ValueError(f"{workload.file}: only {len(chosen)} profiles from offset {workload.offset}, need {COUNT}")
    return [{"id": f"{workload.id_prefix}-{Path(p['file']).stem}",
             "prompt": workload.template.format(text=cut(p["background"])),
             "kind": workload.kind, "split": "dev" if i < DEV else "test",
             "source": f"factbook:{p['file']} {ORIGIN}"} for i, p in enumerate(chosen)]


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a workload file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for workload in WORKLOADS:
        out, text = HERE / workload.file, render(build(workload))
        if args.check:
            if (out.read_text() if out.exists() else "") != text:
                stale.append(workload.file)
            continue
        out.write_text(text)
        print(f"wrote {out.relative_to(HERE.parent.parent)}: {text.count(chr(10))} prompts")
    if stale:
        print(f"{', '.join(stale)} out of date: run python -m benchmarks.corpus.repetitive", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
