"""Shadow drafting: lookups made while decoding plainly are scored against what decoding produced,
with the match order the controller's gate needs."""

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from policies.adaptive import AdaptiveConfig, AdaptivePolicy
from policies.shadow import ShadowDrafts
from policies.static import StaticPolicy
from tiny import loaded, tiny_llama


class ShadowSpy:
    shadow_k = 4

    def __init__(self) -> None:
        self.calls = []

    def observe_shadow(self, *args) -> None:
        self.calls.append(args)


def test_shadow_drafts_report_how_much_matched_and_the_match_order():
    spy = ShadowSpy()
    shadow = ShadowDrafts([NgramDrafter()], spy)
    context = [1, 2, 3, 4, 5, 9, 1, 2]
    shadow.propose(context)  # [1, 2] matches: the shadow draft is [3, 4, 5, 9]
    context += [3]
    shadow.resolve(context, None)
    assert spy.calls == []  # still agreeing, not yet resolved
    context += [4, 7]
    shadow.resolve(context, None)
    assert spy.calls == [("ngram", 4, 2, 2, False)]  # 2 tokens right after a 2-token match
    shadow.propose([6, 8])  # nothing matches: a speculative step would have gained nothing
    assert spy.calls[-1] == ("ngram", 4, 0)


def test_the_engine_s_shadow_drafts_teach_the_controller_s_match_gate():
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [NgramDrafter()])
    policy = AdaptivePolicy(["ngram"], AdaptiveConfig.from_kwargs(backoff_initial=64, backoff_max=64))
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6]
    decoder.generate(prompt, max_new_tokens=24, policy=StaticPolicy("none", 0))  # costs in the engine
    policy.guard.allowed = False  # speculation measured losing: every step is plain, lookups shadowed
    result = decoder.generate(prompt, max_new_tokens=24, policy=policy)
    assert all(step.k == 0 for step in result.steps)
    gate = policy.draft_gate("ngram")
    assert gate.seen and gate.profiles  # the lookups' mix and per-order acceptance were learned
