"""adaptive-spec: lossless speculative decoding with a controller that keeps it fast."""

from adaptive_spec.config import GenerationConfig
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.errors import AdaptiveSpecError, InvalidParameterError, ModelLoadError
from adaptive_spec.models import load_model
from adaptive_spec.result import GenerationResult, GenerationStats

__all__ = [
    "AdaptiveSpecError", "GenerationConfig", "GenerationResult", "GenerationStats", "InvalidParameterError",
    "ModelLoadError", "SpeculativeDecoder", "load_model",
]
__version__ = "0.1.0"
