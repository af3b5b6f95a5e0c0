"""A live server on a tiny random model, bound to 127.0.0.1 on a free port, for the server tests."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx
import uvicorn

from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters.ngram import NgramDrafter
from adaptive_spec.models import LoadedModel
from adaptive_spec.server import Settings, create_app
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

    def __init__(self) -> None:
        self.steps = 0

    def on_step(self, request, outcome, events) -> None:
        self.steps += 1


@contextlib.contextmanager
def live_server(decoder, settings: Settings | None = None, timeout_s: float = 30.0, model: str = MODEL):
    """Serve ``decoder`` as ``model`` on 127.0.0.1 (a free port) in a thread; yields the base URL and the app."""
    app = create_app(lambda: decoder, model, settings or Settings())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not (server.started and app.state.service.status == "ok"):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)


def wait_until(condition, timeout_s: float = 30.0, every_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every_s)
    return condition()


def client(base_url: str, **kwargs) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=60.0, **kwargs)
