"""Continuous batching: many sequences share each target forward.

GPU servers (vLLM, TGI, SGLang) do not serve one request at a time: every iteration runs one
forward over all running sequences, admits waiting requests when a slot frees up (up to
``max_batch``), and retires finished ones - *continuous* (iteration-level) batching (Yu et al.,
Orca, 2022). Speculative decoding changes each iteration from one token per sequence to ``k + 1``
tokens per sequence, so the forward verifies ``sum(k_i + 1)`` tokens.

Whether that pays depends on the regime the cost model was fitted in. At small batch the forward
is memory-bound (weights are read once whatever the token count) and verifying 5 tokens costs
little more than 1: speculation multiplies throughput. At large batch the forward is
compute-bound and its cost grows with every token verified across the batch, so rejected draft
tokens are pure waste and speculation's gain shrinks, then turns into a loss. This module does not
encode that: it passes batch size, tokens and context to the cost model and the effect follows
from the fit (see ``simulator/cost_model.py``).

One iteration::

    1. admit:   move queued requests into free slots; their prefills run first (prefill-priority
                scheduling, as vLLM's default) and give each its first token
    2. decide:  each running sequence asks its policy for (drafter, k)
    3. sample:  proposed and accepted per sequence from its class's acceptance profile
    4. cost:    draft_s (per drafter: batched = longest draft, unbatched = sum) + verify_s(batch,
                widest sequence, tokens across the batch, context across the batch)
    5. advance: one SimPy timeout for the whole iteration
    6. observe: every sequence's policy sees its StepOutcome (sharing the iteration's draft_s and
                verify_s: a policy that measures tokens per second sees the batched cost)
"""

from __future__ import annotations

from policies import PLAIN, StepOutcome
from simulator.replica import Replica


class BatchingReplica(Replica):
    """Iteration-level batching with at most ``max_batch`` running sequences."""

    def __init__(self, *args, max_batch: int = 8, **kwargs) -> None:
        self.max_batch = max_batch  # slots: bounded in practice by KV-cache memory
        super().__init__(*args, **kwargs)

    def run(self):
        env, cost, hooks, rand = self.env, self.cost, self.hooks, self.rand
        running = []  # [request, policy, context_len]
        while True:
            if not running and not self.queue:
                yield from self.wait_for_work()
            admitted = []  # 1
            while self.queue and len(running) + len(admitted) < self.max_batch:
                request = self.queue.popleft()
                self.start(request)
                admitted.append(request)
            if admitted:
                yield env.timeout(sum(cost.prefill_s(r.prompt_tokens) for r in admitted))
                for request in admitted:
                    self.first_token(request)
                    if request.generated >= request.output_tokens:
                        self.finish(request)
                    else:
                        klass = self.classes[request.klass]
                        running.append([request, self.policies.get(klass.key), request.prompt_tokens + 1])
            if not running:
                continue
            plans = []
            drafts: dict[str, list[int]] = {}
            for seq in running:
                request, policy, context = seq
                action = policy.decide()  # 2
                k, drafter = action.k, action.drafter
                if k == 0 or drafter == PLAIN:
                    plans.append((PLAIN, 0, 0, 0))
                    continue
                probs, hit_rate = self.acceptance.get(request.klass, drafter, k)
                proposed = k if hit_rate >= 1.0 or rand() < hit_rate else 0  # 3
                accepted = 0
                while accepted < proposed and rand() < probs[accepted]:
                    accepted += 1
                drafts.setdefault(drafter, []).append(proposed)
                plans.append((drafter, k, proposed, accepted))
            batch = len(running)  # 4
            draft_s = sum(cost.draft_s(d, max(ks), len(ks), sum(ks)) for d, ks in drafts.items())
            widths = [p[2] + 1 for p in plans]
            contexts = sum(seq[2] for seq in running)
            verify_s = cost.verify_s(max(widths), contexts / batch, batch, sum(widths), contexts)
            yield env.timeout(draft_s + verify_s)  # 5
            still_running = []
            for seq, (drafter, k, proposed, accepted) in zip(running, plans):  # 6
                request, policy, context = seq
                emitted = min(accepted + 1, request.output_tokens - request.generated)
                outcome = StepOutcome(drafter, k, proposed, accepted, emitted, draft_s, verify_s, context,
                                      None, self.classes[request.klass].key, env.now)
                policy.observe(outcome)
                hooks.on_step(outcome, batch)
                request.generated += emitted
                request.steps += 1
                request.proposed += proposed
                request.accepted += accepted
                seq[2] = context + emitted
                if request.generated >= request.output_tokens:
                    self.finish(request)
                else:
                    still_running.append(seq)
            running = still_running
