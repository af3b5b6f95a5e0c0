"""What a decode forward of the batched engine did, as its observers hear it (``on_batch_step``).

Per request, the observers hear every step (``StepOutcome``, ``on_step``); what no request sees is
the batch around it: how many rows shared the forward, how many of them verified a draft, what the
batch cap (``policies.batch_cap``) made of their drafts and how many newcomers' prompt tokens rode
along. Those are what an operator needs to see the speculation share fall as the batch fills (and
come back as it empties) on live traffic. Torch-free, like ``policies.outcome``: telemetry and the
dashboard's layers import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# the batch cap's call on a step (``cap_call``)
CAP_CALLS = (
    "none",       # not priced: a lone row, no bound row drafting, or no cost known yet
    "kept",       # priced, and every bound row kept its whole draft
    "shortened",  # some of the bound rows' drafts cut shorter (row by row, or to a common length)
    "plain",      # every bound row's draft cut to nothing: they decode plainly this step
)


@dataclass(frozen=True)
class BatchStep:
    """One decode forward: ``rows`` requests decoding in it, ``drafting`` of them verifying a draft;
    ``cap`` the batch cap's call (``CAP_CALLS``) and ``cut_tokens`` the draft tokens it cut;
    ``prompt_tokens`` newcomers' prompt tokens that rode in the forward; ``seconds`` the step's
    drafting, forward and verification."""

    rows: int
    drafting: int
    cap: str
    cut_tokens: int
    prompt_tokens: int
    seconds: float


def cap_call(cap: int | Sequence[int] | None, lengths: Sequence[int], bound: Sequence[bool]) -> tuple[str, int]:
    """The batch cap's call on a step whose rows had drafts ``lengths`` before it cut those of the
    ``bound`` rows to ``cap``: one common length, or each row's own (None: it did not price the
    step), and the draft tokens it cut. "plain" where no bound row kept a draft token.

    >>> cap_call(None, [3, 0], [True, True]), cap_call(4, [3, 0], [True, True])
    (('none', 0), ('kept', 0))
    >>> cap_call(2, [5, 3, 8], [True, True, False]), cap_call(0, [5, 3, 8], [True, True, False])
    (('shortened', 4), ('plain', 8))
    >>> cap_call([5, 0, 8], [5, 3, 8], [True, True, False]), cap_call([0, 0, 8], [5, 3, 8], [True, True, False])
    (('shortened', 3), ('plain', 8))
    """
    if cap is None:
        return "none", 0
    kept = [min(n, cap) for n in lengths] if isinstance(cap, int) else list(cap)
    cut = sum(max(0, n - k) for n, k, b in zip(lengths, kept, bound) if b)
    if not cut:
        return "kept", 0
    return ("plain" if not any(k for k, b in zip(kept, bound) if b) else "shortened"), cut
