"""adaptive-spec: lossless speculative decoding with a controller that keeps it fast.

The public names below are loaded on first access (PEP 562), so ``import adaptive_spec`` - and
every torch-free layer under it (``adaptive_spec.errors``, the telemetry store and its commands,
the CLI of the simulator) - does not pay for importing torch and transformers.
"""

from __future__ import annotations

import importlib

# public name -> module that defines it
_LAZY = {
    "AdaptiveSpecError": "adaptive_spec.errors",
    "InvalidParameterError": "adaptive_spec.errors",
    "ModelLoadError": "adaptive_spec.errors",
    "GenerationConfig": "adaptive_spec.config",
    "GenerationResult": "adaptive_spec.result",
    "GenerationStats": "adaptive_spec.result",
    "SpeculativeDecoder": "adaptive_spec.decoder",
    "load_model": "adaptive_spec.models",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module 'adaptive_spec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "AdaptiveSpecError", "GenerationConfig", "GenerationResult", "GenerationStats", "InvalidParameterError",
    "ModelLoadError", "SpeculativeDecoder", "load_model",
]
__version__ = "0.1.0"
