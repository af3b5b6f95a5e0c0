"""Drafters, one per module, built from the names the CLI and configs use."""

from __future__ import annotations

from adaptive_spec.drafters.base import Drafter, NoDrafter, Proposal
from adaptive_spec.drafters.int8 import Int8Drafter
from adaptive_spec.drafters.model import ModelDrafter
from adaptive_spec.drafters.ngram import NgramDrafter
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.models import LoadedModel, load_model

DRAFTER_NAMES = ("none", "ngram", "int8", "model:<path-or-name>")


def build_drafter(spec: str, target: LoadedModel) -> Drafter:
    """``none`` | ``ngram`` | ``int8`` | ``model:<path or built-in name>``."""
    if spec == "none":
        return NoDrafter()
    if spec == "ngram":
        return NgramDrafter()
    if spec == "int8":
        return Int8Drafter(target.model)
    if spec.startswith("model:") and len(spec) > len("model:"):
        device = next(target.model.parameters()).device
        dtype = next(target.model.parameters()).dtype
        draft = load_model(spec[len("model:") :], device=device, dtype=dtype)
        check_same_vocabulary(spec, draft, target)
        return ModelDrafter(draft.model, name=spec)
    raise InvalidParameterError("drafter", spec, f"unknown drafter; expected one of {', '.join(DRAFTER_NAMES)}")


def check_same_vocabulary(spec: str, draft: LoadedModel, target: LoadedModel) -> None:
    if draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise InvalidParameterError(
            "drafter", spec, f"its tokenizer's vocabulary ({len(draft.tokenizer)} tokens) differs from the target's ({len(target.tokenizer)})"
        )


__all__ = ["Drafter", "Int8Drafter", "ModelDrafter", "NgramDrafter", "NoDrafter", "Proposal", "build_drafter"]
