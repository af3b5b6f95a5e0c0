"""Rows whose drafts do not depend on the machine, for the batched engine's tests: a drafter that
always drafts, a learning controller that always wants its whole draft, and a batch cap that
prices any multi-token row at several plain steps (so its bound cuts such drafts beside others)."""

from __future__ import annotations

from adaptive_spec.drafters.base import Drafter, Proposal
from policies.batch_cap import BatchDraftCap
from policies.heuristic import HeuristicPolicy


class EchoDrafter(Drafter):
    """Always drafts: the context's last ``k`` tokens again (never a lookup miss)."""

    name = "echo"

    def propose(self, context, k, config, generator, early_stop=None):
        return Proposal(tokens=list(context[-k:]))


class Confident(HeuristicPolicy):
    """A learning controller whose choices do not depend on timings."""

    def expected_tokens(self, drafter, k):
        return [1.0 + i for i in range(k + 1)]  # every draft token accepted, it says


def dear_drafts_cap(slowdown: float | None = 0.05) -> BatchDraftCap:
    """A cap that knows, from the first step, that a step with any multi-token row costs ~4x a plain one."""
    cap = BatchDraftCap(plain_slowdown=slowdown)
    cap.warm([(r, w, 0.01 + 0.01 * r + 0.001 * r * w + 0.05 * r * (w > 1), context)
              for r in (1, 2, 4) for w in (1, 2, 5, 9) for context in (8, 32, 128)])
    return cap
