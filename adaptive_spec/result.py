"""What a generation returns: text, ids, why it stopped, and the counters of every step.

Counters, not rates, are stored; rates are derived on read (vLLM's definitions):
- ``acceptance_rate = accepted_tokens / draft_tokens``
- ``mean_acceptance_length = 1 + accepted_tokens / drafts`` (tokens per drafting step, the
  recovered or bonus token included; 1.0 means speculation bought nothing)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.outcome import StepOutcome


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    steps: int = 0  # decode steps after prefill (the first token comes from prefill)
    drafts: int = 0  # steps that verified at least one draft token
    draft_tokens: int = 0
    accepted_tokens: int = 0
    prefill_s: float = 0.0  # time to first token
    decode_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    def add_step(self, outcome: StepOutcome) -> None:
        self.steps += 1
        if outcome.proposed:
            self.drafts += 1
            self.draft_tokens += outcome.proposed
            self.accepted_tokens += outcome.num_accepted
        self.draft_s += outcome.draft_s
        self.verify_s += outcome.verify_s

    def to_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "steps": self.steps,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "tokens_per_s": self.tokens_per_s,
            "time_to_first_token_s": self.prefill_s,
            "elapsed_s": self.elapsed_s,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
        }


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    finish_reason: str  # "length" | "eos" | "stop"
    stats: GenerationStats
    steps: list[StepOutcome] = field(default_factory=list)

    def to_dict(self, with_steps: bool = False) -> dict:
        out = {"text": self.text, "token_ids": self.token_ids, "finish_reason": self.finish_reason, "stats": self.stats.to_dict()}
        if with_steps:
            out["steps"] = [
                {"drafter": s.drafter, "k": s.k, "proposed": s.proposed, "accepted": s.num_accepted,
                 "emitted": s.emitted, "draft_s": s.draft_s, "verify_s": s.verify_s}
                for s in self.steps
            ]
        return out
