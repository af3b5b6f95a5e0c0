"""The Page-Hinkley acceptance-collapse detector."""

import random

import pytest

from policies.adaptive import AdaptivePolicy
from policies.change import AcceptanceCollapse, DetectorConfig, PageHinkley, step_acceptance
from policies.synthetic import SyntheticDrafter, SyntheticEnv, run_policy


def step_rates(rng, acceptance, k, steps):
    """Per-step acceptance of a drafter with iid per-position acceptance."""
    for _ in range(steps):
        accepted = 0
        while accepted < k and rng.random() < acceptance:
            accepted += 1
        yield step_acceptance(k, accepted)


def test_step_acceptance_counts_tested_positions():
    assert [step_acceptance(4, n) for n in range(5)] == [0.0, 0.5, 2 / 3, 0.75, 1.0]
    with pytest.raises(ValueError, match="k=0"):
        step_acceptance(0, 0)


@pytest.mark.parametrize("acceptance, k", [(0.9, 1), (0.6, 4), (0.9, 8)])
def test_false_alarm_rate_on_stationary_streams_is_below_one_per_5000_steps(acceptance, k):
    # Measured with these defaults: 0.05, 0.0 and 0.025 alarms per 1000 steps (200k steps each).
    alarms = steps = 0
    for seed in range(100):
        rng = random.Random(seed)
        detector = PageHinkley()
        for rate in step_rates(rng, acceptance, k, 1000):
            alarms += detector.update(rate) is not None
            steps += 1
    assert alarms / steps * 1000 < 0.2


@pytest.mark.parametrize("acceptance, k", [(0.9, 1), (0.8, 4), (0.9, 8)])
def test_a_collapse_is_detected_within_a_few_dozen_steps(acceptance, k):
    delays = []
    for seed in range(40):
        rng = random.Random(1000 + seed)
        detector = PageHinkley()
        for rate in step_rates(rng, acceptance, k, 300):
            detector.update(rate)
        for delay, rate in enumerate(step_rates(rng, 0.15, k, 200)):
            alarm = detector.update(rate)
            if alarm is not None:
                before, after, _ = alarm
                assert before - after > 0.2  # less than the true drop: the change point can come out early
                delays.append(delay)
                break
    assert len(delays) == 40
    assert sorted(delays)[35] < 40  # 90th percentile


def test_a_small_drift_is_not_reported_as_a_collapse():
    detector = PageHinkley(DetectorConfig(min_drop=0.3))
    rng = random.Random(0)
    alarms = [detector.update(r) for r in step_rates(rng, 0.8, 4, 300)]
    alarms += [detector.update(r) for r in step_rates(rng, 0.7, 4, 300)]
    assert all(a is None for a in alarms)


def test_policy_emits_one_event_with_acceptance_before_and_after_and_forgets_the_profile():
    env = SyntheticEnv([SyntheticDrafter("ngram", 0.9, draft_s_fixed=0.0001)], seed=0, key="chat")
    policy = AdaptivePolicy(["ngram"], key="chat")
    run_policy(policy, env, 300)
    assert policy.drain_events() == []
    env.set_acceptance("ngram", 0.1)
    run_policy(policy, env, 100)
    events = policy.drain_events()
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, AcceptanceCollapse)
    assert (event.drafter, event.key) == ("ngram", "chat")
    assert 300 < event.step <= 340
    # per tested position at k = 16: 0.9 per position averages ~0.73 per step
    assert event.acceptance_before > 0.65 and event.acceptance_after < 0.3
    assert event.timestamp > 0
    assert policy.drain_events() == []  # drained
    assert policy.profiles["ngram"].pooled_rate < 0.5  # relearned from the prior, not the old 0.9


def test_undrained_collapse_events_are_bounded():
    from policies.adaptive import MAX_PENDING_EVENTS, AdaptivePolicy
    from policies.change import AcceptanceCollapse

    policy = AdaptivePolicy(["ngram"])
    for i in range(MAX_PENDING_EVENTS + 50):
        policy._events.append(AcceptanceCollapse(i, 0.0, "ngram", "", 0.9, 0.1, 5))
    events = policy.drain_events()
    assert len(events) == MAX_PENDING_EVENTS and events[-1].step == MAX_PENDING_EVENTS + 49
    assert policy.drain_events() == []
