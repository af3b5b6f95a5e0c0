"""The interface every controller implements, with a default for every optional hook.

A policy is asked what to do before each step (``decide``) and told what happened after it
(``observe``). Everything else is optional, and this class says what "not implemented" means, so
that callers never probe for methods by name:

==================  =========================================================  ==============
hook                called by the step protocol (``policies.session``)         default
==================  =========================================================  ==============
``decide``          before each step: which drafter, how many drafts            (required)
``observe``         after each step, with its ``StepOutcome``                   learn nothing
``start_request``   once before a request's first step                         nothing
``warm_start``      once per request, with the engine's remembered step costs  not taken
``draft_gate``      per step of a drafter that reports match orders            no gate
``early_stop``      per step of a drafter with probabilities and ``k > 1``     no early stop
``observe_shadow``  a draft proposed while plain, resolved against the output  ignored
``shadow_k``        how many tokens a shadow draft proposes (0: no shadows)     0
``drain_events``    after each step, for telemetry                              no events
``k_for``           a request forces a drafter without a ``k``                  None (unknown)
==================  =========================================================  ==============

The engine (``adaptive_spec/decoder.py``), the simulator's replicas and the offline replay all
drive these hooks through one ``DecodeSession`` per request, so they hold the same conversation.

``PolicyWrapper`` forwards every hook to an inner policy; a wrapper overrides only what it
changes (``OverridePolicy`` here, ``policies.with_early_stop.WithEarlyStop``).
"""

from __future__ import annotations

from collections.abc import Iterable

from policies.outcome import Action, StepOutcome


class Policy:
    """Base class of every controller; see the module docstring for the contract."""

    name = "policy"
    # True when no decision depends on what was observed, so one instance may serve several requests
    # at once (a batch's rows); a learning controller serves one request at a time
    stateless = False

    def decide(self) -> Action:
        """Return the action for the next step. Reads state only: twice in a row, the same action."""
        raise NotImplementedError

    def observe(self, outcome: StepOutcome) -> None:
        """Learn from the step just taken (also steps this policy did not choose: overrides)."""

    def start_request(self) -> None:
        """A new request of this policy's traffic begins."""

    def warm_start(self, outcomes: Iterable[StepOutcome]) -> bool:
        """Seed costs from steps measured before this policy existed; return whether it took them."""
        return False

    def draft_gate(self, drafter: str):
        """A ``MatchGate`` (``keep``, ``learn_skipped``, ``max_k``) cutting ``drafter``'s drafts, or None."""
        return None

    def early_stop(self, drafter: str):
        """An early-stop object that the drafter's loop consults token by token, or None."""
        return None

    def observe_shadow(self, drafter: str, k: int, num_accepted: int, match_order: int | None = None,
                       match_ambiguous: bool = False) -> None:
        """A draft of ``k`` tokens proposed while decoding plainly, ``num_accepted`` of which plain
        decoding went on to produce (``match_order`` None: the lookup found nothing)."""

    @property
    def shadow_k(self) -> int:
        """Tokens per shadow draft; 0 asks the caller not to run shadow drafts at all."""
        return 0

    def drain_events(self) -> list:
        """Events (e.g. ``AcceptanceCollapse``) since the last call, oldest first; emptied."""
        return []

    def k_for(self, drafter: str) -> int | None:
        """The draft length this policy would use with ``drafter``; None when it has no opinion."""
        return None

    def expected_tokens(self, drafter: str, k: int) -> list[float] | None:
        """Expected tokens of a step verifying ``0..k`` tokens of a ``drafter`` draft, by this
        policy's acceptance estimates (a batch weighs a row's draft by it); None: it has none."""
        return None


class PolicyWrapper(Policy):
    """Forwards every hook to ``inner``; subclasses override the ones they change."""

    def __init__(self, inner: Policy) -> None:
        if not isinstance(inner, Policy):
            raise TypeError(f"inner must be a policies.base.Policy, got {type(inner).__name__}")
        self.inner = inner
        self.name = inner.name

    def decide(self) -> Action:
        return self.inner.decide()

    def observe(self, outcome: StepOutcome) -> None:
        self.inner.observe(outcome)

    def start_request(self) -> None:
        self.inner.start_request()

    def warm_start(self, outcomes: Iterable[StepOutcome]) -> bool:
        return self.inner.warm_start(outcomes)

    def draft_gate(self, drafter: str):
        return self.inner.draft_gate(drafter)

    def early_stop(self, drafter: str):
        return self.inner.early_stop(drafter)

    def observe_shadow(self, drafter: str, k: int, num_accepted: int, match_order: int | None = None,
                       match_ambiguous: bool = False) -> None:
        self.inner.observe_shadow(drafter, k, num_accepted, match_order, match_ambiguous)

    @property
    def shadow_k(self) -> int:
        return self.inner.shadow_k

    def drain_events(self) -> list:
        return self.inner.drain_events()

    def k_for(self, drafter: str) -> int | None:
        return self.inner.k_for(drafter)

    def expected_tokens(self, drafter: str, k: int) -> list[float] | None:
        return self.inner.expected_tokens(drafter, k)


class OverridePolicy(PolicyWrapper):
    """A request-level override around a shared policy: the action is forced, learning goes on.

    Outcomes (and shadow drafts) reach the wrapped policy, so a request forced to plain decoding
    still refreshes the key's plain-speed estimate, and one forced to a drafter teaches its
    acceptance. The match gate is not applied: a forced ``k`` is the caller's, not the gate's.
    """

    def __init__(self, inner: Policy, action: Action) -> None:
        super().__init__(inner)
        self.action = action
        self.name = f"override:{inner.name}"

    def decide(self) -> Action:
        return self.action

    def draft_gate(self, drafter: str):
        return None
