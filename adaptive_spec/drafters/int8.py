"""Self-drafting with a dynamically int8-quantized copy of the target.

Same weights, same vocabulary, no extra download: ``torch.ao.quantization.quantize_dynamic``
replaces every ``nn.Linear`` with an int8 kernel (weights quantized once, activations per call).
Measured on SmolLM2-135M, greedy acceptance is about 0.57. CPU only: PyTorch's dynamic
quantized kernels (fbgemm / qnnpack) have no CUDA implementation.
"""

from __future__ import annotations

import copy
import warnings

import torch
from transformers import PreTrainedModel

from adaptive_spec.drafters.model import ModelDrafter
from adaptive_spec.errors import InvalidParameterError

DEVICE_TYPES = ("cpu",)  # torch.ao's dynamic quantized kernels (fbgemm / qnnpack) have no CUDA version


def device_error(device: object, name: str = "drafter") -> InvalidParameterError:
    """The one error for ``int8`` on a device it cannot run on; ``name`` is the option that asked for it."""
    return InvalidParameterError(
        name, "int8", f"dynamic int8 quantization runs on CPU only, not on device {str(device)!r}; "
        "use ngram or model:<path> there, or --device cpu")


def quantize_int8(model: PreTrainedModel) -> PreTrainedModel:
    """A dynamically int8-quantized deep copy of ``model`` (the original is left untouched)."""
    device = next(model.parameters()).device
    if device.type not in DEVICE_TYPES:
        raise device_error(device)
    clone = copy.deepcopy(model).float().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice in favour of torchao
        return torch.ao.quantization.quantize_dynamic(clone, {torch.nn.Linear}, dtype=torch.qint8)


class Int8Drafter(ModelDrafter):
    def __init__(self, target: PreTrainedModel) -> None:
        super().__init__(quantize_int8(target), name="int8")
