"""Drafters, one per module, built from the names the CLI and configs use.

Which drafters a command loads depends on the device: ``default_drafters`` decides it before any
model is loaded, so that a drafter the device cannot run fails at once, naming both.
"""

from __future__ import annotations

from adaptive_spec.drafters.base import Drafter, NoDrafter, Proposal
from adaptive_spec.drafters.int8 import DEVICE_TYPES as INT8_DEVICE_TYPES
from adaptive_spec.drafters.int8 import Int8Drafter, device_error
from adaptive_spec.drafters.model import ModelDrafter
from adaptive_spec.drafters.ngram import NgramDrafter
from adaptive_spec.drafters.suffix import SuffixDrafter, SuffixSettings
from adaptive_spec.drafters.suffix_store import HistoryLimits, HistoryStore
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.models import LoadedModel, load_model

DRAFTER_NAMES = ("none", "ngram", "suffix", "int8", "model:<path-or-name>")
# the set loaded when none is given: the self-drafters that need no second model, in the order
# static and heuristic policies take the first of; each kept only where its device can run it
DEFAULT_DRAFTERS = ("ngram", "int8")


def runs_on(spec: str, device_type: str) -> bool:
    """Whether drafter ``spec`` can run with the target on ``device_type`` (``cpu``, ``cuda``, ...)."""
    return spec != "int8" or device_type in INT8_DEVICE_TYPES


def default_drafters(device_type: str, given: list[str] | None = None, name: str = "drafter") -> list[str]:
    """The drafters to load with a target on ``device_type``.

    ``given`` None (the user named none): ``DEFAULT_DRAFTERS`` that the device runs, so
    ``["ngram", "int8"]`` on CPU and ``["ngram"]`` on CUDA. ``given`` a list: that list, unchanged,
    once every drafter in it runs there; ``int8`` on CUDA raises one ``InvalidParameterError``
    naming ``name`` (the option: ``drafter``, ``drafters``), the value and the device.

    >>> default_drafters("cuda"), default_drafters("cpu"), default_drafters("cuda", ["ngram", "model:x"])
    (['ngram'], ['ngram', 'int8'], ['ngram', 'model:x'])
    """
    if given is None:
        return [d for d in DEFAULT_DRAFTERS if runs_on(d, device_type)]
    for spec in given:
        if not runs_on(spec, device_type):
            raise device_error(device_type, name)
    return list(given)


def build_drafter(spec: str, target: LoadedModel, history: HistoryStore | None = None) -> Drafter:
    """``none`` | ``ngram`` | ``suffix`` | ``int8`` | ``model:<path or built-in name>``.

    ``history``: the past outputs ``suffix`` drafts from (default: a fresh store, per traffic key)."""
    if spec == "none":
        return NoDrafter()
    if spec == "ngram":
        return NgramDrafter()
    if spec == "suffix":
        return SuffixDrafter(history)
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


__all__ = ["DEFAULT_DRAFTERS", "Drafter", "HistoryLimits", "HistoryStore", "Int8Drafter", "ModelDrafter", "NgramDrafter",
           "NoDrafter", "Proposal", "SuffixDrafter", "SuffixSettings", "build_drafter", "default_drafters", "runs_on"]
