"""A synthetic engine: turns an ``Action`` into a ``StepOutcome`` from a known truth.

Tests and the simulator need to drive policies without models. ``SyntheticEnv`` draws each step
from a true acceptance profile and a cost model shaped like the measurements on a 2-core CPU:

- a plain step costs ``plain_s`` (35 ms: SmolLM2-135M, one token);
- verifying ``n >= 1`` draft tokens costs ``plain_s * (verify_intercept + verify_slope * n)``
  (1.8x at 1 draft token, 2.55x at 15: the measured 1.8-2.5x for forwards of 2-16 tokens);
- drafting costs ``draft_s_fixed + draft_s_per_token * n`` for ``n`` drafted tokens;
- every cost is multiplied by a noise factor ``max(0.5, 1 + noise * N(0, 1))``.

Acceptance follows the prefix rule: position ``i`` is accepted with probability ``acceptance[i]``
(one number: the same at every position) given every earlier one was. A drafter may propose fewer
than ``k`` tokens (``proposal_rate`` < 1: an n-gram miss) and may report confidences: each
proposed token gets ``q ~ Beta(a * 4, (1 - a) * 4)`` and is accepted with probability ``q`` (so the
mean acceptance is still ``a``, and ``q`` is informative, like a calibrated draft model).

Change the truth mid-run with ``set_acceptance`` / ``set_costs``: that is how tests shift traffic.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass

from policies.outcome import PLAIN, Action, StepOutcome


@dataclass(frozen=True)
class SyntheticDrafter:
    name: str
    acceptance: float | tuple[float, ...]  # conditional acceptance per position (or one for all)
    draft_s_fixed: float = 0.0  # seconds per step regardless of length (a lookup, a launch)
    draft_s_per_token: float = 0.0  # seconds per drafted token (a draft model's forward)
    proposal_rate: float = 1.0  # chance that each next token can be proposed at all
    confidences: bool = False  # report draft_confidences (a drafter with probabilities)

    def acceptance_at(self, position: int) -> float:
        if isinstance(self.acceptance, (int, float)):
            return float(self.acceptance)
        return self.acceptance[min(position, len(self.acceptance) - 1)]


@dataclass(frozen=True)
class SyntheticCosts:
    plain_s: float = 0.035  # one-token target forward, SmolLM2-135M on 2 CPU cores
    verify_intercept: float = 1.8  # verify of n drafts in plain steps: intercept + slope * n
    verify_slope: float = 0.05
    noise: float = 0.05  # relative standard deviation of every measured time


class SyntheticEnv:
    """A seeded stand-in for the engine: ``step(action) -> StepOutcome``."""

    def __init__(self, drafters: Sequence[SyntheticDrafter], costs: SyntheticCosts | None = None,
                 seed: int = 0, key: str = "") -> None:
        self.drafters = {d.name: d for d in drafters}
        self.costs = costs or SyntheticCosts()
        self.rng = random.Random(seed)
        self.key = key
        self.clock = 0.0  # synthetic seconds elapsed
        self.context_len = 0

    def set_acceptance(self, name: str, acceptance: float | tuple[float, ...]) -> None:
        self.drafters[name] = dataclasses.replace(self.drafters[name], acceptance=acceptance)

    def set_costs(self, **changes: float) -> None:
        self.costs = dataclasses.replace(self.costs, **changes)

    def _noisy(self, seconds: float) -> float:
        return seconds * max(0.5, 1.0 + self.costs.noise * self.rng.gauss(0.0, 1.0))

    def step(self, action: Action) -> StepOutcome:
        costs, rng = self.costs, self.rng
        if action.is_plain:
            drafter_name, k, proposed, accepted, draft_s, confidences = PLAIN, 0, 0, 0, 0.0, None
        else:
            drafter = self.drafters.get(action.drafter)
            if drafter is None:
                raise ValueError(f"action.drafter must be one of {sorted(self.drafters)}, got {action.drafter!r}")
            drafter_name, k = drafter.name, action.k
            proposed = 0
            while proposed < k and rng.random() < drafter.proposal_rate:
                proposed += 1
            accepted, rejected = 0, False
            scores = []
            for position in range(proposed):
                a = drafter.acceptance_at(position)
                q = rng.betavariate(max(a * 4.0, 1e-3), max((1.0 - a) * 4.0, 1e-3)) if drafter.confidences else a
                scores.append(q)
                if not rejected and rng.random() < q:
                    accepted += 1
                else:
                    rejected = True
            confidences = tuple(scores) if drafter.confidences and proposed else None
            draft_s = self._noisy(drafter.draft_s_fixed + drafter.draft_s_per_token * proposed) if k else 0.0
        verify_units = 1.0 if proposed == 0 else costs.verify_intercept + costs.verify_slope * proposed
        verify_s = self._noisy(costs.plain_s * verify_units)
        self.clock += draft_s + verify_s
        outcome = StepOutcome(drafter_name, k, proposed, accepted, accepted + 1, draft_s, verify_s,
                              context_len=self.context_len, draft_confidences=confidences, key=self.key,
                              timestamp=self.clock)
        self.context_len += accepted + 1
        return outcome


def run_policy(policy, env: SyntheticEnv, steps: int) -> list[StepOutcome]:
    """Drive ``policy`` for ``steps`` steps, the way the engine does; returns the outcomes."""
    outcomes = []
    for _ in range(steps):
        outcome = env.step(policy.decide())
        policy.observe(outcome)
        outcomes.append(outcome)
    return outcomes


def tokens_per_second(outcomes: Sequence[StepOutcome]) -> float:
    """Goodput of a run: emitted tokens over the seconds the steps took."""
    seconds = sum(o.step_s for o in outcomes)
    return sum(o.emitted for o in outcomes) / seconds if seconds > 0 else 0.0
