"""Profiles: what the engine measured, in the form the simulator fits its cost model on.

A profile is a JSON document (format ``adaptive-spec-profile/1``, described in full in
``simulator/PROFILE.md``) that ``adaptive-spec calibrate`` writes after timing the real engine, and
that anyone can write by hand from measurements on their own GPUs. It holds *samples*, not a
model: the cost model (``simulator/cost_model.py``) is fitted on them, so a profile stays valid
when the fitting changes.

Sections:

- ``prefill``     ``[{"prompt_tokens": n, "seconds": s}, ...]``
- ``verify``      ``[{"tokens": k + 1, "context_len": c, "batch": b, "seconds": s}, ...]``: one target
                  forward over ``tokens`` tokens for each of ``batch`` sequences (``batch`` defaults
                  to 1; a plain decode step is ``tokens = 1``); ``"packed": d`` marks a packed
                  forward where ``d`` of the rows are ``tokens`` wide and the others one token
- ``ride``        optional, ``[{"prompt_tokens": n, "batch": b, "seconds": s, "alone_s": s0}, ...]``: a
                  batched step of ``b`` one-token rows with a chunk of ``n`` prompt tokens riding in
                  its forward (the batched engine's riders), and the same step without it
- ``draft``       ``{"<drafter>": {"per_token_s": s, "per_call_s": s0, "batched": true}}``
- ``acceptance``  ``{"<class>": {"<drafter>": {"rate": a} | {"per_position": [...], "hit_rate": h}}}``
- ``streams``     ``{"<class>": {"prompt": [ids], "output": [ids]}}``: a prompt's tokens and its greedy
                  answer's, on which the simulator runs prompt lookup itself (``simulator/drafts.py``)
- ``metadata``    free-form: model, device, date, engine version; ``illustrative: true`` marks
                  numbers that were not measured.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from simulator.acceptance import AcceptanceProfile, acceptance_from_dict

FORMAT = "adaptive-spec-profile/1"


@dataclass(frozen=True)
class RideSample:
    prompt_tokens: int  # a prompt chunk riding in a batched step
    batch: int  # the step's one-token rows
    seconds: float  # the step with the chunk
    alone_s: float  # the same step without it


@dataclass(frozen=True)
class PrefillSample:
    prompt_tokens: int  # prompt length processed in one prefill
    seconds: float  # wall time of that prefill (first token's logits included)


@dataclass(frozen=True)
class VerifySample:
    tokens: int  # tokens per sequence in the forward: k + 1 for a speculative step, 1 for plain
    context_len: int  # tokens already in the KV cache of each sequence
    seconds: float  # wall time of the forward plus verification
    batch: int = 1  # sequences in the forward (continuous batching); 1 for today's engine
    # a packed forward (policies.batch_layout) where this many rows are ``tokens`` wide and the rest
    # one token; 0: padded, every row ``tokens`` wide
    packed: int = 0

    @property
    def width(self) -> float:
        """Tokens the forward scored per row: ``tokens``, or a packed forward's rows' mean."""
        return (self.tokens * self.packed + self.batch - self.packed) / self.batch if self.packed else self.tokens


@dataclass(frozen=True)
class DraftCost:
    per_token_s: float  # seconds to propose one draft token
    per_call_s: float = 0.0  # fixed seconds per drafting call (e.g. launching a draft model)
    batched: bool = True  # True: one call drafts for the whole batch (a draft model on the GPU);
    # False: each sequence is drafted separately (n-gram lookup runs per sequence on the host)


@dataclass(frozen=True)
class TokenStream:
    """One prompt's token ids and its greedy answer's: lookups on them are the engine's lookups."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]


@dataclass(frozen=True)
class Profile:
    """Measured costs and acceptance of one engine on one device."""

    prefill: tuple[PrefillSample, ...]
    verify: tuple[VerifySample, ...]
    draft: dict[str, DraftCost] = field(default_factory=dict)
    acceptance: dict[str, dict[str, AcceptanceProfile]] = field(default_factory=dict)  # class -> drafter -> profile
    metadata: dict = field(default_factory=dict)
    streams: dict[str, TokenStream] = field(default_factory=dict)  # class -> its recorded tokens
    ride: tuple[RideSample, ...] = ()  # what prompt chunks add to the batched steps they ride in

    @property
    def drafters(self) -> list[str]:
        return sorted(self.draft)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile JSON file; errors name the file and the field."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    except (OSError, UnicodeDecodeError) as err:  # a folder, no permission, not text
        raise ValueError(f"{path}: cannot be read as a profile ({err})") from None
    return profile_from_dict(raw, source=str(path))


def _number(value: object, path: str, minimum: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{path} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):  # nan passes every comparison below
        raise ValueError(f"{path} must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        raise ValueError(f"{path} must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return float(value)


def _integer(value: object, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{path} must be an integer >= {minimum}, got {value!r}")
    return value


def _samples(raw: dict, name: str, where: str, fields: dict[str, tuple[str, int]], optional: dict) -> list[dict]:
    rows = raw.get(name)
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{where}: {name} must be a non-empty list of samples, got {rows!r}")
    out = []
    for i, row in enumerate(rows):
        path = f"{where}: {name}[{i}]"
        if not isinstance(row, dict):
            raise ValueError(f"{path} must be an object, got {row!r}")
        for key in row:
            if key not in fields and key not in optional:
                raise ValueError(f"{path}.{key} is not a known field (known: {', '.join([*fields, *optional])})")
        values = {}
        for key, (kind, minimum) in {**fields, **optional}.items():
            if key not in row:
                if key in fields:
                    raise ValueError(f"{path}.{key} is required")
                continue
            if kind == "int":
                values[key] = _integer(row[key], f"{path}.{key}", minimum)
            else:
                values[key] = _number(row[key], f"{path}.{key}", minimum, strict=True)
        out.append(values)
    return out


def profile_from_dict(raw: object, source: str = "profile") -> Profile:
    """Validate a profile already parsed from JSON (``source`` names it in errors)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: a profile must be a JSON object, got {type(raw).__name__}")
    fmt = raw.get("format", FORMAT)
    if fmt != FORMAT:
        raise ValueError(f"{source}: format must be {FORMAT!r}, got format={fmt!r}")
    known = {"format", "metadata", "prefill", "verify", "ride", "draft", "acceptance", "streams"}
    for key in raw:
        if key not in known:
            raise ValueError(f"{source}: {key} is not a known field (known: {', '.join(sorted(known))})")
    prefill = [PrefillSample(**v) for v in _samples(
        raw, "prefill", source, {"prompt_tokens": ("int", 1), "seconds": ("float", 0)}, {})]
    verify = [VerifySample(**v) for v in _samples(
        raw, "verify", source, {"tokens": ("int", 1), "context_len": ("int", 0), "seconds": ("float", 0)},
        {"batch": ("int", 1), "packed": ("int", 0)})]
    for i, v in enumerate(verify):
        if v.packed >= v.batch or (v.packed and v.tokens == 1):
            raise ValueError(f"{source}: verify[{i}].packed must name fewer rows than batch ({v.batch}), in a forward "
                             f"more than one token wide, got packed={v.packed}, tokens={v.tokens}")
    for section in ("draft", "acceptance"):
        if not isinstance(raw.get(section) or {}, dict):
            raise ValueError(f"{source}: {section} must be an object, got {raw[section]!r:.80}")
    draft = {}
    for name, spec in (raw.get("draft") or {}).items():
        path = f"{source}: draft.{name}"
        if not isinstance(spec, dict):
            raise ValueError(f"{path} must be an object with per_token_s, got {spec!r}")
        for key in spec:
            if key not in ("per_token_s", "per_call_s", "batched"):
                raise ValueError(f"{path}.{key} is not a known field (known: batched, per_call_s, per_token_s)")
        if "per_token_s" not in spec:
            raise ValueError(f"{path}.per_token_s is required")
        batched = spec.get("batched", True)
        if not isinstance(batched, bool):
            raise ValueError(f"{path}.batched must be true or false, got {batched!r}")
        draft[name] = DraftCost(
            _number(spec["per_token_s"], f"{path}.per_token_s"),
            _number(spec.get("per_call_s", 0.0), f"{path}.per_call_s"),
            batched,
        )
    acceptance: dict[str, dict[str, AcceptanceProfile]] = {}
    for klass, per_drafter in (raw.get("acceptance") or {}).items():
        if not isinstance(per_drafter, dict):
            raise ValueError(f"{source}: acceptance.{klass} must map drafter names to profiles, got {per_drafter!r}")
        acceptance[klass] = {
            d: acceptance_from_dict(spec, f"{source}: acceptance.{klass}.{d}") for d, spec in per_drafter.items()
        }
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{source}: metadata must be an object, got {metadata!r}")
    ride = [RideSample(**v) for v in _samples(
        raw, "ride", source, {"prompt_tokens": ("int", 1), "batch": ("int", 1), "seconds": ("float", 0),
                              "alone_s": ("float", 0)}, {})
    ] if "ride" in raw else []
    return Profile(tuple(prefill), tuple(verify), draft, acceptance, metadata, _streams(raw.get("streams"), source),
                   tuple(ride))


def _streams(raw: object, source: str) -> dict[str, TokenStream]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: streams must map class names to {{prompt, output}}, got {type(raw).__name__}")
    out = {}
    for klass, spec in raw.items():
        path = f"{source}: streams.{klass}"
        if not isinstance(spec, dict) or set(spec) != {"prompt", "output"}:
            raise ValueError(f"{path} must be an object with exactly prompt and output, got {spec!r:.80}")
        lists = []
        for name in ("prompt", "output"):
            ids = spec[name]
            if (not isinstance(ids, list) or not ids
                    or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)):
                raise ValueError(f"{path}.{name} must be a non-empty list of token ids (integers >= 0)")
            lists.append(tuple(ids))
        out[klass] = TokenStream(*lists)
    return out
