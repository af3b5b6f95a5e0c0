"""Which form a batched verify forward takes: padded or packed (``adaptive_spec.batching.slots``).

Shared by the engine and the simulator's batching replica, so that the replica prices the forward
the engine runs, over the slot axis the engine keeps (``SlotAxis``). Torch-free.

- padded: ``rows x width`` tokens through the model, ``width`` the widest row's, so one row's draft
  widens every row;
- packed: each row's own tokens only through the model; in attention they are spread back into
  the ``rows x width`` grid, so both forms compute the same attention over the same slots.

Packing then saves the tokens a padded forward adds and costs nothing the padded one does not, so
``layout="auto"`` packs exactly when the rows' widths differ (``benchmarks/packed_forward.py``
measures both).
"""

from __future__ import annotations

from collections.abc import Sequence

LAYOUTS = ("auto", "padded", "packed")


def scored(widths: Sequence[int], packed: bool) -> int:
    """Tokens the forward scores: each row's own when packed, the widest row's for every row when padded."""
    return sum(widths) if packed else len(widths) * max(widths)


def attention_pairs(widths: Sequence[int], slots: int) -> int:
    """Query-key pairs the forward's attention computes over rows holding ``slots`` slots each: every
    row's ``width`` queries (the widest row's, in either form) over its slots and the new ones."""
    width = max(widths)
    return len(widths) * width * (slots + width)


def packs(widths: Sequence[int], layout: str = "auto") -> bool:
    """Whether a forward over rows ``widths`` tokens wide is packed under ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got layout={layout!r}")
    if layout != "auto":
        return layout == "packed"
    return len(widths) > 1 and min(widths) < max(widths)  # unequal rows: the padded form adds tokens


def scored_tokens(widths: Sequence[int], layout: str = "auto") -> int:
    """Tokens the forward scores in the form ``layout`` gives it."""
    return scored(widths, packs(widths, layout))


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
