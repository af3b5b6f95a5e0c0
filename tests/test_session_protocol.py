"""The step protocol (policies/session.py) is one conversation, whoever drives it: the engine, the
simulator's serial and batching replicas and the offline replay, fed the same scripted step
stream, ask the policy the same things in the same order and report the same steps."""

import simpy

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters.base import Drafter, Proposal
from benchmarks import replay as replay_tool
from policies.base import Policy
from policies.outcome import Action
from policies.session import DecodeSession
from simulator.batching import BatchingReplica
from simulator.drafts import PLAIN_DRAFT, Draft
from simulator.entities import Request, RequestClass
from simulator.lengths import LengthDist
from simulator.policy_factory import PolicyPool
from simulator.replica import SerialReplica
from tiny import loaded, tiny_llama

PROMPTS = [[1, 2, 3, 4, 5], [7, 7, 8, 9]]
MAX_NEW_TOKENS = 40
# by position in the output: (tokens the lookup finds, how many of them are right, match order, ambiguous)
PATTERN = [(6, 6, 3, False), (6, 1, 1, True), (0, 0, None, False), (4, 2, 2, False), (6, 0, 1, False),
           (5, 5, 2, False), (3, 1, 1, False), (6, 3, 3, False), (2, 2, 1, False), (6, 4, 2, False), (1, 0, 1, False)]


def script(position: int) -> tuple[int, int, int | None, bool]:
    return PATTERN[position % len(PATTERN)]


class ScriptedGate:
    """A match gate with a fixed rule: nothing after an ambiguous match, two tokens after a 1-token
    match, everything after a longer one."""

    max_k = 6

    def __init__(self, log: list) -> None:
        self.log = log

    def keep(self, order, available, ambiguous=False):
        kept = 0 if ambiguous else (min(2, available) if order == 1 else available)
        self.log.append(("keep", order, available, ambiguous, kept))
        return kept

    def learn_skipped(self, order, first_matched, ambiguous=False):
        self.log.append(("skipped", order, first_matched, ambiguous))


class ScriptedPolicy(Policy):
    """Decides from what it observed only (never from timings), and logs every hook it is called by."""

    name = "scripted"

    def __init__(self) -> None:
        self.log: list = []
        self.gate = ScriptedGate(self.log)
        self.last = None

    def decide(self) -> Action:
        last = self.last
        if last is None or last.proposed and last.num_accepted == last.proposed:
            return Action("ngram", 4)
        if last.k > 0 and last.proposed == 0:
            return Action("none", 0)  # after a miss or a cut draft, one plain step
        return Action("ngram", 2)

    def observe(self, outcome) -> None:
        self.last = outcome
        self.log.append(("observe", outcome.decided_drafter, outcome.decided_k, outcome.drafter, outcome.k,
                         outcome.proposed, outcome.num_accepted, outcome.emitted, outcome.match_order))

    def start_request(self) -> None:
        self.log.append(("start",))

    def warm_start(self, outcomes) -> bool:
        self.log.append(("warm_start",))
        return False

    def draft_gate(self, drafter):
        return self.gate if drafter == "ngram" else None


class ScriptedDrafter(Drafter):
    """The engine's side of the script: proposes the reference output's next tokens, right for the
    script's count and wrong after it, so that greedy verification accepts exactly that many."""

    name = "ngram"
    reports_match_order = True

    def __init__(self, references: dict[tuple[int, ...], list[int]], vocab: int) -> None:
        self.references, self.vocab = references, vocab

    def propose(self, context, k, config, generator, early_stop=None) -> Proposal:
        for prompt, output in self.references.items():
            if tuple(context[: len(prompt)]) == prompt:
                position = len(context) - len(prompt)
                available, right, order, ambiguous = script(position)
                truth = output[position : position + min(available, k)]
                tokens = [t if i < right else (t + 1) % self.vocab for i, t in enumerate(truth)]
                return Proposal(tokens, match_order=order if tokens else None, match_ambiguous=ambiguous)
        raise AssertionError(f"context {context[:8]} starts with no scripted prompt")

    def lookup(self, context, k):
        proposal = self.propose(context, k, None, None)
        return proposal.tokens, proposal.match_order, proposal.match_ambiguous


class ScriptedDrafts:
    """The simulator's side of the script (``simulator.drafts.ProfileDrafts``' interface)."""

    def gated(self, klass):
        return ("ngram",)

    def draw(self, klass, session: DecodeSession, plan, context=()) -> Draft:
        if plan.k == 0:
            return PLAIN_DRAFT
        available, right, order, ambiguous = script(plan.generated)
        available = min(available, plan.k)
        if available == 0:
            return Draft(0, 0, looked_up=0)
        kept = session.cut(plan, available, order, ambiguous)
        if kept == 0:
            return Draft(0, 0, order, ambiguous, right > 0, plan.k)
        return Draft(kept, min(kept, right), order, ambiguous, False, plan.k)


class UnitCost:
    def prefill_s(self, prompt_tokens):
        return 0.1

    def verify_s(self, tokens, context_len, batch=1, batch_tokens=None, batch_context=None):
        return 0.01

    def draft_s(self, drafter, k, batch=1, batch_draft_tokens=None):
        return 0.001


class NoHooks:
    def __getattr__(self, name):
        return lambda *args: None


def engine_log() -> tuple[list, dict]:
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)))
    references = {}
    for prompt in PROMPTS:
        plain = decoder.generate(prompt, max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True)
        references[tuple(prompt)] = plain.token_ids
    decoder.add_drafter(ScriptedDrafter(references, decoder.target.vocab_size))
    policy = ScriptedPolicy()
    for prompt in PROMPTS:
        result = decoder.generate(prompt, max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True, policy=policy)
        assert result.token_ids == references[tuple(prompt)]  # lossless under the script too
    return policy.log, references


def simulator_log(replica_class) -> list:
    env = simpy.Environment()
    policy = ScriptedPolicy()
    klass = RequestClass("scripted", LengthDist("fixed", len(PROMPTS[0])), LengthDist("fixed", MAX_NEW_TOKENS))
    pool = PolicyPool(lambda seed, key="": policy, "replica", seed=0)
    replica = replica_class(env, 0, UnitCost(), {"scripted": klass}, pool, NoHooks(), 0, drafts=ScriptedDrafts())
    for i, prompt in enumerate(PROMPTS):  # one after the other: the batch never holds two
        env.process(_arrive(env, replica, Request(i, "scripted", len(prompt), MAX_NEW_TOKENS, arrival_s=10.0 * i)))
    env.run(until=100.0)
    return policy.log


def _arrive(env, replica, request):
    yield env.timeout(request.arrival_s)
    replica.submit(request)


def replay_log(references: dict) -> list:
    policy = ScriptedPolicy()
    requests = [(str(i), "scripted", list(prompt), output, 0.0) for i, (prompt, output) in enumerate(references.items())]
    replay_tool.replay(policy, requests, [0.01] * 8, MAX_NEW_TOKENS, drafter=ScriptedDrafter(references, 64))
    return policy.log


def test_engine_replicas_and_replay_hold_the_same_conversation_with_the_policy():
    engine, references = engine_log()
    # the script exercises every branch: full, partial and no acceptance, misses, gate cuts, plain steps
    kinds = {entry[0] for entry in engine}
    assert {"start", "warm_start", "keep", "skipped", "observe"} <= kinds
    observed = [entry for entry in engine if entry[0] == "observe"]
    assert any(o[5] == 0 and o[4] > 0 for o in observed)  # a lookup that found nothing
    assert any(o[1] == "none" for o in observed) and any(0 < o[6] < o[5] for o in observed)
    assert any(o[2] != o[4] for o in observed)  # the gate or the budget changed k: decided != done
    serial = simulator_log(SerialReplica)
    batching = simulator_log(BatchingReplica)
    replayed = replay_log(references)
    # the engine and the replay hand the policy the engine's step costs; the replicas the fitted ones
    assert [e for e in serial if e[0] != "warm_start"] == [e for e in engine if e[0] != "warm_start"]
    assert batching == serial
    assert replayed == engine
