"""Generation parameters, named as in transformers' GenerationConfig, validated once at entry."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.prompts import UTF8_RULE, text_problem

# Batched engine: prompt tokens a step prefills while other rows decode. On the CPU a forward's
# cost grows with its tokens, so this bounds the pause a newcomer adds to every row's step; a
# smaller chunk pauses less but the newcomer waits more steps. Chosen where the pause had shrunk
# most and the newcomer's first token came no later than without chunks (benchmarks/prefill_chunk.py).
PREFILL_CHUNK = 256

MIN_SEED, MAX_SEED = -(2**63), 2**64 - 1  # what torch.Generator.manual_seed takes
MAX_DRAFT_LEN = 64  # verifying more tokens than this in one pass never paid off on any device we measured


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 128  # enough for a demo answer; raise it for long outputs
    do_sample: bool = False  # greedy by default: reproducible, and the lossless claim is exact
    temperature: float = 1.0  # applied identically to the target's p and the draft's q
    top_k: int = 0  # 0 disables top-k filtering
    top_p: float = 1.0  # 1.0 disables nucleus filtering
    seed: int | None = None  # seeds the sampler's generator; None draws a fresh seed
    stop_strings: tuple[str, ...] = field(default_factory=tuple)  # stop once the text contains one
    ignore_eos: bool = False  # benchmarks set it so every config generates the same length

    def __post_init__(self) -> None:
        # transformers' GenerationConfig takes one stop string as a plain str; iterated as it is, "END"
        # would stop at the first "E", "N" or "D". A list becomes a tuple, as the field's type says.
        if self.stop_strings is None:  # as transformers takes it: none
            object.__setattr__(self, "stop_strings", ())
        elif isinstance(self.stop_strings, str):
            object.__setattr__(self, "stop_strings", (self.stop_strings,))
        elif isinstance(self.stop_strings, list):
            object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        validate_generation(self)

    @property
    def greedy(self) -> bool:
        """Temperature 0 means greedy even with do_sample, as in most serving stacks."""
        return not self.do_sample or self.temperature == 0.0


def validate_generation(cfg: GenerationConfig) -> None:
    if isinstance(cfg.max_new_tokens, bool) or not isinstance(cfg.max_new_tokens, int) or cfg.max_new_tokens < 1:
        raise InvalidParameterError("max_new_tokens", cfg.max_new_tokens, "must be an integer >= 1")
    if not _finite(cfg.temperature) or cfg.temperature < 0:
        raise InvalidParameterError("temperature", cfg.temperature, "must be a finite number >= 0")
    if isinstance(cfg.top_k, bool) or not isinstance(cfg.top_k, int) or cfg.top_k < 0:
        raise InvalidParameterError("top_k", cfg.top_k, "must be an integer >= 0 (0 disables it)")
    if not _finite(cfg.top_p) or not 0.0 < cfg.top_p <= 1.0:
        raise InvalidParameterError("top_p", cfg.top_p, "must be in (0, 1]")
    if cfg.seed is not None:
        validate_seed(cfg.seed)
    for stop in cfg.stop_strings:
        if not isinstance(stop, str) or not stop:
            raise InvalidParameterError("stop_strings", cfg.stop_strings, "must be non-empty strings")
        if text_problem(stop):  # it could never match the decoded text
            raise InvalidParameterError("stop_strings", stop, f"{text_problem(stop)}; {UTF8_RULE}")


def validate_seed(seed: int, name: str = "seed", signed: bool = True) -> int:
    """A seed torch's generators take: 64 bits, signed or unsigned (torch maps a negative seed to
    2**64 - 1 + seed); anything wider would fail deep inside the sampler. ``signed=False`` for
    seeds that also feed numpy and the simulator, which take no negative seed."""
    low = MIN_SEED if signed else 0
    if isinstance(seed, bool) or not isinstance(seed, int) or not low <= seed <= MAX_SEED:
        raise InvalidParameterError(name, seed, f"must be an integer in [{'-2**63' if signed else '0'}, 2**64 - 1]")
    return seed


def context_overflow(prompt_tokens: int, max_new_tokens: int, context: int) -> InvalidParameterError:
    """The error for a request that does not fit the model's context: it names the prompt when the
    prompt alone leaves no room for one new token (no max_new_tokens would help), else
    max_new_tokens, with the most that fits."""
    if prompt_tokens >= context:
        return InvalidParameterError("prompt", f"<{prompt_tokens} tokens>", f"the prompt alone fills the model's context of "
                                     f"{context} tokens, leaving no room to generate; shorten it")
    return InvalidParameterError("max_new_tokens", max_new_tokens, f"prompt ({prompt_tokens} tokens) + max_new_tokens exceeds "
                                 f"the model's context of {context}; at most {context - prompt_tokens} fit after this prompt")


def validate_draft_len(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_DRAFT_LEN:
        raise InvalidParameterError("k", k, f"must be an integer in [0, {MAX_DRAFT_LEN}]")
    return k


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
