"""A smaller causal LM with the target's vocabulary proposes tokens one by one.

The draft model keeps its own KV cache. At each proposal it first catches up with the committed
context (feeding only tokens it has not seen: usually one or two), then drafts ``k`` tokens
autoregressively. Tokens it drafted that the target rejected are rolled back at the next call,
found as the point where its cached tokens stop matching the context.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from adaptive_spec.cached_lm import CachedLM
from adaptive_spec.config import GenerationConfig
from adaptive_spec.drafters.base import Drafter, Proposal
from adaptive_spec.sampling import logits_to_probs, sample


class ModelDrafter(Drafter):
    def __init__(self, model: PreTrainedModel, name: str = "model") -> None:
        self.name = name
        self.lm = CachedLM(model)
        self.vocab_size = self.lm.vocab_size

    def reset(self) -> None:
        self.lm.reset()

    def propose(self, context: list[int], k: int, config: GenerationConfig, generator, early_stop=None) -> Proposal:
        if k <= 0:
            return Proposal(tokens=[])
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        confidences: list[float] = []
        entropies: list[float] = []
        logits = self.lm.sync(context)[-1]  # [vocab]
        for i in range(k):
            if config.greedy:
                probs = logits.softmax(-1)
                token = int(probs.argmax())
            else:
                probs = logits_to_probs(logits, config.temperature, config.top_k, config.top_p)
                token = int(sample(probs[None], generator)[0])
                rows.append(probs)
            tokens.append(token)
            confidences.append(float(probs[token]))
            if early_stop is not None:
                entropies.append(float(torch.special.entr(probs).sum()))
                # keep this token (verifying it is nearly free) but draft no further if it is unlikely to pass
                if not early_stop.should_continue(early_stop.features(confidences[-1], entropies[-1], i)):
                    break
            if i + 1 < k:  # the last draft needs no forward: its successor is the target's job
                logits = self.lm.extend([token])[-1]
        q = torch.stack(rows) if rows else None  # [len(tokens), vocab]
        return Proposal(tokens=tokens, probs=q, confidences=tuple(confidences), entropies=tuple(entropies) or None)
