"""The simulator's batching replica runs the batched engine's protocol: a learning controller serves
one sequence at a time (concurrent ones get controllers of their own), and the engine's
``BatchDraftCap`` caps learning sequences' drafts as the batch fills, from measured costs."""

import pytest
import simpy

from simulator import build_simulation, scenario_from_dict, simulate
from simulator_testkit import gpu_like_profile, scenario_dict


def _scenario(policy: str, max_batch: int, draft_cap: bool = True, profile=None, rate: float = 1000.0):
    raw = scenario_dict(profile=profile or gpu_like_profile(), policy=policy,
                        workload={"arrival": {"process": "poisson", "rate": rate}, "mix": {"copy": 1.0},
                                  "duration_s": 1.0},
                        classes__copy__output_tokens=64, classes__copy__prompt_tokens=32,
                        replicas={"count": 1, "mode": "batching", "max_batch": max_batch, "draft_cap": draft_cap})
    return scenario_from_dict(raw)


def test_concurrent_sequences_get_controllers_of_their_own_and_give_them_back():
    env = simpy.Environment()
    sim = build_simulation(env, _scenario("adaptive", 8))
    replica = sim.replicas[0]
    leased = []
    lease = replica.policy_for

    def spying(key):
        busy = set(replica._busy)
        policy = lease(key)
        # never one already serving a running sequence, and marked busy now
        assert id(policy) not in busy and id(policy) in replica._busy
        leased.append(policy)
        return policy

    replica.policy_for = spying
    env.run()
    controllers = {id(p) for p in leased}
    assert 1 < len(controllers) <= 8  # one per concurrent sequence, at most max_batch
    assert replica.policies.get("copy") in leased  # the pool's own controller first, as in the engine
    assert not replica._busy  # every sequence gave its controller back


def test_a_fixed_config_shares_one_object():
    env = simpy.Environment()
    sim = build_simulation(env, _scenario("static:ngram:4", 8))
    env.run()
    assert sim.replicas[0]._pools == {} and sim.replicas[0].draft_cap._steps == 0  # nothing of theirs to cut


def test_the_cap_shrinks_drafts_where_the_full_batch_cannot_afford_them():
    """At 64 sequences on the roofline profile a verify of 5 tokens a row costs several times one of
    one token: the cut drafts less than the uncapped controllers and makes more tokens/s."""
    capped = simulate(_scenario("adaptive", 64), with_timeseries=False).summary
    uncapped = simulate(_scenario("adaptive", 64, draft_cap=False), with_timeseries=False).summary
    assert capped["acceptance"]["tokens_per_step"] < uncapped["acceptance"]["tokens_per_step"]
    assert capped["throughput_tokens_s"] > uncapped["throughput_tokens_s"]


class _Steps:
    """Hooks: when each iteration's steps finished, and when each request got its first token."""

    def __init__(self):
        self.times, self.first = [], {}

    def __getattr__(self, name):  # the hooks these tests do not need
        return lambda *args: None

    def on_step(self, outcome, batch):
        self.times.append(outcome.timestamp)

    def on_first_token(self, request, now):
        self.first[request.id] = now - request.arrival_s


def _joining(prefill_chunk):
    """Two short requests decoding when a 2048-token prompt arrives (trace rows)."""
    rows = [{"arrival_s": 0.0, "class": "copy", "prompt_tokens": 32, "output_tokens": 200},
            {"arrival_s": 0.0, "class": "copy", "prompt_tokens": 32, "output_tokens": 200},
            {"arrival_s": 0.5, "class": "copy", "prompt_tokens": 2048, "output_tokens": 8}]
    raw = scenario_dict(profile=gpu_like_profile(), policy="none", workload={"replay": rows},
                        replicas={"count": 1, "mode": "batching", "max_batch": 4, "prefill_chunk": prefill_chunk})
    env, steps = simpy.Environment(), _Steps()
    sim = build_simulation(env, scenario_from_dict(raw), extra_hooks=[steps])
    env.run()
    gaps = [b - a for a, b in zip(sorted(set(steps.times)), sorted(set(steps.times))[1:])]
    return max(gaps), steps.first[2], sim


def test_a_long_prompt_joins_in_chunks_as_in_the_engine():
    from simulator.batching import chunk_prefill_s
    from simulator.cost_model import fit_cost_model
    from simulator.profile import profile_from_dict

    cost = fit_cost_model(profile_from_dict(gpu_like_profile(), "profile"))
    # chunks of 128 cost the whole prefill plus one forward's fixed part per extra chunk
    chunks = sum(chunk_prefill_s(cost, done, 128) for done in range(0, 2048, 128))
    assert abs(chunks - (cost.prefill_s(2048) + 15 * cost.prefill_s(0))) < 1e-9
    whole_gap, whole_ttft, _ = _joining(None)
    chunked_gap, chunked_ttft, sim = _joining(128)
    verify = cost.verify_s(1, 100, 2)
    assert whole_gap > cost.prefill_s(2048)  # the decoding rows waited for the whole prompt
    assert chunked_gap < chunk_prefill_s(cost, 1920, 128) + 2 * verify  # at most a chunk and a step
    assert chunked_ttft > whole_ttft  # the newcomer waited more steps for its first token
    assert sim.replicas[0].joining is None and not sim.replicas[0].queue


def test_a_bad_prefill_chunk_is_refused_by_field():
    import pytest

    assert scenario_from_dict(scenario_dict(replicas={"mode": "batching", "prefill_chunk": 64})).replicas.prefill_chunk == 64
    with pytest.raises(ValueError, match="replicas.prefill_chunk applies to mode batching"):
        scenario_from_dict(scenario_dict(replicas={"mode": "serial", "prefill_chunk": 64}))
    for bad in (0, -5, 2.5, "128", True):
        with pytest.raises(ValueError, match="replicas.prefill_chunk"):
            scenario_from_dict(scenario_dict(replicas={"mode": "batching", "prefill_chunk": bad}))


def test_requests_whose_prefill_costs_nothing_still_join():
    """A cost model may price a prefill at 0 s: the admitted requests decode all the same."""
    from simulator_testkit import FixedCost

    class FreePrefill(FixedCost):
        def prefill_s(self, prompt_tokens):
            return 0.0

    class Ends(_Steps):
        ended = arrived = 0

        def on_request_arrival(self, request, now):
            self.arrived += 1

        def on_request_completion(self, request, now):
            self.ended += 1

    env, ends = simpy.Environment(), Ends()
    sim = build_simulation(env, _scenario("static:ngram:4", 4, rate=20.0), cost=FreePrefill(), extra_hooks=[ends])
    env.run()
    assert ends.arrived > 5 and ends.ended == ends.arrived  # every request decoded to its end
    assert sim.replicas[0].in_service == 0 and not sim.replicas[0].queue


def test_rows_left_with_nothing_to_verify_bound_the_others_drafts_as_in_the_engine():
    from policies.batch_cap import BatchDraftCap

    class Eight(BatchDraftCap):
        def cost(self, rows, width, context=0.0):  # any multi-token row makes the step half as dear again
            return 0.01 * rows * (1 if width == 1 else 1.5)

    class NoCredit(Eight):  # every row held to the bound step by step
        def credits(self, width, emitted, context=0.0):
            return None

    def iterations(slowdown, cap=NoCredit):
        env = simpy.Environment()
        sim = build_simulation(env, _scenario("adaptive", 8, rate=200.0))
        replica = sim.replicas[0]
        replica.draft_cap = cap(plain_slowdown=slowdown)
        steps = _Steps()
        steps.outcomes = {}
        steps.on_step = lambda outcome, batch: steps.outcomes.setdefault(outcome.timestamp, []).append(outcome.proposed)
        replica.hooks = steps
        env.run()
        return [proposed for proposed in steps.outcomes.values() if len(proposed) > 1]

    mixed = [p for p in iterations(None) if 0 in p and max(p) > 0]
    assert mixed  # unbounded, a row verifies nothing while others verify 8
    bounded = iterations(0.05)
    assert not [p for p in bounded if 0 in p and max(p) > 0]  # bounded: never both in one iteration
    assert [p for p in bounded if min(p) > 0]  # and rows that all verify keep their drafts
    # with credits (the default), a row whose earlier drafts put it ahead of plain decoding may
    # verify nothing beside others' drafts, as the engine's rows may; never more often than unbounded
    credited = [p for p in iterations(0.05, Eight) if 0 in p and max(p) > 0]
    assert 0 < len(credited) <= len(mixed)


def test_the_replica_runs_the_servers_plain_slowdown_bound():
    import pytest

    from policies.batch_cap import BatchDraftCap

    def cap_of(replicas):
        scenario = scenario_from_dict(scenario_dict(policy="adaptive", replicas={"mode": "batching", **replicas}))
        return build_simulation(simpy.Environment(), scenario).replicas[0].draft_cap

    assert cap_of({}).plain_slowdown == BatchDraftCap.plain_slowdown  # the server's default
    assert cap_of({"plain_slowdown": 0.3}).plain_slowdown == 0.3
    assert cap_of({"plain_slowdown": 0}).plain_slowdown == 0.0
    assert cap_of({"plain_slowdown": "off"}).plain_slowdown is None
    with pytest.raises(ValueError, match="replicas.plain_slowdown applies to mode batching"):
        scenario_from_dict(scenario_dict(replicas={"mode": "serial", "plain_slowdown": 0.1}))
    for bad in (-0.1, float("nan"), float("inf"), "0.1", True, None):
        with pytest.raises(ValueError, match="replicas.plain_slowdown"):
            scenario_from_dict(scenario_dict(replicas={"mode": "batching", "plain_slowdown": bad}))


def test_the_replica_runs_the_servers_batch_objective():
    import pytest

    from policies.batch_cap import BatchDraftCap

    def cap_of(replicas):
        scenario = scenario_from_dict(scenario_dict(policy="adaptive", replicas={"mode": "batching", **replicas}))
        return build_simulation(simpy.Environment(), scenario).replicas[0].draft_cap

    assert cap_of({}).objective == BatchDraftCap.objective  # the server's default
    assert cap_of({"batch_objective": "power"}).objective == "power"
    with pytest.raises(ValueError, match="replicas.batch_objective"):
        scenario_from_dict(scenario_dict(replicas={"mode": "batching", "batch_objective": "latency"}))
    with pytest.raises(ValueError, match="replicas.batch_objective applies to mode batching"):
        scenario_from_dict(scenario_dict(replicas={"mode": "serial", "batch_objective": "power"}))
    assert cap_of({}).cut == BatchDraftCap.cut and cap_of({"batch_cut": "common"}).cut == "common"
    with pytest.raises(ValueError, match="replicas.batch_cut"):
        scenario_from_dict(scenario_dict(replicas={"mode": "batching", "batch_cut": "each"}))
    with pytest.raises(ValueError, match="replicas.batch_cut applies to mode batching"):
        scenario_from_dict(scenario_dict(replicas={"mode": "serial", "batch_cut": "common"}))


def test_the_replicas_cap_learns_a_servers_forwards_after_its_warm_start():
    """``replicas.cap_steps``: the forwards a server's cap learned from after its --profile; the
    replica's cap learns them too, in order, and then prices as a cap that observed them does."""
    import re

    import pytest

    from policies.batch_cap import BatchDraftCap

    def cap_of(replicas):
        scenario = scenario_from_dict(scenario_dict(profile=gpu_like_profile(), policy="adaptive",
                                                    replicas={"mode": "batching", **replicas}))
        return build_simulation(simpy.Environment(), scenario).replicas[0]

    steps = [[4, 1, 0.2, 100], [4, 5.5, 0.9, 100]] * 30  # a machine far slower than the profile, drafts the more so
    replica, cold = cap_of({"cap_steps": steps}), cap_of({})
    same = BatchDraftCap()
    same.warm(cold.priced_shapes())
    for step in steps:
        same.observe(*step)
    assert replica.draft_cap.cost(4, 5, 100) == pytest.approx(same.cost(4, 5, 100))
    assert replica.draft_cap.cost(4, 1, 100) == pytest.approx(same.cost(4, 1, 100))
    assert replica.draft_cap.cost(4, 5, 100) > 2 * cold.draft_cap.cost(4, 5, 100)
    for bad, where in (([[4, 1, 0.2]], "cap_steps[0]"), ([[0, 1, 0.2, 100]], "cap_steps[0] rows"),
                       ([[4, 0.5, 0.2, 100]], "cap_steps[0] width"), ([[4, 1, 0, 100]], "cap_steps[0] seconds"),
                       ([[4, 1, float("inf"), 100]], "cap_steps[0] seconds"), ([[4, float("nan"), 0.2, 100]],
                       "cap_steps[0] width"), ([[4, 1, 0.2, float("inf")]], "cap_steps[0] slots"),
                       ("[4, 1]", "replicas.cap_steps")):
        with pytest.raises(ValueError, match=re.escape(where if where.startswith("replicas") else f"replicas.{where}")):
            scenario_from_dict(scenario_dict(replicas={"mode": "batching", "cap_steps": bad}))
    with pytest.raises(ValueError, match="replicas.cap_steps applies to mode batching"):
        scenario_from_dict(scenario_dict(replicas={"mode": "serial", "cap_steps": steps}))


def test_the_replicas_cut_starts_from_its_own_prices_as_a_running_servers_has_learned_its_machines():
    from simulator.cost_model import forward_verify_s

    replica = build_simulation(simpy.Environment(), _scenario("adaptive", 8)).replicas[0]
    cap = replica.draft_cap
    for rows, widths, context in ((1, [1], 64), (4, [1] * 4, 256), (8, [9] + [1] * 7, 1024), (2, [5, 5], 256)):
        priced = forward_verify_s(replica.cost, widths, [context] * rows, context)
        assert cap.cost(rows, replica.scored(widths) / rows, context) == pytest.approx(priced, rel=0.15)
    assert build_simulation(simpy.Environment(), _scenario("adaptive", 8, draft_cap=False)).replicas[0].draft_cap is None


def test_prefill_rides_is_a_batching_flag_refused_by_name_elsewhere_or_when_not_a_bool():
    import pytest

    on = scenario_from_dict(scenario_dict(replicas={"mode": "batching"}))
    off = scenario_from_dict(scenario_dict(replicas={"mode": "batching", "prefill_rides": False}))
    assert on.replicas.prefill_rides and not off.replicas.prefill_rides  # riding is the engine's default
    with pytest.raises(ValueError, match="replicas.prefill_rides applies to mode batching"):
        scenario_from_dict(scenario_dict(replicas={"mode": "serial", "prefill_rides": True}))
    with pytest.raises(ValueError, match="replicas.prefill_rides"):
        scenario_from_dict(scenario_dict(replicas={"mode": "batching", "prefill_rides": "yes"}))


def test_a_riding_prompt_pays_what_its_tokens_add_not_a_forwards_fixed_part():
    from simulator.batching import chunk_prefill_s
    from simulator.cost_model import fit_cost_model
    from simulator.profile import profile_from_dict

    cost = fit_cost_model(profile_from_dict(gpu_like_profile(), "profile"))
    assert chunk_prefill_s(cost, 0, 64, rides=True) == cost.prefill_s(64) - cost.prefill_s(0)
    assert chunk_prefill_s(cost, 128, 64, rides=True) == cost.prefill_s(192) - cost.prefill_s(128)
    assert chunk_prefill_s(cost, 128, 64) == chunk_prefill_s(cost, 128, 64, rides=True) + cost.prefill_s(0)
