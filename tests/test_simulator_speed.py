"""A speed timeline scales every cost from its moment on: the machine running slower (or faster)
than when the profile was timed, as served runs on a shared machine do."""

import pytest
import simpy

from simulator import build_simulation, scenario_from_dict
from simulator.speed import SpeedTimeline
from simulator_testkit import FixedCost, scenario_dict


class Latencies:
    def __init__(self):
        self.e2e = {}

    def __getattr__(self, name):  # hooks these tests do not need
        return lambda *args: None

    def on_request_completion(self, request, now):
        self.e2e[request.id] = now - request.arrival_s


def _latencies(speed, mode="serial", **fields):
    # one request every 100 s, none waits for another: a request's latency is its own service time
    rows = [{"arrival_s": 100.0 * i, "class": "copy", "prompt_tokens": 40, "output_tokens": 10} for i in range(4)]
    raw = scenario_dict(workload={"replay": rows}, policy="none", replicas={"count": 1, "mode": mode}, speed=speed,
                        **fields)
    env, seen = simpy.Environment(), Latencies()
    build_simulation(env, scenario_from_dict(raw), cost=FixedCost(), extra_hooks=[seen])
    env.run()
    return [seen.e2e[i] for i in range(4)]


def test_the_factor_is_the_last_point_at_or_before_a_moment():
    timeline = SpeedTimeline([(300, 1.4), (0, 0.9)])
    assert [timeline.factor(t) for t in (0, 299.9, 300, 1e6)] == [0.9, 0.9, 1.4, 1.4]
    assert SpeedTimeline([(10, 2.0)]).factor(5) == 1.0  # before the first point: as calibrated
    with pytest.raises(ValueError, match="factor > 0"):
        SpeedTimeline([(0, 0.0)])


@pytest.mark.parametrize("mode", ["serial", "batching"])
def test_costs_follow_the_machines_speed_from_each_moment_on(mode):
    calibrated = _latencies(None, mode)
    # FixedCost: prefill 1 s, then 9 plain forwards of 0.5 s
    assert calibrated == pytest.approx([5.5] * 4)
    slowed = _latencies([{"at_s": 150, "factor": 2.0}], mode)
    assert slowed == pytest.approx([5.5, 5.5, 11.0, 11.0])  # the requests after the slowdown take twice as long
    sped_up = _latencies([{"at_s": 0, "factor": 0.5}], mode)
    assert sped_up == pytest.approx([2.75] * 4)


@pytest.mark.parametrize("mode", ["serial", "batching"])
def test_prefill_can_keep_a_speed_of_its_own(mode):
    # FixedCost: prefill 1 s, then 9 plain forwards of 0.5 s; forwards at 2x, prefill at 1.5x
    both = _latencies([{"at_s": 0, "factor": 2.0}], mode, prefill_speed=1.5)
    assert both == pytest.approx([1.5 + 9.0] * 4)
    alone = _latencies(None, mode, prefill_speed=0.5)  # no timeline: only prefill moves
    assert alone == pytest.approx([0.5 + 4.5] * 4)
    for bad in (0, -1, "fast", True):
        with pytest.raises(ValueError, match="prefill_speed must be"):
            scenario_from_dict(scenario_dict(prefill_speed=bad))


@pytest.mark.parametrize("speed, field", [
    ("fast", "speed must be a list"),
    ([{"at_s": 0}], "speed\\[0\\]"),
    ([{"at_s": 0, "factor": 0}], "speed\\[0\\].factor must be > 0"),
    ([{"at_s": -1, "factor": 1.2}], "speed\\[0\\].at_s must be >= 0"),
    ([{"at_s": 0, "factor": 1.2, "why": "x"}], "speed\\[0\\]"),
])
def test_a_bad_timeline_is_refused_by_field(speed, field):
    with pytest.raises(ValueError, match=field):
        scenario_from_dict(scenario_dict(speed=speed))


def test_a_runs_speed_is_read_from_its_step_records_window_by_window():
    from simulator.speed import timeline_from_steps

    class Priced:  # a plain step 50 ms, a verify of k drafts 80 ms
        def verify_s(self, tokens, context_len, *args):
            return 0.05 if tokens == 1 else 0.08

    origin = 1_000_000.0
    steps = [{"time": origin + t, "proposed": 0 if t % 2 else 4, "context_len": 100,
              "verify_s": (0.05 if t % 2 else 0.08) * (1.0 if t < 60 else 1.5)} for t in range(0, 120)]
    steps += [{"time": origin + 200 + t, "proposed": 0, "context_len": 100, "verify_s": 0.5} for t in range(3)]
    steps.append({"time": origin - 5, "proposed": 0, "context_len": 100, "verify_s": 9.0})  # before the run
    points = timeline_from_steps(steps, Priced(), origin, window_s=30.0)
    # as priced for the first minute, half as slow again after it; the 3-step window is too thin to say
    assert [t for t, _ in points] == [0.0, 30.0, 60.0, 90.0]
    assert [f for _, f in points] == pytest.approx([1.0, 1.0, 1.5, 1.5])
    with pytest.raises(ValueError, match="window_s"):
        timeline_from_steps(steps, Priced(), origin, window_s=0)


@pytest.mark.parametrize("second_row_drafts, scored", [(4, 2 * 5), (0, 5 + 1)], ids=["padded", "packed"])
def test_a_batched_runs_rows_of_one_step_are_priced_as_one_forward_in_the_engines_form(second_row_drafts, scored):
    from simulator.speed import timeline_from_steps

    class Padded:  # a forward costs by the tokens it scores (a profile of the engine's batched forward)
        padded = True

        def verify_s(self, tokens, context_len, batch=1, batch_tokens=None, batch_context=None, pairs=None):
            return 0.04 + 0.01 * (batch * tokens if batch_tokens is None else batch_tokens)

    origin = 1_000_000.0
    steps = []
    # two requests decoding together, one drafting 4 tokens: beside another drafting 4 the rows are
    # as wide (padded, 5 each), beside a plain one it packs (each row its own tokens, policies.batch_layout)
    for t in range(40):
        shared = {"time": origin + t + 0.001, "draft_s": 0.002, "verify_s": 1.2 * (0.04 + 0.01 * scored)}
        steps += [{**shared, "request_id": 1, "proposed": 4, "context_len": 100},
                  {**shared, "time": shared["time"] + 0.002, "request_id": 2, "proposed": second_row_drafts,
                   "context_len": 90}]
    # later, one request alone: its consecutive steps are forwards of their own even at equal times
    steps += [{"time": origin + 60 + t / 10, "draft_s": 0.0, "verify_s": 0.05, "request_id": 3, "proposed": 0,
               "context_len": 50} for t in range(20)]
    points = timeline_from_steps(steps, Padded(), origin, window_s=30.0)
    # 1.2x the padded batch's price (priced row by row it would read 2.4x); then as priced
    assert [t for t, _ in points] == [0.0, 30.0, 60.0]
    assert [f for _, f in points] == pytest.approx([1.2, 1.2, 1.0])


def _table(rows, mode, overhead):
    raw = scenario_dict(workload={"replay": rows}, policy="none", replicas={"count": 1, "mode": mode},
                        overhead=overhead)
    env = simpy.Environment()
    sim = build_simulation(env, scenario_from_dict(raw), cost=FixedCost())
    env.run()
    return sim.metrics.table()


@pytest.mark.parametrize("mode", ["serial", "batching"])
def test_a_servers_overhead_holds_the_replica_per_request_and_step_and_delays_only_the_client(mode):
    overhead = {"request_s": 0.2, "step_s": 0.1, "client_s": 0.05}
    alone = [{"arrival_s": 100.0 * i, "class": "copy", "prompt_tokens": 40, "output_tokens": 10} for i in range(3)]
    table = _table(alone, mode, overhead)
    # FixedCost: prefill 1 s, 9 plain forwards of 0.5 s; then the request's setup, 9 steps' overhead
    # and the way to and from the client
    assert table.ttft_s == pytest.approx([1.0 + 0.2 + 0.05] * 3)
    assert table.e2e_s == pytest.approx([5.5 + 0.2 + 9 * 0.1 + 0.05] * 3)
    assert _table(alone, mode, None).e2e_s == pytest.approx([5.5] * 3)  # none given: none priced


def test_the_next_request_waits_for_the_engines_overhead_not_the_clients():
    together = [{"arrival_s": 0.0, "class": "copy", "prompt_tokens": 40, "output_tokens": 10} for _ in range(2)]
    table = _table(together, "serial", {"request_s": 0.2, "step_s": 0.1, "client_s": 0.05})
    held = 5.5 + 0.2 + 9 * 0.1  # what the first request held the replica for
    assert table.e2e_s == pytest.approx([held + 0.05, 2 * held + 0.05])


@pytest.mark.parametrize("overhead, field", [
    ({"step_s": -0.001}, "overhead.step_s must be >= 0"),
    ({"client_s": "fast"}, "overhead.client_s must be a number"),
    ({"queue_s": 0.1}, "overhead.queue_s is not a known field"),
    ([0.1], "overhead must be"),
    ({"request_s": float("inf")}, "overhead.request_s must be a finite number"),
])
def test_a_bad_overhead_is_refused_by_field(overhead, field):
    with pytest.raises(ValueError, match=field):
        scenario_from_dict(scenario_dict(overhead=overhead))


def test_a_servers_overhead_is_measured_from_its_records_of_requests_and_steps():
    from simulator.speed import serving_overhead

    class Priced:  # prefill 100 ms, a plain step 50 ms
        def prefill_s(self, prompt_tokens):
            return 0.1

        def verify_s(self, tokens, context_len, *args):
            return 0.05

    requests, steps, client = [], [], []
    # per request: its speed, its setup before the prefill, its prefill's time over the priced one,
    # its wrap-up after the last step, a step's overhead, and the time outside the engine
    cases = [(1.0, 0.004, 0.006, 0.002, 0.001, 0.030), (2.0, 0.005, 0.010, 0.001, 0.002, 0.040),
             (1.0, 0.008, 0.014, 0.003, 0.001, 0.035)]
    for i, (speed, setup, slow_prefill, wrap_up, gap, outside) in enumerate(cases):
        start = 1000.0 * (i + 1)
        prefill = speed * 0.1 + slow_prefill
        t = start + setup + prefill  # the first token
        for _ in range(5):
            t += gap + 0.003 + speed * 0.05  # each step: its overhead, a lookup, the verify
            steps.append({"run_id": "r", "request_id": i, "time": t, "proposed": 0, "context_len": 50,
                          "draft_s": 0.003, "verify_s": speed * 0.05})
        end = t + wrap_up
        requests.append({"run_id": "r", "request_id": i, "start_time": start, "end_time": end, "prompt_tokens": 40,
                         "ttft_s": prefill})  # the store's ttft_s: the prefill's own seconds
        client.append(end - start + outside)
    steps.append({"run_id": "other", "request_id": 0, "time": 1500.0, "proposed": 0, "context_len": 50,
                  "draft_s": 0.0, "verify_s": 9.0})  # another run's step: not these requests'
    measured = serving_overhead(requests, steps, client, Priced())
    assert measured["step_s"] == pytest.approx(0.001)  # the median over the 12 gaps after each first step
    # the rest: setup + slow prefill + wrap-up, less the steps' overhead priced at the median step_s
    rest = sorted(setup + slow + wrap + 5 * (gap - 0.001) for _, setup, slow, wrap, gap, _ in cases)
    assert measured["request_s"] == pytest.approx(rest[1])
    assert measured["client_s"] == pytest.approx(0.035)
    assert (measured["requests"], measured["steps"]) == (3, 12)
    for row in requests:
        row["end_time"] -= 1.0  # an engine faster than priced has no overhead, not a negative one
    assert serving_overhead(requests, steps, [c - 1.0 for c in client], Priced())["request_s"] == 0.0
    with pytest.raises(ValueError, match="client_e2e_s"):
        serving_overhead(requests, steps, client[:2], Priced())
    with pytest.raises(ValueError, match="steps=1"):
        serving_overhead(requests, [], client, Priced())


def test_a_batched_servers_time_between_forwards_is_measured_from_its_step_records():
    from simulator.speed import batched_overhead

    steps, t = [], 0.0

    def forward(requests, gap, verify=0.1, draft=0.002):
        nonlocal t
        t += gap + draft + verify
        steps.extend({"time": t, "request_id": r, "draft_s": draft, "verify_s": verify} for r in requests)

    forward([1, 2], 0.5)  # the first forward: its gap holds the prompts' prefill alone
    for gap in (0.003, 0.004, 0.002, 0.003):
        forward([1, 2], gap)
    forward([1], 0.013)  # request 2 left: its wrap-up took 0.010 s more than a step's gap
    forward([1], 0.200)  # a prompt rode in this forward: its seconds fall in the gap
    forward([1, 3], 0.003)
    forward([1, 3], 0.004)  # the next requests may have ridden in it: its gap is left out too
    t += 5.0  # the batch emptied: the next prompt prefills alone
    forward([4, 5], 0.300)
    forward([4, 5], 0.003)
    measured = batched_overhead(steps)
    assert measured["step_s"] == pytest.approx(0.003)  # the median of the 6 gaps of a batch that stayed
    assert measured["request_s"] == pytest.approx(0.010)
    assert (measured["gaps"], measured["left"]) == (6, 1)
    # no forward followed another of the same batch: nothing to measure
    assert batched_overhead([{"time": 1.0, "request_id": 1, "draft_s": 0.0, "verify_s": 0.1},
                             {"time": 9.0, "request_id": 2, "draft_s": 0.0, "verify_s": 0.1}]) is None


def test_a_closed_loop_client_sends_its_next_request_once_it_has_heard_back():
    rows = [{"arrival_s": 0.0, "class": "copy", "prompt_tokens": 40, "output_tokens": 10} for _ in range(2)]
    raw = scenario_dict(workload={"replay": rows, "concurrency": 1}, policy="none", overhead={"client_s": 1.0})
    env = simpy.Environment()
    sim = build_simulation(env, scenario_from_dict(raw), cost=FixedCost())
    env.run()
    table = sim.metrics.table()
    # the first answer reaches the client at 5.5 + 1 s; only then does the second go out
    assert table.finish_s[0] == pytest.approx(6.5)
    assert table.arrival_s[1] == pytest.approx(6.5) and table.finish_s[1] == pytest.approx(13.0)


def test_the_engines_slot_axis_is_followed_from_the_step_records():
    """A forward's price depends on the slots its attention spans: rebuilt from the records as the
    engine keeps them (``SlotAxis``): a newcomer longer than the axis widens it, every forward
    appends its widest row, and once invalid slots outnumber the longest row they are compacted."""
    import doctest

    import simulator.speed
    from simulator.speed import with_slots

    rows = lambda *rs: [{"request_id": r, "context_len": c, "proposed": p} for r, c, p in rs]  # noqa: E731
    groups = [rows((1, 11, 8), (2, 6, 8)),  # request 1 holds 10 tokens, 2 holds 5: 10 slots
              rows((1, 12, 8), (2, 7, 8)),  # both rejected every draft: 10 + 9 slots
              rows((1, 13, 0), (2, 8, 0), (3, 41, 0)),  # 28 slots > 2 x 12 compact to 12; 40 joins: 40
              rows((3, 42, 0))]  # 1 and 2 left: 41 slots, 41 held
    assert [slots for _, slots in with_slots(groups)] == [10, 19, 40, 41]
    result = doctest.testmod(simulator.speed)
    assert result.failed == 0 and result.attempted > 0  # a module whose examples vanished passes no test
