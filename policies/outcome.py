"""The record every speculative step produces, and the action a policy returns.

These two dataclasses are the whole contract between the engine (`adaptive_spec/`), the
simulator (`simulator/`) and the controllers (`policies/`). They are plain Python on purpose:
policies and the simulator never import torch.

Glossary (after vLLM's spec_decode and Leviathan et al. 2023):
- *proposed*: draft tokens the drafter offered this step (at most ``k``; n-gram lookup may offer fewer).
- *accepted*: the prefix of the proposed tokens the verifier kept.
- *recovered*: the token sampled from the residual ``norm(max(0, p - q))`` at the first rejection
  (greedy: the target's argmax there).
- *bonus*: the extra token sampled from the target when every proposed token was accepted.
Every step therefore emits ``num_accepted + 1`` tokens, unless generation stops inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PLAIN = "none"  # name of the drafter that proposes nothing: plain decoding through the same loop


@dataclass(frozen=True, slots=True)
class Action:
    """What to do in the next step: which drafter proposes, and how many tokens (k = 0: plain)."""

    drafter: str
    k: int

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ValueError(f"k must be >= 0, got k={self.k}")

    @property
    def is_plain(self) -> bool:
        return self.k == 0 or self.drafter == PLAIN


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one decode step did and what it cost.

    ``accepted_per_position`` is derived: acceptance is always a prefix, so position ``i`` was
    accepted iff ``i < num_accepted``.
    """

    drafter: str  # drafter that proposed this step ("none" for plain decoding)
    k: int  # draft length asked for
    proposed: int  # draft tokens actually proposed (<= k)
    num_accepted: int  # accepted prefix length (<= proposed)
    emitted: int  # tokens appended to the output this step (num_accepted + 1 unless a stop cut it)
    draft_s: float  # wall seconds spent proposing
    verify_s: float  # wall seconds spent in the target forward + verification
    context_len: int = 0  # tokens in the sequence before this step (prompt + generated)
    # per proposed token: the drafter's probability of the token it proposed (None: no probabilities,
    # e.g. n-gram lookup). Learned early stopping uses these as features.
    draft_confidences: tuple[float, ...] | None = None
    key: str = ""  # traffic key (model + route, or caller-given) the step belongs to
    timestamp: float = field(default=0.0)  # time.time() at the end of the step
    # per proposed token: entropy (nats) of the drafter's q at that position (None: unknown), an
    # optional early-stop feature. Last field so that positional construction is unchanged.
    draft_entropies: tuple[float, ...] | None = None
    # how many context tokens the n-gram drafter matched to find this draft (None: not an n-gram
    # draft); the adaptive policy keeps an acceptance profile per order (policies.match_gate)
    match_order: int | None = None
    match_ambiguous: bool = False  # earlier occurrences of the matched n-gram continued differently
    # what the policy chose for this step, before the budget capped k or the match gate cut the
    # draft (None: the caller did not say). ``drafter``/``k`` above are what the step did.
    decided_drafter: str | None = None
    decided_k: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.num_accepted <= self.proposed <= self.k:
            raise ValueError(
                f"need 0 <= num_accepted <= proposed <= k, got num_accepted={self.num_accepted}, "
                f"proposed={self.proposed}, k={self.k}"
            )

    @property
    def accepted_per_position(self) -> tuple[bool, ...]:
        return tuple(i < self.num_accepted for i in range(self.proposed))

    @property
    def step_s(self) -> float:
        return self.draft_s + self.verify_s
