"""Prompts from outside: the JSONL prompt files of ``bench``, ``calibrate`` and ``validate-sim``,
and the text checks every prompt passes before a model is loaded.

A prompt file has one JSON object a line: ``id`` (text or integer, unique in the file),
``prompt`` (non-empty text) and optionally ``kind`` (the request class, text), ``split`` (``dev``
or ``test`` in benchmarks/corpus/: which part tuning may look at) and ``source`` (where the text
came from); other fields are ignored. Blank lines are skipped. The first bad line fails the whole file with one ``InvalidParameterError`` naming the
file and line, before any model loads.

Text that is not valid UTF-8 is rejected, not repaired: invalid bytes in a file, and lone
surrogates (what Python makes of invalid bytes on the command line, or an unpaired ``\\ud800``
escape in JSON). Replacing them with U+FFFD would make the model read a prompt the user never
wrote, and a speculative decoder's whole promise is that it changes nothing about the output.

Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from adaptive_spec.errors import InvalidParameterError

UTF8_RULE = "text must be valid UTF-8; invalid text is rejected, not replaced"


@dataclass
class Prompt:
    id: str
    prompt: str
    kind: str = "default"
    split: str | None = None  # "dev" (tuning may look at it) or "test" (published tables only)
    source: str | None = None  # where the prompt's text came from, for the corpus's records


def text_problem(text: str) -> str | None:
    """None when ``text`` encodes as UTF-8, else where it does not (a lone surrogate).

    >>> text_problem("café"), text_problem("ab\\udcff")
    (None, 'lone surrogate U+DCFF at character 2 (invalid UTF-8 bytes, or an unpaired \\\\ud800-style escape)')
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"lone surrogate U+{ord(text[exc.start]):04X} at character {exc.start} "
                "(invalid UTF-8 bytes, or an unpaired \\ud800-style escape)")
    return None


def check_prompt_text(name: str, text: object) -> str:
    """``text`` when it is non-empty text that encodes as UTF-8; else ``InvalidParameterError``
    naming ``name``, with an excerpt around the first bad character as the value."""
    if not isinstance(text, str):
        raise InvalidParameterError(name, text, f"must be text, not {type(text).__name__}")
    if not text.strip():
        raise InvalidParameterError(name, text, "must be non-empty text")
    problem = text_problem(text)
    if problem:
        raise InvalidParameterError(name, _excerpt(text), f"{problem}; {UTF8_RULE}")
    return text


def load_prompts(path: str | Path) -> list[Prompt]:
    """The prompts of a JSONL file, each line checked (see the module docstring)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidParameterError("prompts", str(path), f"cannot read it ({exc.strerror or exc})") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InvalidParameterError("prompts", f"{path}:{line}", f"byte 0x{data[exc.start]:02x} is not valid UTF-8; "
                                    f"{UTF8_RULE}") from exc
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}  # id -> the line it was first seen on
    for lineno, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):
        if not line.strip():
            continue
        prompt = _parse_line(line, f"{path}:{lineno}")
        if prompt.id in first_line:
            # bench compares every config's output with plain's by id: a repeated id would compare
            # one prompt's output with another's
            raise InvalidParameterError("prompts", f"{path}:{lineno}", f"duplicate id {prompt.id!r} (lines "
                                        f"{first_line[prompt.id]} and {lineno}); ids must be unique")
        first_line[prompt.id] = lineno
        prompts.append(prompt)
    if not prompts:
        raise InvalidParameterError("prompts", str(path), "no prompts in file")
    return prompts


def _parse_line(line: str, where: str) -> Prompt:
    def bad(reason: str) -> InvalidParameterError:
        return InvalidParameterError("prompts", where, reason)

    try:
        row = json.loads(line)
    except ValueError as exc:
        raise bad(f"not JSON ({exc}); each line needs an object with 'id' and 'prompt'") from exc
    if not isinstance(row, dict) or "id" not in row or "prompt" not in row:
        raise bad("each line needs a JSON object with 'id' and 'prompt'")
    id_ = row["id"]
    if isinstance(id_, bool) or not isinstance(id_, (str, int)) or (isinstance(id_, str) and not id_.strip()):
        raise bad(f"'id' must be non-empty text or an integer, not {id_!r}")
    kind = row.get("kind", "default")
    if not isinstance(kind, str) or not kind.strip():
        raise bad(f"'kind' must be non-empty text, not {kind!r}")
    for name in ("split", "source"):
        value = row.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip() or text_problem(value)):
            raise bad(f"'{name}' must be non-empty UTF-8 text, not {value!r}")
    prompt = row["prompt"]
    if not isinstance(prompt, str):
        raise bad(f"'prompt' must be text, not {type(prompt).__name__} {_excerpt(json.dumps(prompt))}")
    if not prompt.strip():
        raise bad("'prompt' must be non-empty text")
    problem = text_problem(prompt) or text_problem(str(id_)) or text_problem(kind)
    if problem:
        raise bad(f"{problem}; {UTF8_RULE}")
    return Prompt(id=str(id_), prompt=prompt, kind=kind, split=row.get("split"), source=row.get("source"))


def select_split(prompts: list[Prompt], split: str, where: str = "prompts") -> list[Prompt]:
    """The prompts of one split; ``InvalidParameterError`` naming the splits there are when none is
    ``split`` (a typo must not run an empty or a whole benchmark)."""
    chosen = [p for p in prompts if p.split == split]
    if not chosen:
        present = sorted({p.split for p in prompts if p.split is not None})
        have = f"its splits: {', '.join(present)}" if present else "its prompts have no 'split' field"
        raise InvalidParameterError("split", split, f"no prompt of {where} is in this split; {have}")
    return chosen


def _excerpt(text: str, width: int = 40) -> str:
    """The start of ``text``, or the stretch around its first character that is not UTF-8."""
    try:
        text.encode("utf-8")
        at = 0
    except UnicodeEncodeError as exc:
        at = exc.start
    start = max(0, at - width // 2)
    piece = text[start:start + width]
    return ("..." if start else "") + piece + ("..." if start + width < len(text) else "")
