"""Small scenarios, profiles and cost models shared by the simulator tests (no fixtures here)."""

from __future__ import annotations

import copy


def gpu_like_profile() -> dict:
    """A roofline-shaped profile: flat (memory-bound) up to 256 tokens per forward, then 80 us/token."""
    verify = []
    for batch in (1, 4, 16, 64, 128, 256):
        for tokens in (1, 3, 5):
            for context in (256, 1024):
                total = batch * tokens
                seconds = 0.012 + 1e-5 * total + 8e-5 * max(0, total - 256) + 2e-8 * batch * context
                verify.append({"tokens": tokens, "context_len": context, "batch": batch, "seconds": seconds})
    return {
        "format": "adaptive-spec-profile/1",
        "metadata": {"illustrative": True},
        "prefill": [{"prompt_tokens": n, "seconds": 0.01 + 5e-5 * n} for n in (32, 128, 512, 2048)],
        "verify": verify,
        "draft": {"ngram": {"per_token_s": 5e-6, "per_call_s": 5e-5, "batched": False}},
        "acceptance": {
            "copy": {"ngram": {"per_position": [0.9, 0.85, 0.8, 0.75], "hit_rate": 1.0}},
            "chat": {"ngram": {"rate": 0.1, "hit_rate": 0.3}},
        },
    }


def cpu_like_profile() -> dict:
    """Batch-1 only, shaped after this project's CPU: 35 ms per 1-token forward, ~70 ms for 2-16."""
    verify = [{"tokens": t, "context_len": c, "seconds": (0.035 if t == 1 else 0.066 + 0.0006 * t) + 2e-6 * c}
              for t in (1, 2, 3, 5, 8, 16) for c in (64, 512)]
    profile = gpu_like_profile()
    profile.update(verify=verify, prefill=[{"prompt_tokens": n, "seconds": 0.002 * n + 0.01} for n in (16, 64, 256)])
    return profile


def scenario_dict(**overrides) -> dict:
    """A small two-class scenario (copy-heavy -> chat shift at 300 s) with an inline profile."""
    raw = {
        "name": "test",
        "seed": 3,
        "profile": cpu_like_profile(),
        "classes": {
            "copy": {"prompt_tokens": {"dist": "uniform", "low": 50, "high": 150}, "output_tokens": 40},
            "chat": {"prompt_tokens": {"dist": "uniform", "low": 20, "high": 60}, "output_tokens": 40},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate": 0.2},
            "mix": {"copy": 1.0},
            "duration_s": 600,
            "shifts": [{"at_s": 300, "mix": {"chat": 1.0}}],
        },
        "replicas": {"count": 1, "mode": "serial"},
        "policy": "static:ngram:4",
        "slo": {"e2e_s": 10.0, "percentile": 95},
        "metrics": {"bin_s": 60},
    }
    raw = copy.deepcopy(raw)
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split("__")
        for name in parents:
            node = node[name]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return raw


DELETE = object()  # scenario_dict(workload__mix=DELETE) removes a field


class FixedCost:
    """Constant costs, for event-order tests: prefill 1 s, a forward 0.5 s, drafting 10 ms a token."""

    def prefill_s(self, prompt_tokens):
        return 1.0

    def verify_s(self, tokens, context_len, batch=1, batch_tokens=None, batch_context=None, pairs=None):
        return 0.5

    def draft_s(self, drafter, k, batch=1, batch_draft_tokens=None):
        return 0.01 * k


class ExponentialService(FixedCost):
    """Prefill time ~ Exp(mean): with one-token outputs a replica is an M/M/1 server."""

    def __init__(self, mean_s: float, seed: int) -> None:
        import random

        self.mean_s, self.rng = mean_s, random.Random(seed)

    def prefill_s(self, prompt_tokens):
        return self.rng.expovariate(1.0 / self.mean_s)


class EventLog:
    """Hooks that append (time, event, request id) to a list, to assert the order of events."""

    def __init__(self, log: list) -> None:
        self.log = log

    def on_request_arrival(self, request, now):
        self.log.append((round(now, 6), "arrive", request.id))

    def on_request_start(self, request, now):
        self.log.append((round(now, 6), "start", request.id))

    def on_first_token(self, request, now):
        self.log.append((round(now, 6), "first_token", request.id))

    def on_step(self, outcome, batch_size):
        self.log.append((round(outcome.timestamp, 6), "step", batch_size))

    def on_request_completion(self, request, now):
        self.log.append((round(now, 6), "finish", request.id))
