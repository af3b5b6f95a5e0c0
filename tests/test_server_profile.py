"""serve --max-batch N --profile P: the batch's draft cap prices steps from the calibrated profile
before the first one, and requests decode as without it."""

from pathlib import Path

import pytest

from adaptive_spec.server import Settings
from adaptive_spec.server.cli import _step_costs
from policies.batch_cap import BatchDraftCap
from server_kit import client, live_server, tiny_decoder, wait_until
from tiny import one_thread

PROFILE = Path("simulator/profiles/smollm2_cpu_batched.json")


def test_the_profiles_timed_steps_warm_the_batch_cap_of_the_served_engine():
    costs = _step_costs(PROFILE, 4, "smollm2")
    assert any(rows > 1 for rows, *_ in costs) and all(seconds > 0 for _, _, seconds, _ in costs)
    assert len({context for *_, context in costs}) > 1  # timed at several contexts: the cap prices by context
    with one_thread():
        decoder = tiny_decoder()
        with live_server(decoder, Settings(max_batch=4, step_costs=costs)) as (url, app), client(url) as http:
            assert wait_until(lambda: app.state.service.worker is not None)
            cap = app.state.service.worker.engine.draft_cap
            timed = {(rows, width, context): seconds for rows, width, seconds, context in costs}
            # before any request: priced exactly as a cap warmed from the same steps prices (the fit's
            # line, not each timed step), and near what calibrate timed a step of 4 rows, 5 wide
            warmed = BatchDraftCap(plain_slowdown=cap.plain_slowdown, objective=cap.objective)
            warmed.warm(costs)
            for rows, width in ((2, 1), (4, 5), (4, 9)):
                for context in (64, 256):
                    assert cap.cost(rows, width, context) == pytest.approx(warmed.cost(rows, width, context), rel=1e-9)
            for context in (64, 256):
                assert abs(cap.cost(4, 5, context) - timed[(4, 5, context)]) / timed[(4, 5, context)] < 0.5
            reply = http.post("/v1/completions", json={"model": "tiny", "prompt": "<1> <2> <3> <1> <2>", "max_tokens": 8})
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 8


def test_the_batch_objective_reaches_the_served_engines_cap():
    with one_thread(), live_server(tiny_decoder(), Settings(max_batch=4, batch_objective="power")) as (url, app):
        assert wait_until(lambda: app.state.service.worker is not None)
        assert app.state.service.worker.engine.draft_cap.objective == "power"


def test_the_batch_cut_reaches_the_served_engines_cap():
    with one_thread(), live_server(tiny_decoder(), Settings(max_batch=4, batch_cut="common")) as (url, app):
        assert wait_until(lambda: app.state.service.worker is not None)
        assert app.state.service.worker.engine.draft_cap.cut == "common"
