"""transformers' own ``generate()`` as the peers a benchmark must beat, configured as documented.

- ``hf-plain``: greedy ``generate()``
- ``hf-prompt-lookup``: ``prompt_lookup_num_tokens=10`` (transformers' n-gram speculation)
- ``hf-assisted-int8``: assisted generation with the same int8 self-draft our ``int8`` drafter uses
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel

HF_PEERS = ("hf-plain", "hf-prompt-lookup", "hf-assisted-int8")


class HFPeer:
    def __init__(self, name: str, model: PreTrainedModel, eos_ids: frozenset[int], assistant: PreTrainedModel | None = None) -> None:
        if name not in HF_PEERS:
            raise ValueError(f"unknown transformers peer {name!r}; expected one of {HF_PEERS}")
        self.name = name
        self.model = model
        self.extra: dict = {}
        if name == "hf-prompt-lookup":
            self.extra = {"prompt_lookup_num_tokens": 10}
        elif name == "hf-assisted-int8":
            if assistant is None:
                raise ValueError("hf-assisted-int8 needs the int8 assistant model")
            self.extra = {"assistant_model": assistant}
        self.eos = sorted(eos_ids)

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], float]:
        """Greedy generation; returns the new token ids and the wall seconds it took."""
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([prompt_ids], device=device)
        start = time.perf_counter()
        out = self.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None, top_p=None, top_k=None,  # silence sampling defaults from generation_config
            eos_token_id=self.eos or None,
            pad_token_id=self.eos[0] if self.eos else None,
            **self.extra,
        )
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        return out[0, len(prompt_ids) :].tolist(), elapsed
