"""A live server on a tiny random model, bound to 127.0.0.1 on a free port, for the server tests."""

from __future__ import annotations

import contextlib
import time

import httpx

from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters.ngram import NgramDrafter
from adaptive_spec.models import LoadedModel
from adaptive_spec.server import Settings, create_app
from adaptive_spec.server.run import serving_in_thread
from policies.registry import PolicyRegistry
from tiny import NumberTokenizer, tiny_llama

MODEL = "tiny"


class ChatNumberTokenizer(NumberTokenizer):
    """``NumberTokenizer`` with a chat template: each turn is a role marker token, then its content."""

    chat_template = "number-chat"
    ROLES = {"system": 1, "user": 2, "assistant": 3}

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True):
        ids = []
        for m in messages:
            ids += [self.ROLES[m["role"]]] + self(m["content"])["input_ids"]
        return ids + ([self.ROLES["assistant"]] if add_generation_prompt else [])


def tiny_decoder(observers=None, policy="adaptive") -> SpeculativeDecoder:
    model = tiny_llama(seed=3)
    target = LoadedModel(name=MODEL, model=model, tokenizer=ChatNumberTokenizer(model.config.vocab_size))
    return SpeculativeDecoder(target, [NgramDrafter()], policy=PolicyRegistry(policy, ["ngram"]), observers=observers)


class StepCounter:
    """An observer counting decode steps (to see that a cancelled request stops decoding)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.steps = 0
        self.delay_s = delay_s  # slows every step, so a request outlasts a client's patience on any machine

    def on_step(self, request, outcome, events) -> None:
        self.steps += 1
        time.sleep(self.delay_s)


@contextlib.contextmanager
def live_server(decoder, settings: Settings | None = None, timeout_s: float = 30.0, model: str = MODEL):
    """Serve ``decoder`` as ``model`` on 127.0.0.1 (a free port) in a thread; yields the base URL and the app."""
    app = create_app(lambda: decoder, model, settings or Settings())
    with serving_in_thread(app, timeout_s=timeout_s) as url:
        yield url, app


def wait_until(condition, timeout_s: float = 30.0, every_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every_s)
    return condition()


def client(base_url: str, **kwargs) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=60.0, **kwargs)
