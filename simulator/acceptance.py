"""How many draft tokens the target keeps: acceptance profiles.

In speculative decoding (Leviathan et al. 2023) the drafter proposes ``k`` tokens and the target
accepts a *prefix* of them; every step then emits ``accepted + 1`` tokens (the +1 is the
*recovered* token at the first rejection, or the *bonus* token when all ``k`` were accepted).

The simulator does not run models, so it needs the law of the accepted prefix length. An
*acceptance profile* gives it position by position:

    per_position[i] = P(position i accepted | positions 0..i-1 accepted)

Positions past the end of the list reuse the last value. A single rate ``a`` is the common
i.i.d. model of the paper: ``per_position = [a]``, so ``P(accepted >= j) = a**j`` (a geometric
profile). Measured profiles usually decay with position, which this form captures.

``hit_rate`` is the chance the drafter proposes anything at all: prompt-lookup (n-gram) drafting
finds no match on some steps and proposes nothing; the step then is a plain forward.

``matches`` (optional, n-gram drafters) splits the hits by the kind of match the lookup found, as
the engine's match gate sees them (``policies/match_gate.py``): each ``MatchKind`` has a match
order, whether it is ambiguous, its share of all lookups, and its own per-position profile. With
them a simulated replica draws the kind of each lookup and lets the policy's gate choose the
draft length, as the engine does; without them the aggregate profile is used.

Worked example, ``per_position=[0.8, 0.5]`` and ``k=3``: P(accepted=0) = 0.2,
P(1) = 0.8*0.5 = 0.4, P(2) = 0.8*0.5*0.5 = 0.2, P(3) = 0.8*0.5*0.5 = 0.2; expected accepted
= 0.4 + 0.4 + 0.6 = 1.4, so a step yields 2.4 tokens on average.

>>> expected_accepted((0.8, 0.5), 3)
1.4
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class MatchKind:
    """One kind of n-gram match: how often lookups find it and how its drafts are accepted."""

    order: int  # context tokens the match spans
    ambiguous: bool  # earlier occurrences of the n-gram continued differently
    share: float  # fraction of all lookups that find this kind of match
    per_position: tuple[float, ...]  # as AcceptanceProfile.per_position, for drafts of this kind

    def __post_init__(self) -> None:
        if self.order < 1:
            raise ValueError(f"order must be >= 1, got order={self.order}")
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"share must be in [0, 1], got share={self.share}")
        if not self.per_position or any(not 0.0 <= p <= 1.0 for p in self.per_position):
            raise ValueError(f"per_position must be a non-empty list of probabilities, got {list(self.per_position)}")


@dataclass(frozen=True)
class AcceptanceProfile:
    """Per-position conditional acceptance probabilities of one drafter on one request class."""

    per_position: tuple[float, ...]  # P(accept i | accepted 0..i-1); the last value repeats
    hit_rate: float = 1.0  # P(the drafter proposes at all); < 1 for n-gram lookup without a match
    matches: tuple[MatchKind, ...] = ()  # optional split of the hits by kind of n-gram match

    def __post_init__(self) -> None:
        if not self.per_position:
            raise ValueError("per_position must hold at least one probability, got []")
        for i, p in enumerate(self.per_position):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"per_position[{i}] must be in [0, 1], got {p}")
        if not 0.0 <= self.hit_rate <= 1.0:
            raise ValueError(f"hit_rate must be in [0, 1], got hit_rate={self.hit_rate}")
        if sum(m.share for m in self.matches) > 1.0 + 1e-6:
            raise ValueError(f"matches' shares must add up to at most 1, got {sum(m.share for m in self.matches):.4f}")

    @classmethod
    def geometric(cls, rate: float, hit_rate: float = 1.0) -> AcceptanceProfile:
        """The i.i.d. model: every position accepted with probability ``rate``."""
        return cls((float(rate),), hit_rate)

    def padded(self, k: int) -> tuple[float, ...]:
        """The first ``k`` conditional probabilities, the last value repeated as needed."""
        p = self.per_position
        return p[:k] if len(p) >= k else p + (p[-1],) * (k - len(p))

    def expected_tokens_per_step(self, k: int) -> float:
        """Mean tokens a step emits with draft length ``k`` (accepted + 1, misses included)."""
        return 1.0 + self.hit_rate * expected_accepted(self.per_position, k)


def expected_accepted(per_position: tuple[float, ...], k: int) -> float:
    """E[accepted prefix length] for draft length ``k``: sum over j of P(accepted >= j)."""
    total, survive = 0.0, 1.0
    for i in range(k):
        survive *= per_position[min(i, len(per_position) - 1)]
        total += survive
    return round(total, 12)


def sample_num_accepted(per_position: tuple[float, ...], proposed: int, rand: Callable[[], float]) -> int:
    """Draw the accepted prefix length of ``proposed`` draft tokens.

    ``per_position`` must already hold at least ``proposed`` values (see ``padded``); ``rand`` is a
    uniform [0, 1) source such as ``random.Random(seed).random`` (cheaper than numpy per call,
    which matters because this runs once per simulated decode step).
    """
    n = 0
    while n < proposed and rand() < per_position[n]:
        n += 1
    return n


def acceptance_from_dict(raw: object, path: str) -> AcceptanceProfile:
    """Read ``{"rate": a}`` or ``{"per_position": [...]}`` (+ optional ``hit_rate``, ``matches``)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must be a mapping with 'rate' or 'per_position', got {raw!r}")
    for key in raw:
        if key not in ("rate", "per_position", "hit_rate", "matches"):
            raise ValueError(f"{path}.{key} is not a known field (known: hit_rate, matches, per_position, rate)")
    matches = _matches_from_list(raw.get("matches", []), f"{path}.matches")
    if ("rate" in raw) == ("per_position" in raw):
        raise ValueError(f"{path} needs exactly one of 'rate' or 'per_position', got {sorted(raw)}")
    hit_rate = raw.get("hit_rate", 1.0)
    if not isinstance(hit_rate, (int, float)) or not 0.0 <= hit_rate <= 1.0:
        raise ValueError(f"{path}.hit_rate must be a number in [0, 1], got {hit_rate!r}")
    if "rate" in raw:
        rate = raw["rate"]
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise ValueError(f"{path}.rate must be a number in [0, 1], got {rate!r}")
        return AcceptanceProfile((float(rate),), float(hit_rate), matches)
    return AcceptanceProfile(_probabilities(raw["per_position"], f"{path}.per_position"), float(hit_rate), matches)


def _probabilities(probs: object, path: str) -> tuple[float, ...]:
    if not isinstance(probs, list) or not probs:
        raise ValueError(f"{path} must be a non-empty list of probabilities, got {probs!r}")
    for i, p in enumerate(probs):
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"{path}[{i}] must be a number in [0, 1], got {p!r}")
    return tuple(float(p) for p in probs)


def _matches_from_list(raw: object, path: str) -> tuple[MatchKind, ...]:
    if not isinstance(raw, list):
        raise ValueError(f"{path} must be a list of match kinds, got {raw!r}")
    kinds = []
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object, got {entry!r}")
        for key in ("order", "share", "per_position"):
            if key not in entry:
                raise ValueError(f"{where}.{key} is required")
        for key in entry:
            if key not in ("order", "ambiguous", "share", "per_position"):
                raise ValueError(f"{where}.{key} is not a known field (known: ambiguous, order, per_position, share)")
        order, share = entry["order"], entry["share"]
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            raise ValueError(f"{where}.order must be an integer >= 1, got {order!r}")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
            raise ValueError(f"{where}.share must be a number in [0, 1], got {share!r}")
        probs = _probabilities(entry["per_position"], f"{where}.per_position")
        ambiguous = entry.get("ambiguous", False)
        if not isinstance(ambiguous, bool):
            raise ValueError(f"{where}.ambiguous must be true or false, got {ambiguous!r}")
        kinds.append(MatchKind(order, ambiguous, float(share), probs))
    if sum(k.share for k in kinds) > 1.0 + 1e-6:
        raise ValueError(f"{path}: shares must add up to at most 1, got {sum(k.share for k in kinds):.4f}")
    return tuple(kinds)
