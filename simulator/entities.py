"""The things that move through the simulation: request classes and requests.

A *request class* is a kind of traffic (copy-heavy summarisation, open-ended chat, code...). It
fixes how long prompts and outputs are and, per drafter, how well drafts are accepted. Classes
are what make a traffic shift interesting: moving the mix from a class where prompt lookup is
accepted 80 % of the time to one where it is accepted 10 % of the time is exactly the change an
online controller must notice.

A *request* is one arrival. It is created by the workload with its lengths already drawn, then
stamped with times as it moves through a replica:

    arrival_s  -> start_s (prefill begins) -> first_token_s (prefill done) -> finish_s

Derived latencies (the serving literature's names):

- TTFT  = first_token_s - arrival_s                    (time to first token; includes queueing)
- TPOT  = (finish_s - first_token_s) / (output_tokens - 1)   (time per output token after the first)
- E2E   = finish_s - arrival_s
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from simulator.acceptance import AcceptanceProfile
from simulator.lengths import LengthDist

if TYPE_CHECKING:
    from simulator.profile import TokenStream

NOT_YET = math.nan  # a time stamp that has not happened (yet, or ever: the run ended first)


@dataclass(frozen=True)
class RequestClass:
    """A kind of traffic: length distributions and per-drafter acceptance."""

    name: str  # identifier used in mixes, traces and reports
    prompt_tokens: LengthDist  # prompt length distribution
    output_tokens: LengthDist  # output length distribution (tokens to generate, first one included)
    acceptance: dict[str, AcceptanceProfile] = field(default_factory=dict)  # drafter -> profile
    key: str = ""  # traffic key handed to policies in StepOutcome.key; defaults to the class name
    # the class's prompt and greedy answer as token ids (a profile's ``streams``): where present,
    # prompt lookup is run on them instead of drawn from ``acceptance`` (simulator/drafts.py)
    stream: TokenStream | None = None

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)


@dataclass(slots=True)
class Request:
    """One request, with its lengths and the times it reached each stage."""

    id: int  # arrival order, from 0
    klass: str  # request class name ("class" is a Python keyword)
    prompt_tokens: int  # tokens in the prompt (prefill length)
    output_tokens: int  # tokens to generate, the first (from prefill) included
    arrival_s: float  # simulated time of arrival
    replica: int = -1  # replica that served it (-1: not dispatched yet)
    start_s: float = NOT_YET  # prefill began
    first_token_s: float = NOT_YET  # prefill finished: first token out
    finish_s: float = NOT_YET  # last token out
    generated: int = 0  # tokens emitted so far
    steps: int = 0  # decode steps taken (prefill not counted)
    proposed: int = 0  # draft tokens proposed over all steps
    accepted: int = 0  # draft tokens accepted over all steps
    # the token budget the request was sent with (0: unknown, the output's length stands in); an
    # answer that ends before it (end of sequence) leaves the engine drafting past its end
    max_tokens: int = 0

    @property
    def done(self) -> bool:
        return self.finish_s == self.finish_s  # not NaN

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Mean seconds per output token after the first; 0 for a single-token output."""
        if self.output_tokens <= 1:
            return 0.0
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)
