"""The never-slower guard: turn speculation off when it measurably loses, probe to turn it back on.

Speculation is a bet: a step verifying ``k`` drafts costs ~2x a plain step on a CPU and pays only
when it yields more than ~2 tokens. The cost model can be wrong (a fit extrapolated, a machine that
got busy), so this guard compares *measured* speeds only:

- plain speed: tokens per second of plain steps. While speculating, one plain step is taken every
  ``plain_probe_every`` speculative steps so that this estimate stays current (a cost of ~1/64 of
  the speculative gain).
- speculative speed: each speculative step's tokens per second divided by plain speed (1.0 = as
  fast as plain), with a decayed mean and variance.

Hysteresis. Speculation goes *off* when it is losing beyond noise: when even the speed's upper
bound, ``mean + off_z * standard_error``, is below ``1 - off_margin``. A step's yield is noisy
(1 to k + 1 tokens), so the bare mean over a ~30-step window dips 10-20% below its truth now and
then; without the bound a controller that wins by 15% would switch itself off every few hundred
steps. It comes back *on* only when a probe burst measures more than ``1 + on_margin``, so noise
around the break-even point does not flip it every step. (Losing by less than the noise is the
cost model's job to avoid: it picks plain decoding from the same measurements, smoothed longer.)

Probes while off. After ``backoff`` consecutive plain steps the guard asks for a burst of
``probe_steps`` speculative steps. If the burst wins, speculation is on again; if it loses, the
backoff doubles (8, 16, 32, ... up to ``backoff_max``). At the cap a losing burst costs
``probe_steps`` speculative steps (each ~2-3.5 plain steps long) per ``backoff_max`` plain steps:
measured 3-5% below plain speed in the synthetic test where verification costs 3.3x a plain step.
That, and ``backoff_max`` steps of delay before noticing a recovery, is the price of never being
blind to a recovery; raise ``backoff_max`` to pay less of the first and more of the second.
The backoff returns to its initial value only once speculation has stayed on for
``plain_probe_every`` steps: a lucky 4-step burst that turns speculation on for a dozen losing
steps must not restart the whole 8, 16, 32, ... sequence.
The same schedule applies when the cost model itself chose plain decoding: that is what keeps its
acceptance estimates from going stale while it is not speculating.

The guard is a state machine fed by ``observe_plain`` / ``observe_spec``; it never decides an
action itself. ``wants_*`` are pure reads, so calling ``decide`` twice changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

from policies.decayed import decay_for_half_life
from policies.validation import check_int, check_positive, check_range


@dataclass(frozen=True)
class GuardConfig:
    # speculation must be measured 5% slower than plain before it is turned off...
    off_margin: float = 0.05
    # ... by more than one standard error (z = 1: a false "off" at a true 15% win needs a ~3 sigma
    # dip of the 30-step mean, while a true 20% loss is caught within ~20 steps)
    off_z: float = 1.0
    # a probe burst must be 5% faster than plain to turn speculation on: symmetric hysteresis
    on_margin: float = 0.05
    # at least this many speculative steps since turning on before judging (one step is noise)
    min_spec_steps: int = 8
    # half-life of the measured speculative speed, in speculative steps: ~46 effective steps,
    # reacts within ~1-2 s at 25 steps/s
    spec_half_life_steps: float = 32.0
    # speculative steps per probe burst: 4 steps average out most per-step noise of E[tokens]
    probe_steps: int = 4
    # plain steps before the first probe after turning off
    backoff_initial: int = 8
    # cap on the plain steps between probes: a losing burst of a draft model (4 steps at k >= 4,
    # ~4 plain steps each with an int8 self-draft on CPU) then costs ~3% of plain speed. Cheap
    # drafters (n-gram) are shadow-drafted during plain steps, which triggers a probe as soon as
    # they would win (``request_probe``, backoff_initial plain steps after the last burst at the
    # earliest), so their recovery does not wait for this cap
    backoff_max: int = 512
    # one plain step per this many speculative steps keeps plain speed measured (~1.5% cost)
    plain_probe_every: int = 64

    def __post_init__(self) -> None:
        check_range("off_margin", self.off_margin, 0.0, 1.0, high_open=True)
        check_range("off_z", self.off_z, 0.0, 10.0)
        check_range("on_margin", self.on_margin, 0.0, 10.0)
        check_int("min_spec_steps", self.min_spec_steps, 1)
        check_positive("spec_half_life_steps", self.spec_half_life_steps)
        check_int("probe_steps", self.probe_steps, 1)
        check_int("backoff_initial", self.backoff_initial, 1)
        check_int("backoff_max", self.backoff_max, self.backoff_initial)
        check_int("plain_probe_every", self.plain_probe_every, 1)


class SpeculationGuard:
    """Measured on/off switch for speculation, with hysteresis and a probe schedule."""

    def __init__(self, config: GuardConfig | None = None) -> None:
        self.config = config or GuardConfig()
        self.allowed = True  # optimistic start: the first probe and the cost model decide quickly
        self.plain_streak = 0  # consecutive plain steps
        self.backoff = self.config.backoff_initial
        self.probe_remaining = 0  # speculative steps left in the current probe burst
        self.probe_requested = False  # shadow drafting asked for a burst (request_probe)
        self.burst_tokens = 0.0
        self.burst_seconds = 0.0
        # start "due" so that the very first step measures plain speed
        self.spec_since_plain = self.config.plain_probe_every
        self.decay = decay_for_half_life(self.config.spec_half_life_steps)
        self._reset_speed()
        self.switches = 0  # number of on/off transitions, for telemetry

    @property
    def probing(self) -> bool:
        return self.probe_remaining > 0

    def wants_spec_probe(self) -> bool:
        """True when the next step should speculate to probe (a burst is due or under way)."""
        return self.probe_remaining > 0 or self._probe_due()

    def _probe_due(self) -> bool:
        due_after = self.config.backoff_initial if self.probe_requested else self.backoff
        return self.plain_streak >= due_after

    def wants_plain_probe(self) -> bool:
        """True when plain speed should be re-measured before speculating on."""
        return self.spec_since_plain >= self.config.plain_probe_every

    def start_request(self) -> None:
        """A new request: the measured speed of speculation on the previous prompt says little about
        this one, so judge it afresh (the on/off state and the probe schedule are kept)."""
        self._reset_speed()

    def request_probe(self) -> None:
        """Probe soon, whatever the backoff: outside evidence (shadow drafting while plain) says a
        drafter would now win. The burst still has to measure the win. Even so at least
        ``backoff_initial`` plain steps separate two bursts: evidence that keeps predicting wins
        the bursts do not measure must not turn the backoff into a loop of one burst every few
        steps (seen on SmolLM2 before the match gate learned from shadow drafts)."""
        if not self.allowed and self.probe_remaining == 0:
            self.probe_requested = True

    def plain_measured_elsewhere(self) -> None:
        """Plain speed is known from outside this guard's steps (the engine's costs, taken by a
        cold controller): the first step need not measure it."""
        self.spec_since_plain = 0

    def observe_plain(self) -> None:
        self.plain_streak += 1
        self.spec_since_plain = 0

    def observe_spec(self, tokens: float, seconds: float, plain_speed: float) -> None:
        """One speculative step that emitted ``tokens`` in ``seconds``; ``plain_speed`` in tokens/s."""
        cfg = self.config
        if self.probe_remaining == 0 and self._probe_due():
            self.probe_remaining = cfg.probe_steps
            self.burst_tokens = self.burst_seconds = 0.0
            self.probe_requested = False
        self.plain_streak = 0
        self.spec_since_plain += 1
        if self.probe_remaining > 0:
            self.burst_tokens += tokens
            self.burst_seconds += seconds
            self.probe_remaining -= 1
            if self.probe_remaining == 0:
                self._finish_probe(plain_speed)
            return
        if not plain_speed > 0:  # plain speed not measured yet: nothing to compare against
            return
        self._update_speed(tokens / seconds / plain_speed)
        if (self.allowed and self.speed_count >= cfg.min_spec_steps
                and self.speed_upper_bound() < 1.0 - cfg.off_margin):
            self.allowed = False
            self.switches += 1
            if self.speed_count < cfg.plain_probe_every:  # flapping: keep backing off
                self.backoff = min(2 * self.backoff, cfg.backoff_max)
        elif self.speed_count >= cfg.plain_probe_every:  # on and holding: speculation is stable
            self.backoff = cfg.backoff_initial

    # -- the decayed mean and standard error of the relative speed ------------------------------

    def _reset_speed(self) -> None:
        self.speed_count = 0  # undecayed steps since the last reset
        self._w = self._w2 = self._wx = self._wxx = 0.0  # decayed sums of w, w^2, w x, w x^2

    def _update_speed(self, relative_speed: float, weight: float = 1.0) -> None:
        d = self.decay
        self._w = self._w * d + weight
        self._w2 = self._w2 * d * d + weight * weight
        self._wx = self._wx * d + weight * relative_speed
        self._wxx = self._wxx * d + weight * relative_speed * relative_speed
        self.speed_count += 1

    @property
    def relative_speed(self) -> float:
        """Decayed mean of speculative speed / plain speed (NaN before any step)."""
        return self._wx / self._w if self._w > 0 else math.nan

    def speed_upper_bound(self) -> float:
        """``mean + off_z * standard_error``, with Kish's effective sample size (sum w)^2 / sum w^2."""
        mean = self.relative_speed
        variance = max(self._wxx / self._w - mean * mean, 0.0)
        effective_n = self._w * self._w / self._w2
        return mean + self.config.off_z * math.sqrt(variance / effective_n)

    def _finish_probe(self, plain_speed: float) -> None:
        burst_speed = self.burst_tokens / self.burst_seconds if self.burst_seconds > 0 else 0.0
        if burst_speed > plain_speed * (1.0 + self.config.on_margin):
            if not self.allowed:
                self.switches += 1
            self.allowed = True
            # judge the new regime from the burst on, not by the losing steps that turned it off
            self._reset_speed()
        else:
            if self.allowed:
                self.switches += 1
            self.allowed = False
            self.backoff = min(2 * self.backoff, self.config.backoff_max)
