"""Checks the CLI runs before it loads a model.

Loading the target takes seconds (a first load converts it for tens of seconds), and a command
that then fails on a flag it could have read at once wastes that time, or, for a result file
written at the end, the whole run. So every input that can be judged without the model is judged
here first: numbers, prompt files, drafters, output paths. Each failure is one
``InvalidParameterError`` naming the option the user typed.
"""

from __future__ import annotations

from pathlib import Path

from adaptive_spec.config import validate_seed
from adaptive_spec.errors import AdaptiveSpecError, InvalidParameterError
from adaptive_spec.outputs import check_writable  # noqa: F401 (one import for the CLI's checks)
from adaptive_spec.prompts import Prompt, check_prompt_text, load_prompts  # noqa: F401

SELF_DRAFTERS = ("none", "ngram", "suffix", "int8")  # built from the target: nothing to check before it loads

__all__ = ["check_drafters", "check_model_cache", "check_positive_int", "check_prompt_text", "check_seed", "check_writable", "read_prompts",
           "reworded"]


def check_positive_int(name: str, value: int) -> None:
    if value < 1:
        raise InvalidParameterError(name, value, "must be >= 1")


def check_seed(seed: int | None, name: str = "seed", signed: bool = True) -> None:
    if seed is not None:
        validate_seed(seed, name, signed)


def read_prompts(path: Path, name: str = "prompts") -> list[Prompt]:
    """The prompts of a JSONL file, every line checked (``adaptive_spec.prompts``)."""
    if not path.is_file():
        raise InvalidParameterError(name, str(path), "file not found")
    return load_prompts(path)


def check_drafters(specs: list[str] | tuple[str, ...], name: str, value: str | None = None) -> None:
    """Refuse an unknown drafter, or a ``model:<path>`` drafter whose path is no model folder,
    naming option ``name`` and ``value`` (the spec itself unless given: a bench config)."""
    from adaptive_spec.drafters import DRAFTER_NAMES
    from adaptive_spec.models import BUILTIN_MODELS, resolve_model_dir

    for spec in specs:
        if spec in SELF_DRAFTERS:
            continue
        source = spec[len("model:"):] if spec.startswith("model:") else ""
        if not source:
            raise InvalidParameterError(name, value or spec, f"unknown drafter {spec!r}; expected one of "
                                        f"{', '.join(DRAFTER_NAMES)}")
        if source in BUILTIN_MODELS:
            check_model_cache(source)
            continue
        try:
            resolve_model_dir(source)  # a folder or a hub id: cheap, and it names what is wrong
        except AdaptiveSpecError as exc:
            raise reworded(exc, name, value or spec) from exc


def reworded(exc: AdaptiveSpecError, name: str, value: object) -> InvalidParameterError:
    """``exc`` as an error about option ``name``: errors raised while loading a drafter's model
    name ``model``, which is the target's option, not the one the user got wrong."""
    return InvalidParameterError(name, value, getattr(exc, "reason", None) or str(exc))


def check_model_cache(model: str, name: str = "ADAPTIVE_SPEC_CACHE") -> None:
    """Refuse a built-in ``model`` whose first load would have to write an unwritable cache.

    Its conversion writes a safetensors copy under ``<cache>/models/`` (``models.ensure_converted``);
    without write access it would fail with an ``OSError`` after the GGUF was located. A copy
    already converted is only read, so a read-only cache that holds one is fine."""
    from adaptive_spec.models import BUILTIN_MODELS, check_manifest, default_cache_dir

    if model not in BUILTIN_MODELS:
        return
    models_dir = default_cache_dir() / "models"
    if check_manifest(models_dir / BUILTIN_MODELS[model].cache_key) is None:
        return
    try:
        check_writable(models_dir / "probe", name)
    except InvalidParameterError as exc:
        raise InvalidParameterError(name, str(default_cache_dir()), f"model {model!r} is not converted yet and the "
                                    f"cache is not writable ({exc.reason}); set {name} to a writable folder") from exc

