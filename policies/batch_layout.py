"""Which form a batched verify forward takes: padded or packed (``adaptive_spec.batching.slots``).

Shared by the engine and the simulator's batching replica, so that the replica prices the forward
the engine runs, over the slot axis the engine keeps (``SlotAxis``). Torch-free.

- padded: ``rows x width`` tokens, ``width`` the widest row's, so one row's draft widens every row;
  each query attends its own row's ``slots``;
- packed: each row's own tokens only, one sequence, a mask keeping rows apart. Its attention is
  dense: every query meets every row's slots, and laying the rows' caches side by side moves each
  of them. Cheap beside short caches, dearer than padding beside long ones
  (``benchmarks/packed_forward.py`` measures both).

``layout="auto"`` takes the form with less work, counted in scored tokens, query-key pairs and
cache entries moved, each weighted by what it cost on this project's CPU (``WEIGHTS``).
"""

from __future__ import annotations

from collections.abc import Sequence

LAYOUTS = ("auto", "padded", "packed")
# seconds of one query-key pair and of one cache entry laid side by side (packed only), each over
# one more scored token's: the weights simulator.cost_model fits on calibrate's padded and packed
# samples of the embedded model on CPU (attention_pairs, moved_entries over excess_tokens)
PAIR_WEIGHT = 6.3e-4
MOVED_WEIGHT = 8.7e-3


def scored(widths: Sequence[int], packed: bool) -> int:
    """Tokens the forward scores: each row's own when packed, the widest row's for every row when padded."""
    return sum(widths) if packed else len(widths) * max(widths)


def attention_pairs(widths: Sequence[int], slots: int, packed: bool) -> int:
    """Query-key pairs the forward's attention computes over rows holding ``slots`` slots each."""
    tokens = scored(widths, packed)
    keys = len(widths) * slots + tokens if packed else slots + max(widths)
    return tokens * keys


def moved_entries(widths: Sequence[int], slots: int, packed: bool) -> int:
    """Cache entries a packed forward lays side by side (none when padded)."""
    return len(widths) * slots if packed else 0


def work(widths: Sequence[int], slots: int, packed: bool) -> float:
    """The forward's work in scored tokens' worth (the weights above)."""
    return (scored(widths, packed) + PAIR_WEIGHT * attention_pairs(widths, slots, packed)
            + MOVED_WEIGHT * moved_entries(widths, slots, packed))


def packs(widths: Sequence[int], layout: str = "auto", slots: int = 0) -> bool:
    """Whether a forward over rows ``widths`` tokens wide, each row holding ``slots`` slots, is packed
    under ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got layout={layout!r}")
    if layout != "auto":
        return layout == "packed"
    if len(widths) < 2 or max(widths) == 1 or min(widths) == max(widths):
        return False  # nothing to leave out
    return work(widths, slots, True) < work(widths, slots, False)


def scored_tokens(widths: Sequence[int], layout: str = "auto", slots: int = 0) -> int:
    """Tokens the forward scores in the form ``layout`` gives it."""
    return scored(widths, packs(widths, layout, slots))


class SlotAxis:
    """The length of the engine's slot axis (``SlotCache.slots``), followed without a cache: a
    newcomer longer than the axis pads every row on the left; a forward appends its widest row's
    width; once the slots outnumber twice the longest row's tokens, compaction leaves the longest
    row's count."""

    def __init__(self) -> None:
        self.slots = 0

    def join(self, length: int) -> None:
        self.slots = max(self.slots, length)

    def forward(self, widths: Sequence[int]) -> None:
        self.slots += max(widths)

    def settle(self, lengths: Sequence[int]) -> None:
        """After a step's rollbacks or a row's leaving: the rows' token counts now."""
        if not lengths:
            self.slots = 0
        elif self.slots > 2 * max(lengths):
            self.slots = max(lengths)
