"""Per-match draft length for prompt lookup: how much of an n-gram draft is worth verifying.

An n-gram drafter proposes the tokens that followed an earlier occurrence of the context's last
``n`` tokens, and *which* ``n`` matched says most of what there is to know about the draft.
On copy-heavy prompts the first drafted token is accepted most of the time after a 2- or 3-token
match and far less often after a 1-token match; after an *ambiguous* match (earlier occurrences of
the n-gram continued differently) it is rarely accepted, and on open-ended prompts every kind of
match is weak. One acceptance profile per drafter mixes them, so one ``k`` is too long for the weak
matches and too short for the strong ones (a copy run continues for dozens of tokens).

``MatchGate`` keeps an ``AcceptanceProfile`` per kind of match (order, ambiguous) and, after each lookup, keeps the
prefix length ``k in 0..available`` that maximises expected tokens per second under the policy's
measured verify costs (``policies.goodput``): a long draft for a strong match, a short one or none
for a weak match. Looking the continuation up costs the same for any length, so the engine asks
the drafter for up to ``max_k`` tokens and lets the gate cut.

A draft cut to nothing still teaches: the engine reports whether its first token equals the token
decoding produced (``learn_skipped``). Under greedy decoding that is exactly whether it would have
been accepted; under sampling, the chance of equality is the target's probability of that token,
which is the acceptance probability of a deterministic draft. So a weak bucket whose acceptance
recovers is noticed without paying for verification.

Requests differ within a kind of match: a prompt copied verbatim continues a 3-token match for
dozens of tokens, a paraphrased one for two or three. Each kind learns per request only as fast as
that kind recurs, so the gate also keeps one request-level *lift*: the acceptances this request's
drafts have had at every position they reached, over what the per-kind estimates expected there,
shrunk toward 1 by ``lift_weight`` pseudo-trials. ``keep`` scales the kind's rates by it: the lift
shortens the long drafts of a paraphrasing request after a few misses, and lengthens them early in
a verbatim one.
"""

from __future__ import annotations

from collections.abc import Callable

from policies.acceptance import AcceptanceProfile, expected_tokens_by_k
from policies.decayed import decay_for_half_life
from policies.goodput import best_draft_len

_MISS = (0, False)  # a lookup that found no match: the step is a plain one
MAX_RATE = 0.999  # a lifted rate stays a probability below 1
# at a request start the mix of lookup results (which kinds of match, how many misses) is scaled
# down to this many lookups: a copy request finds long matches at most steps and the open-ended
# request after it few, so the previous request's mix may only break ties until this one's own
# lookups (one per step) speak
REQUEST_PRIOR_LOOKUPS = 2.0
# pricing the drafter re-optimises every kind's length once per this many pricings (about one per
# step); in between only the kinds that learned are: costs drift over ~100 steps, and goodput is
# flat near its optimum
REPRICE_EVERY = 16


class MatchGate:
    """Draft length per n-gram match order; see the module docstring.

    ``verify_s_by_k(max_k)`` gives the predicted verify seconds for ``k = 0..max_k`` drafts (the
    adaptive policy's cost model); NaN entries (plain speed not yet measured) keep the whole draft.
    """

    def __init__(self, max_k: int, verify_s_by_k: Callable[[int], list[float]], half_life_steps: float,
                 prior_rate: float, prior_weight: float, shrink_weight: float, lift_weight: float = 2.0,
                 min_keep: Callable[[], int] | None = None) -> None:
        if not lift_weight > 0:
            raise ValueError(f"lift_weight must be > 0, got lift_weight={lift_weight!r}")
        self.max_k = max_k
        self.lift_weight = lift_weight
        # the fewest tokens to keep of a match right now (the policy's probes: a probe is a
        # measurement, and a gate that cut it would price drafts on costs it never re-measures)
        self._min_keep = min_keep
        # this request's accepted draft positions, and what the per-kind rates expected of them
        self._request_accepted = self._request_expected = 0.0
        self._verify_s_by_k = verify_s_by_k
        self._profile_args = (max_k, half_life_steps, prior_rate, prior_weight, shrink_weight)
        self.profiles: dict[tuple[int, bool], AcceptanceProfile] = {}  # by (order, ambiguous)
        # decayed counts of what lookups found (matches by kind, and misses): the mix that turns
        # per-match speeds into the speed of choosing this drafter at all
        self._decay = decay_for_half_life(half_life_steps)
        self.seen: dict[tuple[int, bool], float] = {}
        # conditional rates and expected tokens by k per kind, until that kind learns (this runs
        # at every step)
        self._rates: dict[tuple[int, bool], list[float]] = {}
        self._expected: dict[tuple[int, bool], list[float]] = {}
        # each kind's goodput-optimal length for pricing the drafter (tokens_per_s): recomputed when
        # the kind learns, and for every kind each REPRICE_EVERY pricings as the costs drift
        self._best_k: dict[tuple[int, bool], int] = {}
        self._pricings = 0

    def _kind_rates(self, kind: tuple[int, bool]) -> list[float]:
        rates = self._rates.get(kind)
        if rates is None:
            rates = self._rates[kind] = self._profile(*kind).conditional_rates()
        return rates

    def _expected_tokens(self, kind: tuple[int, bool]) -> list[float]:
        expected = self._expected.get(kind)
        if expected is None:
            expected = self._expected[kind] = expected_tokens_by_k(self._kind_rates(kind))
        return expected

    def _forget(self, kind: tuple[int, bool]) -> None:
        self._rates.pop(kind, None)
        self._expected.pop(kind, None)
        self._best_k.pop(kind, None)

    def _profile(self, order: int, ambiguous: bool) -> AcceptanceProfile:
        profile = self.profiles.get((order, ambiguous))
        if profile is None:
            profile = self.profiles[(order, ambiguous)] = AcceptanceProfile(*self._profile_args)
        return profile

    def keep(self, order: int | None, available: int, ambiguous: bool = False) -> int:
        """How many of ``available`` drafted tokens to verify after a match of ``order`` tokens
        (``ambiguous``: earlier occurrences of the matched n-gram continued differently)."""
        if available <= 0:
            return 0
        if order is None:
            return available
        self._count((order, ambiguous))
        available = min(available, self.max_k)
        seconds = self._verify_s_by_k(available)
        if seconds[0] != seconds[0]:  # NaN: nothing measured yet, nothing to trade off
            return available
        lift = self.request_lift()
        if lift == 1.0:
            tokens = self._expected_tokens((order, ambiguous))[: available + 1]
            best = best_draft_len(tokens, seconds, min_k=0)[0]
        else:
            best = _best_lifted_len(self._kind_rates((order, ambiguous)), lift, seconds, available)
        if self._min_keep is not None:
            floor = self._min_keep()
            if best < floor:
                return min(floor, available)
        return best

    def expected(self, order: int, available: int, ambiguous: bool = False) -> list[float]:
        """Expected tokens of a step verifying the first ``k = 0..available`` tokens of a draft after
        a match of ``order`` tokens (this request's lift included), as ``keep`` weighs them: what a
        batch that must cut the draft further (``policies.batch_cap``) weighs it by."""
        lift = self.request_lift()
        out, reach = [1.0], 1.0
        for rate in self._kind_rates((order, ambiguous))[: min(available, self.max_k)]:
            reach *= min(rate * lift, MAX_RATE)
            out.append(out[-1] + reach)
        return out

    def request_lift(self) -> float:
        """This request's acceptance relative to the per-kind estimates (1.0: as expected)."""
        weight = self.lift_weight
        return (self._request_accepted + weight) / (self._request_expected + weight)

    def note_miss(self) -> None:
        """The drafter was asked and found no match (the step decoded one token, plainly)."""
        self._count(_MISS)

    def _count(self, kind: tuple[int, bool]) -> None:
        decay = self._decay
        for key in self.seen:
            self.seen[key] *= decay
        self.seen[kind] = self.seen.get(kind, 0.0) + 1.0

    def tokens_per_s(self) -> float:
        """Predicted tokens/s of drafting with this gate: per kind of lookup result, the gate's
        best length under this request's lift (as ``keep`` cuts) and its expected tokens and verify
        seconds, mixed by how often each occurs
        (a ratio of expected sums, as time is). NaN before any lookup or any measured cost.

        A length of 0 is always allowed, so this is at least plain speed (less the lookup's own
        cost, which the engine measures and the guard sees) whenever each kind's length is
        optimal for the current costs; between repricings (``REPRICE_EVERY``) a kind's length
        was optimal for the costs of up to 16 pricings ago. NaN too while every length it would use
        is priced at 0 s (steps timed at 0 s): no speed to compare."""
        if not self.seen:
            return float("nan")
        seconds = self._verify_s_by_k(self.max_k)
        if seconds[0] != seconds[0]:
            return float("nan")
        self._pricings += 1
        if self._pricings >= REPRICE_EVERY:
            self._pricings = 0
            self._best_k.clear()
        best_k = self._best_k
        # priced as keep() cuts: a price without the lift kept asking for probe bursts on requests
        # whose drafts the lift cuts
        lift = self.request_lift()
        tokens_sum = seconds_sum = 0.0
        for kind, weight in self.seen.items():
            if kind == _MISS:
                tokens, spent = 1.0, seconds[0]
            elif lift != 1.0:
                k, tokens = _best_lifted(self._kind_rates(kind), lift, seconds, self.max_k)
                spent = seconds[k]
            else:
                expected = self._expected_tokens(kind)
                k = best_k.get(kind)
                if k is None:
                    k = best_k[kind] = best_draft_len(expected, seconds, min_k=0)[0]
                tokens, spent = expected[k], seconds[k]
            tokens_sum += weight * tokens
            seconds_sum += weight * spent
        return tokens_sum / seconds_sum if seconds_sum > 0 else float("nan")

    def learn(self, order: int | None, k: int, num_accepted: int, ambiguous: bool = False) -> None:
        """A verified draft of ``k`` tokens from a match of ``order`` had ``num_accepted`` accepted."""
        if order is not None and k > 0:
            kind = (order, ambiguous)
            rates = self._kind_rates(kind)
            reached = min(k, num_accepted + 1)  # positions 0..num_accepted were tried (not past k)
            self._request_expected += sum(rates[:reached])
            self._request_accepted += min(num_accepted, reached)
            self._profile(order, ambiguous).update(k, num_accepted)
            self._forget(kind)

    def learn_shadow(self, order: int, k: int, num_accepted: int, ambiguous: bool = False) -> None:
        """A shadow draft (proposed while decoding plainly, never verified) after a match of
        ``order``: ``num_accepted`` of its ``k`` tokens were what decoding produced. It counts in
        the mix of lookups as a verified one does, so that while speculation is off the gate's
        picture of this request (which kinds of match it finds, how they fare) stays current."""
        self._count((order, ambiguous))
        self.learn(order, k, num_accepted, ambiguous)

    def learn_skipped(self, order: int | None, first_matched: bool, ambiguous: bool = False) -> None:
        """A draft cut to nothing: did its first token equal the token decoding produced?"""
        if order is not None:
            kind = (order, ambiguous)
            self._request_expected += self._kind_rates(kind)[0]
            self._request_accepted += int(first_matched)
            self._profile(order, ambiguous).update(1, int(first_matched))
            self._forget(kind)

    def start_request(self, max_trials: float) -> None:
        """A new request: each kind's evidence is scaled down to a prior of ``max_trials`` trials,
        the mix of lookup results to ``REQUEST_PRIOR_LOOKUPS`` lookups, and the lift starts at 1."""
        for profile in self.profiles.values():
            profile.soften(max_trials)
        total = sum(self.seen.values())
        if total > REQUEST_PRIOR_LOOKUPS:
            factor = REQUEST_PRIOR_LOOKUPS / total
            self.seen = {kind: weight * factor for kind, weight in self.seen.items()}
        self._rates.clear()
        self._expected.clear()
        self._best_k.clear()
        self._request_accepted = self._request_expected = 0.0

    def state(self) -> dict[str, float]:
        """First-position acceptance per match (``"2"``: order 2; ``"1?"``: order 1, ambiguous)."""
        return {f"{order}{'?' if ambiguous else ''}": p.conditional_rates()[0]
                for (order, ambiguous), p in sorted(self.profiles.items())}


def _best_lifted_len(rates: list[float], lift: float, seconds: list[float], available: int) -> int:
    """``best_draft_len(expected_tokens_by_k(rates scaled by lift, capped), seconds)[0]`` for
    ``k <= available``, in one pass (this runs at every lookup)."""
    return _best_lifted(rates, lift, seconds, available)[0]


def _best_lifted(rates: list[float], lift: float, seconds: list[float], available: int) -> tuple[int, float]:
    """The best length as ``_best_lifted_len`` and the expected tokens of a step at it."""
    best_k, best, best_tokens = 0, (1.0 / seconds[0] if seconds[0] > 0 else 0.0), 1.0
    reach = total = 1.0
    for k, rate, spent in zip(range(1, available + 1), rates, seconds[1:]):
        rate *= lift
        reach *= rate if rate < MAX_RATE else MAX_RATE
        total += reach
        value = total / spent if spent > 0 else 0.0
        if value > best:  # ties go to the shorter draft, as in best_draft_len
            best_k, best, best_tokens = k, value, total
    return best_k, best_tokens
