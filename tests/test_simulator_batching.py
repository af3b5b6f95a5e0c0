"""The simulator's batching replica runs the batched engine's protocol: a learning controller serves
one sequence at a time (concurrent ones get controllers of their own), and the engine's
``BatchDraftCap`` caps learning sequences' drafts as the batch fills, from measured costs."""

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
        policy = lease(key)
        # never one already serving a running sequence
        assert sum(id(policy) == i for i in replica._busy) == 1
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
    assert sim.replicas[0]._pools == {} and sim.replicas[0].draft_cap.measured() == {}


def test_the_cap_shrinks_drafts_where_the_full_batch_cannot_afford_them():
    """At 64 sequences on the roofline profile a verify of 5 tokens a row costs several times one of
    one token: the cap learns to draft less than the uncapped controllers and makes more tokens/s."""
    capped = simulate(_scenario("adaptive", 64), with_timeseries=False).summary
    uncapped = simulate(_scenario("adaptive", 64, draft_cap=False), with_timeseries=False).summary
    env = simpy.Environment()
    sim = build_simulation(env, _scenario("adaptive", 64))
    env.run()
    tried = sim.replicas[0].draft_cap.measured()
    assert len(tried) >= 3  # every cap tried before any is preferred
    assert capped["acceptance"]["tokens_per_step"] < uncapped["acceptance"]["tokens_per_step"]
    assert capped["throughput_tokens_s"] > uncapped["throughput_tokens_s"]
