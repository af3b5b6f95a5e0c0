"""The alert rules as pure functions over literal interval rows, and their lifecycle in a store."""

import random

import pytest

from adaptive_spec.telemetry import store
from adaptive_spec.telemetry.alerts import (AlertEvaluator, AlertRules, CollapseRule, SpeculationOffRule,
                                            TpotRegressionRule, evaluate_rules)

RULES = AlertRules(collapse=CollapseRule(window_s=10, baseline_s=60, for_s=5, min_draft_tokens=20),
                   speculation_off=SpeculationOffRule(limit_s=30),
                   tpot_regression=TpotRegressionRule(ratio=1.1, window_s=10, plain_window_s=60, for_s=5, min_tokens=20),
                   check_every_s=1.0)


def interval(t, drafter="d", draft=40, accepted=36, emitted=None, seconds=0.1, model="m", key="k"):
    emitted = accepted + draft // 4 if emitted is None else emitted
    return dict(model=model, key=key, drafter=drafter, end_time=t, draft_tokens=draft, accepted_tokens=accepted,
                emitted_tokens=emitted, draft_s=0.0, verify_s=seconds)


def verdicts(rows, now, rule, last_speculation=(), firing=frozenset()):
    return [v for v in evaluate_rules(rows, list(last_speculation), now, RULES, set(firing)) if v.rule == rule]


def test_collapse_needs_both_the_floor_and_the_fall_held_for_for_s():
    good = [interval(t) for t in range(0, 100)]  # acceptance 0.9, one row per second
    bad = [interval(t, accepted=1) for t in range(100, 130)]  # 0.025
    rows = good + bad
    # the 10 s window (t-10, t] falls below 0.3 once 7 of its 10 rows are bad, at t=106:
    # (3 * 36 + 7) / 400 = 0.29; then it must hold for for_s = 5 s
    assert verdicts(rows, 106.0, "acceptance_collapse")[0].value == pytest.approx(0.2875)
    assert not verdicts(rows, 110.0, "acceptance_collapse")[0].active
    fired = verdicts(rows, 111.0, "acceptance_collapse")[0]
    assert fired.active and fired.value < 0.3 and fired.threshold == 0.3
    assert "baseline 0.87" in fired.message  # (41, 101]: 58 good rows and 2 bad ones


def test_always_weak_drafter_is_not_a_collapse():
    rows = [interval(t, accepted=4) for t in range(0, 200)]  # 0.1 throughout: below the floor, no fall
    # exactly one verdict, and a "no": an empty list or a "keep" (None) would pass `not any(...)` too
    assert [v.active for v in verdicts(rows, 199.0, "acceptance_collapse")] == [False]


def test_healthy_fall_above_the_floor_is_not_a_collapse():
    rows = [interval(t, accepted=38) for t in range(0, 100)] + [interval(t, accepted=16) for t in range(100, 150)]
    assert verdicts(rows, 149.0, "acceptance_collapse")[0].active is False  # 0.95 -> 0.4: halved, above 0.3


def test_stationary_noisy_stream_never_fires():
    rng = random.Random(0)
    rows = [interval(t, accepted=sum(rng.random() < 0.6 for _ in range(40))) for t in range(0, 600)]
    assert all([v.active for v in verdicts(rows, float(now), "acceptance_collapse")] == [False]
               for now in range(80, 600, 5))


def test_firing_collapse_holds_while_the_window_has_too_few_drafts_and_resolves_above_the_floor():
    key = ("acceptance_collapse", "m", "k", "d")
    rows = [interval(t, accepted=1) for t in range(0, 20)] + [interval(t, draft=1, accepted=1) for t in range(20, 30)]
    assert verdicts(rows, 29.0, "acceptance_collapse", firing={key})[0].active is None  # 10 draft tokens: can't tell
    rows += [interval(t, accepted=36) for t in range(30, 40)]
    assert verdicts(rows, 39.0, "acceptance_collapse", firing={key})[0].active is False


def test_speculation_off_fires_after_the_limit_only_after_a_switch_and_with_traffic():
    plain = [interval(t, drafter="none", draft=0, accepted=0, emitted=1) for t in range(0, 100)]
    switched = [dict(model="m", key="k", drafter="d", time=50.0, value="off", previous="on")]
    assert not verdicts(plain, 79.0, "speculation_off", switched)[0].active
    assert verdicts(plain, 81.0, "speculation_off", switched)[0].active
    never_on = [dict(model="m", key="k", drafter=None, time=0.0, value="off", previous=None)]
    assert not verdicts(plain, 99.0, "speculation_off", never_on)[0].active
    assert not verdicts(plain[:40], 99.0, "speculation_off", switched)[0].active  # no traffic since t=39


def test_tpot_regression_against_plain_steps_of_the_same_model():
    plain = [interval(t, drafter="none", draft=0, accepted=0, emitted=10, seconds=0.2, key="other") for t in range(0, 60)]
    fast = [interval(t, emitted=20, seconds=0.2) for t in range(0, 30)]  # 0.01 s/token vs plain 0.02
    slow = [interval(t, emitted=10, seconds=0.3) for t in range(30, 60)]  # 0.03 s/token
    assert not verdicts(plain + fast + slow, 30.0, "tpot_regression")[0].active
    v = verdicts(plain + fast + slow, 50.0, "tpot_regression")[0]
    assert v.active and v.value == pytest.approx(0.03) and v.threshold == pytest.approx(0.022)


def test_evaluator_records_firing_then_resolved_and_tells_the_notifier(tmp_path):
    path = tmp_path / "a.sqlite"
    conn = store.connect(path)
    cols = store.COLUMNS["intervals"]

    def write(rows):
        store.write_batch(conn, [("intervals", tuple({**dict.fromkeys(cols, 0), "run_id": "r", "start_time": r["end_time"],
                                                     "proposed_per_pos": "[]", "accepted_per_pos": "[]", **r}[c] for c in cols))
                                 for r in rows])

    class Log:
        calls = []

        def notify(self, transitions):
            self.calls.append([(t.state, t.rule) for t in transitions])

    evaluator = AlertEvaluator(RULES, notifier=Log())
    write([interval(t) for t in range(0, 100)] + [interval(t, accepted=1) for t in range(100, 120)])
    assert [t.state for t in evaluator(conn, 119.0)] == ["firing"]
    assert evaluator(conn, 119.5) == []  # still firing: no new transition, no second row
    write([interval(t) for t in range(120, 130)])
    assert [t.state for t in evaluator(conn, 129.0)] == ["resolved"]
    rows = [dict(r) for r in conn.execute("SELECT * FROM alerts")]
    assert len(rows) == 1 and rows[0]["state"] == "resolved"
    assert (rows[0]["fired_at"], rows[0]["resolved_at"]) == (119.0, 129.0)
    assert Log.calls == [[("firing", "acceptance_collapse")], [("resolved", "acceptance_collapse")]]


@pytest.mark.parametrize("kwargs, name", [(dict(floor=0.0), "floor"), (dict(fraction=1.5), "fraction"),
                                          (dict(window_s=-1), "window_s"), (dict(for_s=-1), "for_s"),
                                          # inf used to pass, then every evaluation raised "cannot convert float NaN"
                                          (dict(for_s=float("inf")), "for_s"), (dict(window_s=float("inf")), "window_s"),
                                          (dict(min_draft_tokens=float("nan")), "min_draft_tokens")])
def test_bad_rule_parameters_name_parameter_and_value(kwargs, name):
    with pytest.raises(ValueError, match=f"{name}="):
        CollapseRule(**kwargs)
