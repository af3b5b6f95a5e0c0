"""The default controller: goodput-optimal drafter and k from measured acceptance and costs.

Each step it answers "which drafter, how many drafts (0: none)?" by putting together:

1. ``AcceptanceProfile`` per drafter - decayed per-position acceptance (``policies.acceptance``).
2. ``CostModel`` - measured plain, verify and draft seconds (``policies.costs``).
3. ``best_draft_len`` - per drafter, the ``k >= 1`` maximising expected tokens per second
   (``policies.goodput``).
4. ``DiscountedUCB`` - the drafter with the highest predicted speed plus an exploration bonus that
   grows while a drafter is not used (``policies.bandit``), so a drafter that recovered gets
   noticed; plain decoding when even that optimistic index is below plain speed.
5. ``SpeculationGuard`` - a measured never-slower switch with plain probes while on and a backoff
   schedule of speculative probe bursts while off (``policies.guard``). Each speculative step is
   judged against plain steps of the last few dozen steps, so that a slow spell of the machine is
   not taken for speculation losing (``_plain_speed_now``).
6. ``PageHinkley`` per drafter - a collapse in acceptance becomes an ``AcceptanceCollapse`` event
   (read them with ``drain_events``) and wipes that drafter's profile so the model re-learns at once
   instead of at the speed of its half-life (``policies.change``).
7. Optionally an early stop per drafter, trained from ``StepOutcome.draft_confidences``
   (``policies.early_stop``); the drafter loop fetches it with ``early_stop(drafter)``.
8. Shadow drafting (``observe_shadow``): while decoding plainly, the engine still runs drafters
   that cost nothing (n-gram lookup) and reports how much of each draft plain decoding went on to
   produce. Acceptance (and the match gate's picture of the request) stays measured while
   speculation is off, and a probe burst starts as soon as a drafter would win (at least
   ``backoff_initial`` plain steps after the last burst), instead of waiting for the backoff.
9. A draft length per n-gram match order (``draft_gate``, ``policies.match_gate``): prompt
   lookup proposes up to ``max_k`` tokens at no extra cost and the gate keeps the goodput-optimal
   prefix for how long the match was (a 1-token match is a weak guess, a 3-token one in a copy run
   a strong one).
10. Costs from the engine (``warm_start``): a controller that has observed nothing starts from
   the engine's recent step costs (plain, verify by length, each drafter's seconds), so a new
   traffic key does not pay to measure what the engine already knows; acceptance is its own.
11. Per-request softening (``start_request``): acceptance depends on the prompt more than on time,
   so at each request start the key's profiles (and the match gates' per-kind rates and mix of
   lookups) are scaled down to a small prior, and the guard's measured speed is reset; the new
   request's own steps decide within a few steps.

``decide`` only reads state (calling it twice returns the same action); all learning happens in
``observe``, which accepts outcomes of actions it did not choose (overrides, other requests of
the same traffic key). The policy has no randomness: ``seed`` only seeds the early stop's SGD.
Not thread-safe: steps of one traffic key must be fed in sequence.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.acceptance import AcceptanceProfile, expected_tokens_by_k
from policies.base import Policy
from policies.bandit import DiscountedUCB
from policies.change import AcceptanceCollapse, DetectorConfig, PageHinkley, step_acceptance
from policies.costs import CostModel, clip_spike as _clip_spike
from policies.decayed import DecayedMean
from policies.guard import GuardConfig, SpeculationGuard
from policies.outcome import PLAIN, Action, StepOutcome
from policies.validation import check_int, check_positive, check_range

EARLY_STOP_MODES = ("learned", "threshold", "off")
MAX_PENDING_EVENTS = 256  # undrained collapse events kept (oldest dropped first)
_PLAIN_ACTION = Action(PLAIN, 0)
# the never-slower guard compares speculative steps with plain steps of about this recent past
# (in steps that verified no draft): short enough to follow a spell, long enough that one noisy
# plain step moves it by ~5% of its noise
RECENT_PLAIN_HALF_LIFE = 8.0
# tokens per shadow draft: short drafts resolve within a few plain steps (one token each), so their
# evidence arrives while it still matters; deeper positions borrow the drafter's pooled rate
SHADOW_K = 4


@dataclass(frozen=True)
class AdaptiveConfig:
    # longest draft considered: verify costs were measured for 2-16 tokens on the target CPUs;
    # beyond that the cost line extrapolates and KV rollback grows
    max_k: int = 16
    # acceptance forgets with a 16-step half-life: ~23 effective steps (+-0.1 on a rate of 0.6 at
    # k = 1, far tighter at k = 8). Acceptance moves with every request (a copy-heavy prompt
    # accepts most drafts, the next open-ended one almost none), so a controller that takes
    # 50+ steps to notice spends a whole request on the wrong k
    acceptance_half_life_steps: float = 16.0
    # at a request start the key's acceptance evidence is scaled down to this many draft-token
    # trials: a prior worth ~2 steps at k = 8, which the request's own steps outweigh quickly
    request_prior_trials: float = 16.0
    # prior acceptance for a drafter never observed: middling, and worth 2 draft tokens of evidence
    prior_acceptance: float = 0.5
    prior_weight: float = 2.0
    # a position needs ~8 trials before its own rate outweighs the drafter's pooled rate
    shrink_weight: float = 8.0
    # costs drift slower than acceptance (machine load, context length): 100-step half-life
    cost_half_life_steps: float = 100.0
    # verify prior, in units of a plain step: 1.5 + 0.05 k, a little cheaper than verifying costs
    # on a small CPU (policies/costs.py), so that speculation gets tried; one measured step replaces it
    verify_prior_intercept: float = 1.5
    verify_prior_slope: float = 0.05
    # how hard the cost-line slopes are pulled to their prior, in (draft tokens)^2 x steps:
    # about 1 step at k = 4 away from the mean
    slope_prior_strength: float = 16.0
    # drafter bandit: discount 0.98 per speculative step = a window of ~50 steps
    bandit_discount: float = 0.98
    # exploration bonus scale in units of plain speed: retries an abandoned drafter that trails
    # by 0.5x plain speed after ~100-150 steps
    bandit_exploration: float = 0.5
    # probes draft at least this many tokens: at k = 1 a step yields at most 2 tokens for ~1.85
    # plain steps, so a probe could never show a recovered drafter winning; k = 4 can show 2.5x
    probe_min_k: int = 4
    # "learned" (SGD logistic regression), "threshold" (transformers' 0.4 rule) or "off"
    # Default "threshold": on the workloads of benchmarks/ it lifted the int8 self-draft a long way
    # towards plain speed, while the learned model did not measurably help over no early stop
    # (benchmarks/RESULTS.md): the learned model is opt-in
    early_stop: str = "threshold"
    # the probability below which drafting stops (q for "threshold", P(accept) for "learned")
    early_stop_threshold: float = 0.4
    # cut n-gram drafts to the goodput-optimal length for their match order (policies.match_gate)
    match_gate: bool = True
    # the gate's request-level lift is shrunk toward 1 by this many pseudo draft positions
    # (chosen with benchmarks/replay.py on the shift stream, where 1, 2 and 4 did alike and all
    # beat no lift)
    match_lift_weight: float = 2.0
    guard: GuardConfig = field(default_factory=GuardConfig)
    detector: DetectorConfig = field(default_factory=DetectorConfig)

    def __post_init__(self) -> None:
        check_int("max_k", self.max_k, 1, 256)
        check_positive("acceptance_half_life_steps", self.acceptance_half_life_steps)
        check_range("prior_acceptance", self.prior_acceptance, 0.0, 1.0, low_open=True, high_open=True)
        check_positive("prior_weight", self.prior_weight)
        check_positive("request_prior_trials", self.request_prior_trials)
        check_positive("shrink_weight", self.shrink_weight)
        check_positive("cost_half_life_steps", self.cost_half_life_steps)
        check_positive("verify_prior_intercept", self.verify_prior_intercept)
        check_range("verify_prior_slope", self.verify_prior_slope, 0.0, 10.0)
        check_positive("slope_prior_strength", self.slope_prior_strength)
        check_range("bandit_discount", self.bandit_discount, 0.0, 1.0, low_open=True)
        check_positive("bandit_exploration", self.bandit_exploration)
        check_int("probe_min_k", self.probe_min_k, 1)
        check_positive("match_lift_weight", self.match_lift_weight)
        if not isinstance(self.match_gate, bool):
            raise ValueError(f"match_gate must be true or false, got match_gate={self.match_gate!r}")
        if self.early_stop not in EARLY_STOP_MODES:
            raise ValueError(f"early_stop must be one of {EARLY_STOP_MODES}, got early_stop={self.early_stop!r}")
        check_range("early_stop_threshold", self.early_stop_threshold, 0.0, 1.0)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> AdaptiveConfig:
        """Build from flat keyword arguments; guard and detector fields may be given flat too.

        >>> AdaptiveConfig.from_kwargs(max_k=8, backoff_max=64).guard.backoff_max
        64
        """
        own = {f.name for f in dataclasses.fields(cls)}
        guard_names = {f.name for f in dataclasses.fields(GuardConfig)}
        detector_names = {f.name for f in dataclasses.fields(DetectorConfig)}
        own_kw, guard_kw, detector_kw = {}, {}, {}
        for name, value in kwargs.items():
            if name in own:
                own_kw[name] = value
            elif name in guard_names:
                guard_kw[name] = value
            elif name in detector_names:
                detector_kw[name] = value
            else:
                known = sorted(own | guard_names | detector_names)
                raise ValueError(f"unknown adaptive policy parameter {name}={value!r}; known: {', '.join(known)}")
        if guard_kw:
            own_kw["guard"] = dataclasses.replace(own_kw.get("guard", GuardConfig()), **guard_kw)
        if detector_kw:
            own_kw["detector"] = dataclasses.replace(own_kw.get("detector", DetectorConfig()), **detector_kw)
        return cls(**own_kw)


@dataclass(frozen=True, slots=True)
class DrafterPlan:
    """The cost model's best speculative choice for one drafter."""

    drafter: str
    k: int
    tokens_per_s: float  # predicted goodput at that k
    acceptance: float  # pooled per-position acceptance estimate


class AdaptivePolicy(Policy):
    """Goodput-maximising (drafter, k) with a never-slower guard; see the module docstring."""

    name = "adaptive"

    def __init__(self, drafters: Sequence[str], config: AdaptiveConfig | None = None, seed: int = 0,
                 key: str = "") -> None:
        check_int("seed", seed, 0)
        self.config = cfg = config or AdaptiveConfig()
        self.drafters = [d for d in dict.fromkeys(drafters) if d != PLAIN]
        self.seed = seed
        self.key = key
        self.profiles = {
            d: AcceptanceProfile(cfg.max_k, cfg.acceptance_half_life_steps, cfg.prior_acceptance,
                                 cfg.prior_weight, cfg.shrink_weight)
            for d in self.drafters
        }
        self.detectors = {d: PageHinkley(cfg.detector) for d in self.drafters}
        self.costs = CostModel(cfg.cost_half_life_steps, cfg.verify_prior_intercept,
                               cfg.verify_prior_slope, cfg.slope_prior_strength)
        self.bandit = (DiscountedUCB(self.drafters, cfg.bandit_discount, cfg.bandit_exploration)
                       if self.drafters else None)
        self.guard = SpeculationGuard(cfg.guard)
        self.steps = 0
        # bounded: a service running without telemetry never drains these events
        self._events: deque[AcceptanceCollapse] = deque(maxlen=MAX_PENDING_EVENTS)
        self._stoppers: dict[str, Any] = {}
        self._gates: dict[str, Any] = {}
        self._plans: dict[str, DrafterPlan] | None = None  # cache, cleared by observe
        self._probe_drafter: str | None = None  # the drafter shadow drafting asked to probe
        self._tokens_by_k: dict[str, list[float]] = {}  # per-drafter caches, cleared when it is observed
        self._draft_s_by_k: dict[str, list[float]] = {}
        self._warm_started = False  # warm_start seeds the cost model at most once
        self._probe_measured = False  # the current probe burst has verified a probe_min_k draft
        self._recent_plain = DecayedMean(RECENT_PLAIN_HALF_LIFE)  # seconds of recent no-draft steps

    # -- deciding -------------------------------------------------------------------------------

    def plans(self) -> dict[str, DrafterPlan]:
        """Each drafter's best ``k >= 1`` and predicted tokens/s under the current estimates."""
        if self._plans is not None:
            return self._plans
        max_k = self.config.max_k
        verify = self.costs.verify_s_by_k(max_k)
        plans = {}
        for drafter in self.drafters:
            profile = self.profiles[drafter]
            gate = self._gates.get(drafter)
            if gate is not None:  # the gate picks each draft's length: price the drafter as gated
                gated = gate.tokens_per_s()
                if not math.isnan(gated):
                    plans[drafter] = DrafterPlan(drafter, max_k, gated, profile.pooled_rate)
                    continue
            tokens = self._expected_by_k(drafter)
            draft = self._draft_s_by_k.get(drafter)
            if draft is None:
                draft = self._draft_s_by_k[drafter] = self.costs.draft_s_by_k(drafter, max_k)
            if math.isnan(verify[0]):  # plain speed unknown: nothing can be priced yet
                k, rate = 1, math.nan
            else:
                k, rate = _best_priced_len(tokens, verify, draft)
            plans[drafter] = DrafterPlan(drafter, k, rate, profile.pooled_rate)
        self._plans = plans
        return plans

    def plain_tokens_per_s(self) -> float:
        plain_s = self.costs.plain_s()
        return 1.0 / plain_s if plain_s > 0 else math.nan

    @property
    def shadow_k(self) -> int:
        return min(SHADOW_K, self.config.max_k)

    def expected_tokens(self, drafter: str, k: int) -> list[float] | None:
        if drafter not in self.profiles:
            return None
        tokens = self._expected_by_k(drafter)
        return tokens[: k + 1] if k < len(tokens) else None

    def _expected_by_k(self, drafter: str) -> list[float]:
        # a drafter's expected tokens (and draft costs) change only when it is observed itself
        tokens = self._tokens_by_k.get(drafter)
        if tokens is None:
            tokens = self._tokens_by_k[drafter] = expected_tokens_by_k(self.profiles[drafter].conditional_rates())
        return tokens

    def k_for(self, drafter: str) -> int:
        """The draft length this policy would use with ``drafter`` (for overrides forcing one)."""
        plan = self.plans().get(drafter)
        return plan.k if plan is not None else 1

    def decide(self) -> Action:
        if not self.drafters:
            return _PLAIN_ACTION
        guard = self.guard
        # 1. a probe burst is due or under way: speculate with the bandit's pick, winning or not,
        #    among the drafters that could win at all (not one whose measured cost rules it out)
        if guard.wants_spec_probe():
            drafter = self._probe_drafter or self._select_drafter(self._could_win())[0]
            probe_k = min(self.config.probe_min_k, self.config.max_k)
            return Action(drafter, max(self.plans()[drafter].k, probe_k))
        # 2. the measured guard says speculation loses: plain until the next probe
        if not guard.allowed:
            return _PLAIN_ACTION
        # 3. keep plain speed measured while speculating
        if guard.wants_plain_probe():
            return _PLAIN_ACTION
        # 4. discounted UCB over drafters, with the cost model's predicted speed as each mean;
        #    plain decoding when even the most optimistic index does not beat it
        drafter, index = self._select_drafter()
        # the bonus picks which drafter to try among those that could win, but speculating at all
        # needs a predicted win: exploring a drafter that is predicted to lose is the probes' job
        # (on a schedule, or when shadow drafting sees a recovery), not every step's
        plans = self.plans()
        plain_s = self.costs.plain_s()
        if not plans[drafter].tokens_per_s * plain_s > 1.0:
            drafter = max(plans, key=lambda d: plans[d].tokens_per_s)  # NaN-free: plain_s is measured here
            index = 0.0 if not plans[drafter].tokens_per_s * plain_s > 1.0 else index
        if not index > 1.0:
            return _PLAIN_ACTION
        return Action(drafter, plans[drafter].k)

    def _select_drafter(self, candidates: list[str] | None = None) -> tuple[str, float]:
        """The drafter with the highest UCB index and that index, in units of plain speed."""
        plans = self.plans()
        plain_s = self.costs.plain_s()
        means = {d: p.tokens_per_s * plain_s for d, p in plans.items()}  # NaN before plain is measured
        drafter = self.bandit.select(candidates or self.drafters, means)
        return drafter, self.bandit.index(drafter, means[drafter])

    def _could_win(self) -> list[str]:
        """Drafters that would beat plain decoding at some ``k`` if every draft were accepted
        (all of them while plain speed or their costs are unknown; all if none could)."""
        plain_s = self.costs.plain_s()
        if not plain_s > 0:
            return self.drafters
        max_k = self.config.max_k
        verify = self.costs.verify_s_by_k(max_k)
        able = []
        for drafter in self.drafters:
            draft = self.costs.draft_s_by_k(drafter, max_k)
            if any((k + 1) * plain_s > verify[k] + draft[k] for k in range(1, max_k + 1)):
                able.append(drafter)
        return able or self.drafters

    # -- learning -------------------------------------------------------------------------------

    def observe(self, outcome: StepOutcome) -> None:
        self.steps += 1
        self._plans = None
        self._tokens_by_k.pop(outcome.drafter, None)
        self._draft_s_by_k.pop(outcome.drafter, None)
        self.costs.update(outcome.drafter, outcome.k, outcome.proposed, outcome.draft_s, outcome.verify_s)
        if outcome.proposed == 0:  # a target forward of one token, whatever was asked
            self._recent_plain.update(_clip_spike(outcome.verify_s, self._recent_plain.value))
        if outcome.k == 0 or outcome.drafter == PLAIN:
            self.guard.observe_plain()
            self._probe_measured = self._probe_measured and self.guard.wants_spec_probe()
            return
        plain_s = self.costs.plain_s()
        tokens = outcome.num_accepted + 1  # accepted + recovered/bonus; a stop cut is not the drafter's doing
        seconds = max(outcome.step_s, 1e-9)
        self.guard.observe_spec(tokens, seconds, self._plain_speed_now(outcome))
        if not self.guard.wants_spec_probe():  # no burst under way (or this step ended one)
            self._probe_measured = False
        elif outcome.proposed >= min(self.config.probe_min_k, self.config.max_k):
            self._probe_measured = True
        if not self.guard.probing:  # the burst shadow drafting asked for is over
            self._probe_drafter = None
        profile = self.profiles.get(outcome.drafter)
        if profile is None:
            return  # a drafter this policy does not choose among (forced by an override)
        profile.update(outcome.k, outcome.num_accepted)
        if plain_s > 0:
            self.bandit.update(outcome.drafter, tokens / seconds * plain_s)  # 1.0 = plain speed
        self._detect(outcome)
        gate = self._gates.get(outcome.drafter)
        if gate is not None:
            if outcome.match_order is not None:
                gate.learn(outcome.match_order, outcome.proposed, outcome.num_accepted, outcome.match_ambiguous)
            elif outcome.proposed == 0:
                gate.note_miss()
        stopper = self._stoppers.get(outcome.drafter)
        if stopper is not None and outcome.draft_confidences:
            stopper.learn_step(outcome.draft_confidences, outcome.num_accepted, outcome.draft_entropies)

    def _plain_speed_now(self, outcome: StepOutcome) -> float:
        """Plain tokens/s to judge a speculative step against, as of now: the machine's speed comes
        in spells (another process, a clock change) and a speculative step run in a 10% slow spell
        must not be compared with plain steps run before it. A step that verified no draft (a
        lookup that found nothing) is its own reference: a plain forward plus the draft's cost.
        Otherwise plain steps of the last few dozen steps (``RECENT_PLAIN_HALF_LIFE``), else the
        cost model's longer-run ``plain_s``. (Replayed with the spells of a workloads run,
        benchmarks/replay.py --draws: against the longer-run plain speed, a copy request that began
        in a slow spell turned the guard off and fell behind the best static config.)"""
        if outcome.proposed == 0 and outcome.verify_s > 0:
            return 1.0 / outcome.verify_s
        plain_s = self._recent_plain.value
        if not plain_s > 0:
            plain_s = self.costs.plain_s()
        return 1.0 / plain_s if plain_s > 0 else math.nan

    def start_request(self) -> None:
        """A new request of this traffic key begins (called by the engine before its first step).

        Acceptance depends on the prompt far more than on time: prompt lookup accepts most drafts
        on a copy request and almost none on the next open-ended one. The key's profiles are kept
        as the prior but softened to ``request_prior_trials`` trials, so each request's own
        acceptance takes over within a few steps instead of a half-life."""
        for profile in self.profiles.values():
            profile.soften(self.config.request_prior_trials)
        for gate in self._gates.values():
            gate.start_request(self.config.request_prior_trials)
        self._plans = None
        self._tokens_by_k.clear()
        self.guard.start_request()

    def warm_start(self, outcomes: Iterable[StepOutcome]) -> bool:  # iterated only when taken
        """Seed the cost model with steps the engine measured before this controller existed.

        Only a controller that has observed nothing takes them, and only their costs: plain and
        verify seconds are the engine's and the machine's whatever the traffic, and a drafter's
        seconds per token are its own; acceptance belongs to the traffic key and is learned on the
        job. Without it a cold controller spends its first steps measuring (a plain step, one try
        of each drafter whose cost it does not know). Returns whether the outcomes were taken."""
        if self.steps or self._warm_started:
            return False
        taken = 0
        for outcome in outcomes:
            self.costs.update(outcome.drafter, outcome.k, outcome.proposed, outcome.draft_s, outcome.verify_s)
            taken += 1
        if not taken:  # nothing measured yet (a fresh engine): a later request may bring some
            return False
        self._warm_started = True
        if self.costs.plain_s() > 0:
            self.guard.plain_measured_elsewhere()
        self._plans = None
        self._draft_s_by_k.clear()
        return True

    def observe_shadow(self, drafter: str, k: int, num_accepted: int, match_order: int | None = None,
                       match_ambiguous: bool = False) -> None:
        """Acceptance of a draft that was proposed but not verified, resolved against the tokens
        plain decoding produced next (*shadow drafting*: only for drafters that cost nothing to run,
        such as n-gram lookup; ``match_order`` is ``None`` for a lookup that found nothing). It
        teaches the acceptance profile and the drafter's match gate while speculation is off, and
        asks the guard for a probe burst as soon as the drafter's plan beats plain decoding.

        The gate must learn too: a gated drafter is priced by its gate, and a gate that kept the
        previous request's picture (a copy request's strong matches) would keep asking for probes
        that the current request's bursts measure losing (seen on SmolLM2: one burst every 5 steps
        through whole collapse requests)."""
        profile = self.profiles.get(drafter)
        if profile is None or k <= 0:
            return
        profile.update(k, num_accepted)
        gate = self._gates.get(drafter)
        if gate is None and match_order is not None:  # a drafter that reports match orders
            gate = self.draft_gate(drafter)
        if gate is not None:
            if match_order is None:
                gate.note_miss()
            else:
                gate.learn_shadow(match_order, k, num_accepted, match_ambiguous)
        self._plans = None
        self._tokens_by_k.pop(drafter, None)
        if self.guard.allowed:
            return
        plain = self.plain_tokens_per_s()
        plan = self.plans()[drafter]
        if plain > 0 and plan.tokens_per_s > plain * (1.0 + self.config.guard.on_margin):
            self.guard.request_probe()
            self._probe_drafter = drafter

    def _detect(self, outcome: StepOutcome) -> None:
        alarm = self.detectors[outcome.drafter].update(step_acceptance(outcome.k, outcome.num_accepted))
        if alarm is None:
            return
        before, after, since = alarm
        self._events.append(AcceptanceCollapse(self.steps, outcome.timestamp, outcome.drafter, self.key,
                                               before, after, since))
        # the old profile describes traffic that is gone: start again from the prior
        self.profiles[outcome.drafter].reset()

    def drain_events(self) -> list[AcceptanceCollapse]:
        """Collapse events since the last call (oldest first); the list is emptied."""
        events = list(self._events)
        self._events.clear()
        return events

    # -- early stop -----------------------------------------------------------------------------

    def early_stop(self, drafter: str):
        """The early-stop object for ``drafter`` (``None`` when ``early_stop="off"``).

        Created on first use, so scikit-learn is imported only by policies that use it. See
        ``policies.early_stop`` for how a drafter loop calls it; ``observe`` trains it from
        ``StepOutcome.draft_confidences``.
        """
        mode = self.config.early_stop
        if mode == "off":
            return None
        stopper = self._stoppers.get(drafter)
        if stopper is None:
            from policies import early_stop  # sklearn is heavy to import; only when used

            if mode == "threshold":
                stopper = early_stop.ConfidenceThreshold(self.config.early_stop_threshold)
            else:
                learned = early_stop.LearnedEarlyStopConfig(stop_below=self.config.early_stop_threshold)
                stopper = early_stop.LearnedEarlyStop(learned, seed=(self.seed + zlib.crc32(drafter.encode())) % 2**32)
            self._stoppers[drafter] = stopper
        return stopper

    # -- draft length per n-gram match -----------------------------------------------------------

    def draft_gate(self, drafter: str):
        """The ``MatchGate`` for a drafter that reports match orders (``None`` when ``match_gate``
        is off). The engine asks the drafter for up to ``gate.max_k`` tokens, keeps
        ``gate.keep(order, available)`` of them, and reports cut drafts with ``learn_skipped``;
        ``observe`` teaches it the verified ones."""
        if not self.config.match_gate:
            return None
        gate = self._gates.get(drafter)
        if gate is None:
            from policies.match_gate import MatchGate

            cfg = self.config
            gate = self._gates[drafter] = MatchGate(cfg.max_k, self.costs.verify_s_by_k, cfg.acceptance_half_life_steps,
                                                    cfg.prior_acceptance, cfg.prior_weight, cfg.shrink_weight,
                                                    cfg.match_lift_weight, self._probe_floor)
        return gate

    def _probe_floor(self) -> int:
        """While a probe burst is due or under way and has not yet verified a draft of
        ``probe_min_k`` tokens, the gate keeps at least that many: a probe measures, and a gate
        that cut it to nothing would keep pricing drafts on verify costs it never re-measures
        (after a stall inflated them, speculation would stay off). One such step per burst
        re-measures the cost; the rest of the burst is the gate's, so that a burst on a request
        whose matches are not accepted costs one long verify, not four. A burst that shadow
        drafting asked for is the gate's throughout: the gate predicted a win at the current costs,
        so they cannot be ruling drafts out, and a floor would verify 4 tokens of a weak match."""
        if self._probe_measured or not self.guard.wants_spec_probe():
            return 0
        if self._probe_drafter is not None:
            return 0
        return min(self.config.probe_min_k, self.config.max_k)

    # -- telemetry ------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """A snapshot for telemetry and debugging (rates are derived from the counters here)."""
        return {
            "steps": self.steps,
            "speculation_allowed": self.guard.allowed,
            "probing": self.guard.probing,
            "guard_switches": self.guard.switches,
            "probe_backoff": self.guard.backoff,
            "plain_s": self.costs.plain_s(),
            "plans": {d: dataclasses.asdict(p) for d, p in self.plans().items()},
            "match_gates": {d: g.state() for d, g in self._gates.items()},
        }


def _best_priced_len(tokens: list[float], verify: list[float], draft: list[float]) -> tuple[int, float]:
    """``best_draft_len(tokens, [v + d for v, d in zip(verify, draft)], min_k=1)`` without building
    the list (this runs at every step for every drafter)."""
    best_k, best_rate = 1, -1.0
    for k in range(1, len(tokens)):
        seconds = verify[k] + draft[k]
        rate = tokens[k] / seconds if seconds > 0 else 0.0
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k, best_rate
