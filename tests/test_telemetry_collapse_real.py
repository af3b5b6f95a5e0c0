"""The collapse alert on the real SmolLM2: copy-heavy prompts, then prompts prompt lookup cannot guess.

Same harness as ``test_telemetry_collapse`` (a fake clock advanced 0.1 s per step, so the rule's
windows do not depend on this machine's speed), but the drafter is the real n-gram lookup and the
collapse comes from the traffic itself.
"""

import pytest

from adaptive_spec import SpeculativeDecoder, load_model
from adaptive_spec.bench import load_prompts
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.telemetry.alerts import AlertEvaluator
from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder
from adaptive_spec.telemetry.store import read_alerts
from policies import StaticPolicy
from telemetry_testkit import FakeClock, Retimed
from test_telemetry_collapse import EVAL_S, RULES

pytestmark = pytest.mark.real_model

PROMPTS = load_prompts("benchmarks/workloads.jsonl")
COPY = [p.prompt for p in PROMPTS if p.kind == "copy"][:3]
OPEN = [p.prompt for p in PROMPTS if p.kind == "open"]


def test_real_collapse_fires_and_resolves(tmp_path):
    clock = FakeClock()
    recorder = StoreRecorder(tmp_path / "t.sqlite", RecorderConfig(interval_s=0.25))
    decoder = SpeculativeDecoder(load_model("smollm2"), [NgramDrafter()], StaticPolicy("ngram", 8),
                                 observers=[Retimed(recorder, clock)])
    evaluator = AlertEvaluator(RULES)
    state = {"next": clock.now + EVAL_S, "transitions": []}

    def run(prompts, fake_seconds):
        end, i = clock.now + fake_seconds, 0
        while clock.now < end:
            decoder.generate(prompts[i % len(prompts)], max_new_tokens=48)
            i += 1
            assert recorder.flush()
            while state["next"] <= clock.now:
                state["transitions"] += evaluator.evaluate_path(recorder.path, state["next"])
                state["next"] += EVAL_S

    run(COPY, 10.0)  # copy-heavy: lookup drafts are accepted, the baseline fills
    assert state["transitions"] == []
    switched_at = clock.now
    run(OPEN, 5.0)  # open-ended: lookup acceptance collapses
    fired = [t for t in state["transitions"] if t.state == "firing"]
    assert [t.rule for t in fired] == ["acceptance_collapse"]
    assert 0 < fired[0].fired_at - switched_at <= RULES.collapse.max_delay_s(EVAL_S)
    recovered_at = clock.now
    run(COPY, 4.0)
    resolved = [t for t in state["transitions"] if t.state == "resolved"]
    assert len(resolved) == 1 and resolved[0].resolved_at > recovered_at
    recorder.close()
    assert [(r["rule"], r["state"]) for r in read_alerts(recorder.path)] == [("acceptance_collapse", "resolved")]
