"""Which form a batched verify forward takes: padded or packed (``adaptive_spec.batching.slots``).

Shared by the engine and the simulator's batching replica, so that the replica prices the forward
the engine runs. Torch-free.

- padded: ``rows x width`` tokens, ``width`` the widest row's, so one row's draft widens every row;
- packed: each row's own tokens only, one sequence, a mask keeping rows apart. Its attention spans
  every row's cache through a dense mask, which costs more than padding once most rows are as wide
  as the widest (benchmarks/packed_forward.py measures both).
"""

from __future__ import annotations

from collections.abc import Sequence

LAYOUTS = ("auto", "padded", "packed")
# "auto" packs a forward whose rows' tokens fill at most this share of the padded forward's: measured
# on CPU, one of two or four rows verifying 8 drafts packs cheaper by a wide margin, and every row
# as wide pads cheaper
PACKED_SHARE = 0.75


def packs(widths: Sequence[int], layout: str = "auto") -> bool:
    """Whether a forward over rows ``widths`` tokens wide is packed under ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got layout={layout!r}")
    if layout != "auto":
        return layout == "packed"
    width = max(widths)
    return len(widths) > 1 and width > 1 and sum(widths) <= PACKED_SHARE * len(widths) * width


def scored_tokens(widths: Sequence[int], layout: str = "auto") -> int:
    """Tokens the forward scores: each row's own when packed, the widest row's for every row when padded."""
    return sum(widths) if packs(widths, layout) else len(widths) * max(widths)
