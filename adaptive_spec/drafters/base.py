"""The drafter interface: propose up to ``k`` next tokens for a context.

Two methods, like transformers' CandidateGenerator: ``propose`` and ``reset``. A drafter that
returns probabilities (``q``) gets exact rejection sampling against them; one that returns none is
treated as deterministic (``q`` one-hot on each proposed token), which is also exact.

To plug in your own, subclass ``Drafter`` and pass an instance to ``SpeculativeDecoder``::

    class EchoDrafter(Drafter):
        name = "echo"
        def propose(self, context, k, config, generator, early_stop=None):
            return Proposal(tokens=context[-k:])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from adaptive_spec.config import GenerationConfig


@dataclass
class Proposal:
    tokens: list[int]  # proposed ids, at most k
    probs: torch.Tensor | None = None  # [len(tokens), vocab] the draft's q after warping, or None
    confidences: tuple[float, ...] | None = None  # q of each proposed token (features for the controller)
    entropies: tuple[float, ...] | None = None  # entropy of q at each proposed position, when computed
    match_order: int | None = None  # n-gram drafters: how many context tokens the match spans
    match_ambiguous: bool = False  # n-gram drafters: earlier matches were followed by other tokens

    def __post_init__(self) -> None:
        if self.probs is not None and self.probs.shape[0] != len(self.tokens):
            raise ValueError(f"probs must have one row per proposed token: {self.probs.shape[0]} != {len(self.tokens)}")


_LOOKUP_CONFIG = GenerationConfig()


class Drafter(ABC):
    name: str = "drafter"
    vocab_size: int | None = None  # None: proposes ids only, no distribution over a vocabulary
    # True for lookups whose cost does not grow with k and that report ``Proposal.match_order``:
    # the engine may ask for up to the policy's max_k and let the policy's draft gate cut
    reports_match_order: bool = False

    @abstractmethod
    def propose(
        self, context: list[int], k: int, config: GenerationConfig, generator: torch.Generator | None, early_stop=None
    ) -> Proposal:
        """Up to ``k`` tokens continuing ``context`` (prompt + everything generated so far).

        ``early_stop`` (optional, see ``policies.early_stop``) may end the draft before ``k``
        tokens: drafters with probabilities ask ``early_stop.should_continue(features)`` after each
        token. Drafters without probabilities ignore it.
        """

    def reset(self) -> None:
        """Forget per-request state (caches). Called at the start of every generation."""

    def for_request(self, key: str) -> "Drafter":
        """The drafter one request of traffic key ``key`` uses. Drafters that learn across requests
        (``suffix``) return a view bound to the key; the others, themselves."""
        return self

    def learn(self, output: list[int]) -> None:
        """The request this drafter (as ``for_request`` returned it) served completed with ``output``."""

    def gauges(self) -> dict[str, float]:
        """What the drafter holds across requests, by gauge name (telemetry and the dashboard)."""
        return {}

    def lookup(self, context: list[int], k: int) -> tuple[list[int], int | None, bool]:
        """A draft as shadow drafting and the replay take it (``policies.shadow``): tokens, match
        order, ambiguous. Meant for drafters without probabilities, whose drafts ignore sampling."""
        proposal = self.propose(context, k, _LOOKUP_CONFIG, None)
        return proposal.tokens, proposal.match_order, proposal.match_ambiguous


class NoDrafter(Drafter):
    """Proposes nothing: the step is plain decoding through the same loop."""

    name = "none"

    def propose(self, context, k, config, generator, early_stop=None) -> Proposal:
        return Proposal(tokens=[])
