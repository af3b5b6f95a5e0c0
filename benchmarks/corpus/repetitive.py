"""A repetitive workload from public data: one JSON-extraction template applied to country after country.

Production traffic repeats itself across requests (an extraction service fills the same record for
every document it sees); the ``suffix`` drafter exists for that. This writes ``repetitive.jsonl``: the
same instruction, asking for the same nine keys, over the "Background" text of World Factbook country
profiles (public domain, ``sources/factbook_backgrounds.jsonl``; see README.md), cut at the last full
sentence within ``MAX_CHARS``. Profiles the main corpus summarises are left out, so the two workloads
share no text. Kind ``json_extraction``; ``split`` ``dev`` for the first ``DEV`` profiles (what tuning
may look at), ``test`` for the rest (what the published tables use); file order is the stream's order.

    python -m benchmarks.corpus.repetitive            # rewrite repetitive.jsonl
    python -m benchmarks.corpus.repetitive --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FACTBOOK = HERE / "sources" / "factbook_backgrounds.jsonl"
CORPUS = HERE / "corpus.jsonl"
OUT = HERE / "repetitive.jsonl"
ORIGIN = "The World Factbook (CIA; public domain)"
TEMPLATE = ("Fill in this record for the country described below. Reply with only the JSON object, with the keys "
            "\"name\", \"region\", \"independence_year\", \"former_ruler\", \"capital\", \"head_of_state\", "
            "\"main_conflict\", \"main_export\" and \"joined_un\".\n\nCountry profile: {text}")
MAX_CHARS = 500  # a paragraph: the answer, not the prompt, should dominate a request's time
COUNT, DEV = 24, 8
STRIDE = 10  # every 10th profile: regions and eras spread over the stream


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


def build() -> list[dict]:
    used = {json.loads(line)["source"].split()[0] for line in CORPUS.read_text().splitlines() if line.strip()}
    profiles = [json.loads(line) for line in FACTBOOK.read_text().splitlines() if line.strip()]
    eligible = [p for p in profiles if f"factbook:{p['file']}" not in used and len(p["background"]) >= 200]
    chosen = eligible[::STRIDE][:COUNT]
    return [{"id": f"json-extraction-{Path(p['file']).stem}", "prompt": TEMPLATE.format(text=cut(p["background"])),
             "kind": "json_extraction", "split": "dev" if i < DEV else "test",
             "source": f"factbook:{p['file']} {ORIGIN}"} for i, p in enumerate(chosen)]


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if repetitive.jsonl is out of date")
    args = parser.parse_args(argv)
    text = render(build())
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT.name} is out of date: run python -m benchmarks.corpus.repetitive", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(HERE.parent.parent)}: {text.count(chr(10))} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
