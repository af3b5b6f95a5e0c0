"""Shadow drafts: proposed while decoding plainly, never verified, scored against what followed.

While the controller decodes plainly, drafters that cost nothing to run (no probabilities: n-gram
lookup) still propose. Once the tokens that followed are known, the length of the matching prefix
is exactly how many drafts the verifier would have accepted (greedy), or a draw with the same law
(sampling: a deterministic draft ``x`` is accepted with probability ``p(x)``, the probability that
plain sampling produces ``x``). The policy learns acceptance for free (``Policy.observe_shadow``),
and can turn speculation back on the moment it would pay, instead of probing blindly.

Pure Python: a drafter is anything with a ``name`` and a ``lookup(context, k)`` returning
``(tokens, match_order, ambiguous)``.

>>> class Echo:
...     name = "echo"
...     def lookup(self, context, k):
...         return context[-k:], 1, False
>>> class Log:
...     shadow_k = 2
...     def observe_shadow(self, *args): print("shadow", args)
>>> shadow = ShadowDrafts([Echo()], Log())
>>> shadow.propose([1, 2, 3])       # drafts [2, 3] after position 3
>>> shadow.resolve([1, 2, 3, 2], None)  # one token known, it matched: wait for the next
>>> shadow.resolve([1, 2, 3, 2, 9], None)
shadow ('echo', 2, 1, 1, False)
"""

from __future__ import annotations

from collections.abc import Iterable


class ShadowDrafts:
    """Pending shadow drafts of one request; ``policy.shadow_k`` tokens each (0: none are run)."""

    __slots__ = ("drafters", "policy", "k", "pending")

    def __init__(self, drafters: Iterable, policy) -> None:
        self.policy = policy
        # short drafts resolve within a few plain steps (one token each), so evidence arrives while
        # it still matters; one draft starts at every plain step
        self.k = policy.shadow_k
        self.drafters = list(drafters) if self.k > 0 else []
        # (drafter, start index, tokens, match order, ambiguous)
        self.pending: list[tuple[str, int, list[int], int | None, bool]] = []

    def propose(self, context: list[int]) -> None:
        for drafter in self.drafters:
            tokens, order, ambiguous = drafter.lookup(context, self.k)
            tokens = list(tokens[: self.k])
            if tokens:
                self.pending.append((drafter.name, len(context), tokens, order, ambiguous))
            else:
                self.policy.observe_shadow(drafter.name, self.k, 0)  # no match: a step would have gained nothing

    def resolve(self, context: list[int], verified_drafter: str | None) -> None:
        """Score every pending draft whose fate ``context`` now decides (``verified_drafter``'s
        own are dropped: a real verification just measured that drafter)."""
        if not self.pending:
            return
        still = []
        for pending in self.pending:
            name, start, tokens, order, ambiguous = pending
            if name == verified_drafter:
                continue
            known = context[start : start + len(tokens)]
            matched = 0
            while matched < len(known) and known[matched] == tokens[matched]:
                matched += 1
            if matched < len(known) or len(known) == len(tokens):
                self.policy.observe_shadow(name, len(tokens), matched, order, ambiguous)
            else:
                still.append(pending)
        self.pending = still
