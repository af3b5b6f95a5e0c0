"""End to end: a real decoder, a drafter that stops working, the store, and the alert evaluator.

Time is a fake clock advanced 0.1 s per step (``telemetry_testkit.Retimed``), evaluation runs
every ``EVAL_S`` of that time, as the writer thread would run it.
"""

import json

import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.telemetry.alerts import AlertEvaluator, AlertRules, CollapseRule, SpeculationOffRule
from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder
from adaptive_spec.telemetry.store import read_alerts, read_decisions
from policies import Action, OverridePolicy, StaticPolicy, make_policy
from telemetry_testkit import FakeClock, Retimed, SwitchableDrafter
from tiny import loaded, tiny_llama

EVAL_S = 0.5
RULES = AlertRules(collapse=CollapseRule(floor=0.3, fraction=0.5, window_s=2.0, baseline_s=8.0, for_s=1.0,
                                         min_draft_tokens=20), check_every_s=0.25)
PROMPT = [5, 9, 13, 2, 7, 5, 9, 13, 2, 7]


class Harness:
    def __init__(self, tmp_path, drafter, policy, rules=RULES):
        self.path = tmp_path / "t.sqlite"
        self.clock = FakeClock()
        self.recorder = StoreRecorder(self.path, RecorderConfig(interval_s=0.25))
        target = loaded(tiny_llama(0))
        self.decoder = SpeculativeDecoder(target, [drafter], policy, observers=[Retimed(self.recorder, self.clock)])
        self.evaluator = AlertEvaluator(rules)
        self.next_eval = self.clock.now + EVAL_S
        self.transitions = []

    def run_until(self, fake_seconds: float, max_new_tokens: int = 24) -> None:
        end = self.clock.now + fake_seconds
        while self.clock.now < end:
            self.decoder.generate(PROMPT, max_new_tokens=max_new_tokens)
            assert self.recorder.flush()
            while self.next_eval <= self.clock.now:
                self.transitions += self.evaluator.evaluate_path(self.path, self.next_eval)
                self.next_eval += EVAL_S

    def close(self):
        self.recorder.close()


@pytest.fixture
def torch_two_threads(torch_threads):
    return None


def test_collapse_fires_within_the_stated_window_and_resolves_after_recovery(tmp_path, torch_two_threads):
    drafter = SwitchableDrafter(tiny_llama(0))
    h = Harness(tmp_path, drafter, StaticPolicy("d", 4))
    h.run_until(10.0)  # good: the baseline window fills with acceptance ~1.0
    assert h.transitions == []

    drafter.mode, switched_at = "bad", h.clock.now
    h.run_until(5.0)
    fired = [t for t in h.transitions if t.state == "firing"]
    assert [(t.rule, t.drafter) for t in fired] == [("acceptance_collapse", "d")]
    delay = fired[0].fired_at - switched_at
    assert 0 < delay <= RULES.collapse.max_delay_s(EVAL_S), delay
    assert fired[0].value < 0.3

    drafter.mode, recovered_at = "good", h.clock.now
    h.run_until(3.0)
    resolved = [t for t in h.transitions if t.state == "resolved"]
    assert len(resolved) == 1 and resolved[0].rule == "acceptance_collapse"
    # the rolling rate is back above the floor once 30% of the window's drafts are good again
    assert 0 < resolved[0].resolved_at - recovered_at <= RULES.collapse.window_s + EVAL_S
    h.close()

    rows = read_alerts(h.path)
    assert [(r["rule"], r["state"]) for r in rows] == [("acceptance_collapse", "resolved")]
    assert rows[0]["fired_at"] == fired[0].fired_at and rows[0]["resolved_at"] == resolved[0].resolved_at


def test_stationary_stream_raises_no_alert(tmp_path, torch_two_threads):
    # n-gram lookup on a random model: acceptance is low (below the floor) but stationary
    h = Harness(tmp_path, NgramDrafter(), StaticPolicy("ngram", 4))
    h.run_until(16.0)
    h.close()
    assert h.transitions == []
    assert read_alerts(h.path) == []


def test_adaptive_policy_collapse_event_is_recorded_as_a_decision(tmp_path, torch_two_threads):
    # the policy's change detector sees acceptance only (no timings), so this is deterministic;
    # whether its guard then turns speculation off depends on measured costs, so it is not asserted
    # the tiny draft costs as much as the target, so the adaptive policy would (rightly) decode
    # plainly; forcing its action keeps speculation on while the policy still observes every step
    drafter = SwitchableDrafter(tiny_llama(0))
    adaptive = make_policy("adaptive", ["d"], early_stop="off")
    h = Harness(tmp_path, drafter, OverridePolicy(adaptive, Action("d", 4)))
    h.run_until(6.0)
    drafter.mode, switched_at = "bad", h.clock.now
    h.run_until(6.0)
    h.close()
    decisions = read_decisions(h.path)
    assert [(d["kind"], d["value"], d["previous"]) for d in decisions][:2] == [("drafter", "d", None), ("speculation", "on", None)]
    (collapse,) = [d for d in decisions if d["kind"] == "collapse"]
    detail = json.loads(collapse["detail"])
    assert detail["drafter"] == "d" and detail["acceptance_before"] > 0.9 and detail["acceptance_after"] < 0.2
    assert collapse["time"] > switched_at


def test_speculation_switched_off_alerts_after_the_limit_and_resolves_when_back_on(tmp_path, torch_two_threads):
    rules = AlertRules(speculation_off=SpeculationOffRule(limit_s=3.0))
    h = Harness(tmp_path, NgramDrafter(), StaticPolicy("ngram", 4), rules)
    h.run_until(2.0)
    h.decoder.policy, off_at = StaticPolicy("none", 0), h.clock.now  # the controller gives up speculating
    h.run_until(5.0)
    fired = [t for t in h.transitions if t.state == "firing"]
    assert [t.rule for t in fired] == ["speculation_off"]
    # the tracker needs >50% of its 32-step window plain (~1.7 s at 0.1 s/step), then the limit runs
    assert 3.0 < fired[0].fired_at - off_at <= 32 * 0.1 + 3.0 + EVAL_S
    h.decoder.policy = StaticPolicy("ngram", 4)
    h.run_until(3.0)
    h.close()
    assert [t.state for t in h.transitions] == ["firing", "resolved"]
    offs = [d for d in read_decisions(h.path) if d["kind"] == "speculation"]
    assert [(d["value"], d["previous"]) for d in offs] == [("on", None), ("off", "on"), ("on", "off")]
