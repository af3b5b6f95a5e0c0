"""Recorded token streams: the simulator runs the engine's prompt lookup on a class's prompt and
greedy answer instead of drawing acceptance, so a fixed config's steps are the engine's, step for
step; and a request's budget (``max_tokens``) lets the last drafts run past an answer that ended
sooner, as they do in the engine."""

import json

import pytest
import simpy

from adaptive_spec.calibrate import measure_acceptance, record_streams
from adaptive_spec.config import GenerationConfig
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.prompts import Prompt
from policies.lookup import PromptLookup
from policies.static import StaticPolicy
from simulator import build_simulation, scenario_from_dict
from simulator.profile import TokenStream, profile_from_dict
from simulator.replay import requests_from_rows
from simulator_testkit import cpu_like_profile
from tiny import loaded, one_thread, tiny_llama

# the tiny model's tokenizer reads <i> as token i: a repeating prompt gives the lookup matches
LOOP = "".join(f"<{i}>" for i in [5, 6, 7, 8, 9, 10] * 5)
COPIED = list(range(100, 130))  # a prompt, and an answer that copies its first 12 tokens then ends
ANSWER = COPIED[:12]


def _profile(streams: dict, acceptance: dict | None = None) -> dict:
    raw = cpu_like_profile()
    # match kinds, as calibrate writes them: a request its stream does not cover is drawn through the gate
    lookup = {"rate": 0.5, "hit_rate": 1.0, "matches": [{"order": 1, "share": 0.9, "per_position": [0.5]}]}
    raw["acceptance"] = acceptance or {name: {"ngram": lookup} for name in streams}
    raw["streams"] = streams
    return raw


def _steps(profile: dict, klass: str, prompt_tokens: int, output_tokens: int, policy: str,
           max_tokens: int = 0) -> list[tuple[int, int]]:
    """(proposed, accepted) of every decode step of one replayed request."""
    row = {"arrival_s": 0.0, "class": klass, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens}
    scenario = scenario_from_dict({
        "name": "streams", "seed": 0, "profile": profile, "policy": policy,
        "classes": {klass: {"prompt_tokens": prompt_tokens, "output_tokens": output_tokens}},
        "workload": {"replay": [{**row, **({"max_tokens": max_tokens} if max_tokens else {})}]},
    })
    env = simpy.Environment()
    sim = build_simulation(env, scenario)
    steps = []
    inner = sim.metrics.on_step
    sim.metrics.on_step = lambda outcome, batch=1: (steps.append((outcome.proposed, outcome.num_accepted)),
                                                    inner(outcome, batch))
    env.run()
    return steps


def test_a_profile_reads_streams_and_refuses_bad_ones():
    profile = profile_from_dict(_profile({"copy": {"prompt": COPIED, "output": ANSWER}}), "p.json")
    assert profile.streams == {"copy": TokenStream(tuple(COPIED), tuple(ANSWER))}
    for bad, says in [({"prompt": COPIED}, "exactly prompt and output"),
                      ({"prompt": [], "output": ANSWER}, r"streams\.copy\.prompt must be a non-empty list"),
                      ({"prompt": COPIED, "output": [1, -2]}, r"streams\.copy\.output must be a non-empty list"),
                      ({"prompt": COPIED, "output": [True]}, r"streams\.copy\.output")]:
        with pytest.raises(ValueError, match=says):
            profile_from_dict(_profile({"copy": bad}), "p.json")


def test_a_copy_is_drafted_and_accepted_exactly_where_its_tokens_say():
    # static k = 8 on an answer that copies the prompt's first 12 tokens: the first token comes from
    # prefill, then the lookup finds the copy and every drafted token matches
    steps = _steps(_profile({"copy": {"prompt": COPIED, "output": ANSWER}}), "copy", len(COPIED), len(ANSWER),
                   "static:ngram:8")
    assert steps == [(8, 8), (1, 1)]  # 1 + 9 + 2 tokens: the budget (the answer's length) cuts the second to 1
    # the same answer sent with a budget of 64: the second draft runs past the answer's end, as the
    # engine's does when an answer stops at its end of sequence; only what the answer holds is accepted
    assert _steps(_profile({"copy": {"prompt": COPIED, "output": ANSWER}}), "copy", len(COPIED), len(ANSWER),
                  "static:ngram:8", max_tokens=64) == [(8, 8), (8, 2)]


def test_an_answer_longer_than_its_stream_is_drawn_as_before():
    # the stream holds 12 tokens, the request made 20: lookups cannot run past what was recorded,
    # so the class's acceptance (hit rate 1, rate 0.5) is drawn instead
    steps = _steps(_profile({"copy": {"prompt": COPIED, "output": ANSWER}}), "copy", len(COPIED), 20, "static:ngram:8")
    assert sum(p for p, _ in steps) > 0 and any(a < p for p, a in steps)
    assert steps[:2] != [(8, 8), (1, 1)]


def test_a_trace_row_budget_below_its_output_is_refused():
    with pytest.raises(ValueError, match=r"max_tokens must be an integer >= output_tokens \(12\)"):
        requests_from_rows([{"arrival_s": 0, "class": "c", "prompt_tokens": 5, "output_tokens": 12, "max_tokens": 8}])
    assert requests_from_rows([{"arrival_s": 0, "class": "c", "prompt_tokens": 5, "output_tokens": 12,
                                "max_tokens": 64}])[0].max_tokens == 64


@pytest.fixture(scope="module")
def decoder():
    with one_thread():
        yield SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()])


@pytest.mark.parametrize("k", [2, 4, 8])
def test_the_simulator_steps_as_the_engine_steps_on_the_engine_s_own_tokens(decoder, k):
    """A fixed config decides nothing from timings: on the recorded stream, every step's draft and
    acceptance must be the engine's exactly."""
    prompt = Prompt("loop", LOOP, kind="loop")
    streams = record_streams(decoder, [prompt], max_new_tokens=40)
    result = decoder.generate(LOOP, GenerationConfig(max_new_tokens=40), policy=StaticPolicy("ngram", k))
    engine = [(s.proposed, s.num_accepted) for s in result.steps]
    assert streams["loop"]["output"] == list(result.token_ids)  # greedy: the same answer either way
    assert sum(a for _, a in engine) > 0  # the loop gives the lookup something to get right
    stream = streams["loop"]
    simulated = _steps(_profile(streams), "loop", len(stream["prompt"]), len(stream["output"]),
                       f"static:ngram:{k}", max_tokens=40)
    assert simulated == engine


def test_calibrate_records_each_prompt_s_stream_from_its_acceptance_runs(decoder):
    prompts = [Prompt("loop", LOOP, kind="loops"), Prompt("other", LOOP + "<5>", kind="loops")]
    streams: dict = {}
    measure_acceptance(decoder, prompts, max_new_tokens=24, per_prompt=True, streams=streams)
    assert streams == record_streams(decoder, prompts, max_new_tokens=24)
    json.dumps(streams)  # the profile is JSON


def test_prompt_lookup_is_the_drafter_s_own():
    import numpy as np

    drafter = NgramDrafter()
    for context in ([1, 2, 3, 4, 9, 1, 2], [5, 1, 5, 2, 5], [1, 2, 3], [7]):
        proposal = drafter.propose(np.array(context), 3, GenerationConfig(), None)
        assert PromptLookup().lookup(context, 3) == (proposal.tokens, proposal.match_order, proposal.match_ambiguous)


@pytest.mark.real_model
def test_on_smollm2_copying_a_paragraph_the_simulator_steps_as_the_engine_steps():
    from adaptive_spec import load_model
    from adaptive_spec.prompts import load_prompts

    prompt = next(p for p in load_prompts("benchmarks/shift.jsonl") if p.id == "copy-03")
    smollm2 = SpeculativeDecoder(load_model("smollm2"), [NgramDrafter()])
    streams = record_streams(smollm2, [prompt], max_new_tokens=64)
    result = smollm2.generate(prompt.prompt, GenerationConfig(max_new_tokens=64), policy=StaticPolicy("ngram", 8))
    stream = streams[prompt.id]
    # the engine's last draft may run past the end-of-sequence token and be accepted there too; the
    # recorded answer ends with that token, so the simulator counts what the answer holds
    engine, generated = [], 1
    for step in result.steps:
        engine.append((step.proposed, min(step.num_accepted, len(stream["output"]) - generated)))
        generated += step.emitted
    assert sum(p for p, _ in engine) > sum(a for _, a in engine) > 0  # some drafts right, some wrong
    assert _steps(_profile(streams), prompt.id, len(stream["prompt"]), len(stream["output"]), "static:ngram:8",
                  max_tokens=64) == engine


def test_shadow_drafts_run_the_lookup_on_the_tokens_and_draw_the_other_drafters():
    from simulator.drafts import ProfileDrafts
    from simulator.entities import Request

    lookup = {"rate": 0.5, "hit_rate": 1.0, "matches": [{"order": 1, "share": 0.9, "per_position": [0.5]}]}
    profile = _profile({"copy": {"prompt": COPIED, "output": ANSWER}}, {"copy": {"ngram": lookup, "suffix": lookup}})
    scenario = scenario_from_dict({"name": "s", "profile": profile, "policy": "plain",
                                   "classes": {"copy": {"prompt_tokens": len(COPIED), "output_tokens": len(ANSWER)}},
                                   "workload": {"replay": [{"arrival_s": 0.0, "class": "copy",
                                                            "prompt_tokens": len(COPIED), "output_tokens": 12}]}})

    class Seen:
        shadow_k = 4

        def __init__(self):
            self.calls = []

        def observe_shadow(self, drafter, k, accepted, *kind):
            self.calls.append((drafter, k, accepted))

    drafts, seen = ProfileDrafts(scenario.classes, iter([0.1] * 100).__next__), Seen()
    request = Request(0, "copy", len(COPIED), 12, 0.0, generated=3)
    shadows = drafts.shadows("copy", seen, request)
    shadows.propose(drafts.tokens(request))
    assert [c[0] for c in seen.calls] == ["suffix"]  # drawn at once; the lookup waits for the tokens
    shadows.resolve(drafts.tokens(request, ahead=4), None)
    assert seen.calls[-1] == ("ngram", 4, 4)  # the copy's next four tokens, all right
