"""Simulated replicas drive the adaptive policy's n-gram match gate from per-match profiles."""

import pytest
import simpy

from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from simulator import build_simulation, scenario_from_dict, simulate
from simulator.acceptance import acceptance_from_dict
from simulator_testkit import scenario_dict

# copy traffic: unambiguous 3-token matches that copy whole runs, ambiguous 1-token matches that never
# do, and lookups that find nothing; the aggregate says nothing of which is which
COPY = {"per_position": [0.6, 0.9], "hit_rate": 0.8, "matches": [
    {"order": 3, "ambiguous": False, "share": 0.5, "per_position": [0.97]},
    {"order": 1, "ambiguous": True, "share": 0.3, "per_position": [0.02]},
]}


def _scenario():
    return scenario_from_dict(scenario_dict(profile__acceptance__copy__ngram=COPY, workload__shifts=[],
                                            workload__duration_s=400))


def test_profile_reads_match_kinds_and_rejects_bad_ones():
    profile = acceptance_from_dict(COPY, "acceptance.copy.ngram")
    assert [(m.order, m.ambiguous, m.share) for m in profile.matches] == [(3, False, 0.5), (1, True, 0.3)]
    with pytest.raises(ValueError, match=r"matches\[0\]\.order must be an integer >= 1"):
        acceptance_from_dict({"rate": 0.5, "matches": [{"order": 0, "share": 0.1, "per_position": [0.5]}]}, "p")
    with pytest.raises(ValueError, match="shares must add up to at most 1"):
        acceptance_from_dict({"rate": 0.5, "matches": [{"order": 1, "share": 0.7, "per_position": [0.5]},
                                                        {"order": 2, "share": 0.6, "per_position": [0.5]}]}, "p")
    with pytest.raises(ValueError, match=r"matches\[0\]\.share is required"):
        acceptance_from_dict({"rate": 0.5, "matches": [{"order": 1, "per_position": [0.5]}]}, "p")


def test_adaptive_gate_learns_long_drafts_for_strong_matches_and_cuts_weak_ones():
    env = simpy.Environment()
    sim = build_simulation(env, _scenario(), "adaptive")
    steps = []
    sim.metrics.on_step = lambda outcome, batch=1, _inner=sim.metrics.on_step: (steps.append(outcome), _inner(outcome, batch))
    env.run()
    strong = [s for s in steps if s.match_order == 3]
    weak = [s for s in steps if s.match_order == 1]
    assert strong and len(strong) > 20
    late_strong = strong[len(strong) // 2:]
    assert sum(s.proposed for s in late_strong) / len(late_strong) > 8  # long drafts once learned
    # weak matches end up cut to nothing: few are verified at all (the first ones, while the gate
    # learns what they are worth), and after those only short ones
    assert len(weak) < len(strong) / 10
    assert all(s.proposed <= 2 for s in weak[3:])


def test_gated_simulation_is_deterministic_and_beats_the_ungated_policy():
    gated = simulate(_scenario(), "adaptive")
    again = simulate(_scenario(), "adaptive")
    assert gated.summary == again.summary
    ungated = simulate(_scenario(), lambda seed, key="": AdaptivePolicy(["ngram"], AdaptiveConfig(match_gate=False),
                                                                       seed=seed, key=key))
    assert gated.summary["acceptance"]["tokens_per_step"] > ungated.summary["acceptance"]["tokens_per_step"]


# open-ended traffic: lookups rarely match, and what they match is not what the model writes
CHAT = {"per_position": [0.02], "hit_rate": 0.4, "matches": [
    {"order": 1, "ambiguous": True, "share": 0.4, "per_position": [0.02]},
]}


class NoShadowLearning(AdaptivePolicy):
    """The adaptive policy deaf to shadow drafts (the simulator before it drew them)."""

    def observe_shadow(self, *args, **kwargs):
        pass


def _shift_steps(policy):
    """Steps of a chat -> copy shift, in order; one policy for both classes (one traffic key)."""
    raw = scenario_dict(profile__acceptance__copy__ngram=COPY, profile__acceptance__chat__ngram=CHAT,
                        workload__mix={"chat": 1.0}, workload__shifts=[{"at_s": 300, "mix": {"copy": 1.0}}],
                        workload__duration_s=420)
    for name in ("copy", "chat"):
        raw["classes"][name]["key"] = "service"
    env = simpy.Environment()
    sim = build_simulation(env, scenario_from_dict(raw), policy)
    steps = []
    sim.metrics.on_step = lambda outcome, batch=1, _inner=sim.metrics.on_step: (steps.append((env.now, outcome)), _inner(outcome, batch))
    env.run()
    table = sim.metrics.table()
    copy = table.class_names.index("copy")
    first_copy = min(t for t, k in zip(table.start_s, table.klass) if k == copy)
    return [o for t, o in steps if t > first_copy], [o for t, o in steps if 200 <= t < 300]


def test_shadow_drafts_turn_speculation_back_on_after_a_shift_as_in_the_engine():
    shadows = []

    class Counting(AdaptivePolicy):
        def observe_shadow(self, *args, **kwargs):
            shadows.append(args)
            super().observe_shadow(*args, **kwargs)

    def plain_steps_before_drafting(steps):
        return next(i for i, o in enumerate(steps) if o.proposed > 0)

    with_shadows, late_chat = _shift_steps(lambda seed, key="": Counting(["ngram"], seed=seed, key=key))
    without, _ = _shift_steps(lambda seed, key="": NoShadowLearning(["ngram"], seed=seed, key=key))
    assert sum(o.proposed > 0 for o in late_chat) < 0.1 * len(late_chat)  # speculation off on chat traffic
    assert shadows and all(k == AdaptivePolicy(["ngram"]).shadow_k for _, k, *_ in shadows)
    # shadows of copy traffic show the lookups would pay: speculation is back within a few steps,
    # where the deaf policy waits for its next probe
    assert plain_steps_before_drafting(with_shadows) <= 10
    assert plain_steps_before_drafting(without) >= 100
