"""The OpenAI-compatible server on a tiny random model, through the official ``openai`` client.

Every server here binds 127.0.0.1 on a free port; request loops are bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import openai
import pytest

from adaptive_spec.config import GenerationConfig
from adaptive_spec.server import Settings
from adaptive_spec.server.batched_worker import BatchedWorker
from adaptive_spec.server.worker import Job
from server_kit import MODEL, StepCounter, client, live_server, tiny_decoder, wait_until
from tiny import one_thread

PROMPTS = ["<5> <9> <3> <5> <9> <3> <5>", "<1> <2> <3> <4> <1> <2>", "<7> <7> <8> <7> <7> <8> <7>"]


# every contract holds for the one-at-a-time worker and for continuous batching alike
BATCHES = [pytest.param(1, id="batch-1"), pytest.param(4, id="batched")]


@pytest.fixture(scope="module", params=BATCHES)
def served(request):
    with one_thread():
        decoder = tiny_decoder()
        with live_server(decoder, Settings(max_batch=request.param)) as (url, app):
            yield url, app, decoder


@pytest.fixture(scope="module")
def api(served):
    return openai.OpenAI(base_url=served[0] + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def reference():
    """Plain greedy decoding of each prompt on an identical model, in process."""
    decoder = tiny_decoder(policy="plain")
    with one_thread():
        return {p: decoder.generate(decoder.tokenizer(p)["input_ids"], max_new_tokens=24).text for p in PROMPTS}


def test_completion_equals_plain_greedy_and_reports_speculation(api, reference):
    for prompt in PROMPTS:
        # the adaptive controller decides from measured speed, so whether it speculates depends on the
        # machine; the fixed policy below drafts on every step whatever the timing
        out = api.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0,
                                     extra_body={"speculation": {"mode": "static", "drafter": "ngram", "k": 4}})
        assert out.object == "text_completion" and out.choices[0].text == reference[prompt]
        auto = api.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
        assert auto.choices[0].text == reference[prompt]
        assert out.usage.completion_tokens == 24 and out.usage.prompt_tokens == len(prompt.split())
        assert out.usage.total_tokens == out.usage.prompt_tokens + 24
        spec = out.model_extra["metrics"]["speculative_decoding"]
        assert spec["num_accepted_draft_tokens"] <= spec["num_draft_tokens"]
        assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"]
        assert sum(i * n for i, n in enumerate(spec["acceptance_histogram"])) == spec["num_accepted_draft_tokens"]
    assert spec["num_spec_steps"] > 0 and spec["drafters"] == {"ngram": spec["num_spec_steps"]}


def test_stream_joins_to_the_non_streamed_text_and_carries_usage(api, reference):
    for prompt in PROMPTS:
        chunks = list(api.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stream=True,
                                             stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == reference[prompt]
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
        assert chunks[-1].model_extra["metrics"]["speculative_decoding"]["num_draft_tokens"] >= 0


def test_a_stop_string_ends_the_answer_and_is_left_out_of_it_streamed_or_not(api, reference):
    full = reference[PROMPTS[0]]
    tokens = full.replace("><", ">\n<").split("\n")  # the tiny tokenizer's text: "<38><62>..."
    stop = tokens[5] + tokens[6]
    expected = full[:full.index(stop)]  # OpenAI: "the returned text will not contain the stop sequence"
    speculation = {"speculation": {"mode": "static", "drafter": "ngram", "k": 4}}
    out = api.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=24, temperature=0, stop=[stop],
                                 extra_body=speculation)
    assert out.choices[0].finish_reason == "stop" and out.choices[0].text == expected
    chunks = list(api.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=24, temperature=0, stop=[stop],
                                         stream=True, extra_body=speculation))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_goes_through_the_template(api, served):
    decoder = served[2]
    messages = [{"role": "system", "content": "<4> <4>"}, {"role": "user", "content": "<6> <7> <6> <7>"}]
    out = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    ids = decoder.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert out.object == "chat.completion" and out.choices[0].message.role == "assistant"
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == 12
    streamed = list(api.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0,
                                                stream=True))
    assert streamed[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == out.choices[0].message.content


def test_seeded_sampling_repeats_under_fixed_speculation(api):
    """A seed fixes the sampler's random stream; how much of it a step uses depends on the drafts,
    so the same seed gives the same text when the speculation is fixed (off or static), while under
    ``auto`` the controller's learning may change it (the distribution is the target's either way)."""
    for speculation in ({"mode": "off"}, {"mode": "static", "drafter": "ngram", "k": 3}):
        a, b = (api.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=16, temperature=0.9, seed=11,
                                       extra_body={"speculation": speculation}) for _ in range(2))
        assert a.choices[0].text == b.choices[0].text


def test_speculation_extension_forces_plain_or_a_drafter(api):
    off = api.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=16, temperature=0,
                                 extra_body={"speculation": {"mode": "off"}})
    assert off.model_extra["metrics"]["speculative_decoding"]["num_spec_steps"] == 0
    static = api.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=16, temperature=0,
                                    extra_body={"speculation": {"mode": "static", "drafter": "ngram", "k": 3}})
    spec = static.model_extra["metrics"]["speculative_decoding"]
    assert set(spec["drafters"]) <= {"ngram"} and set(spec["k"]) <= {"3", "2", "1"}
    assert static.choices[0].text == off.choices[0].text


def test_models_health_version_and_metrics(api, served):
    url = served[0]
    assert [m.id for m in api.models.list()] == [MODEL]
    assert api.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        api.models.retrieve("another-model")
    with client(url) as http:
        assert http.get("/health").json() == {"status": "ok"}
        assert http.head("/health").status_code == 200  # a balancer's probe without a body
        assert http.get("/version").json()["version"]
        metrics = http.get("/metrics").text
    assert 'adaptive_spec_http_requests_total{method="POST",route="/v1/completions",status="200"}' in metrics
    assert "adaptive_spec_queue_depth" in metrics


@pytest.mark.parametrize("kwargs, param", [
    ({"n": 2}, "n"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 10_000}, "max_tokens"),
    ({"seed": 2**70}, "seed"),
    ({"stop": ""}, "stop"),
    ({"extra_body": {"speculation": {"mode": "static", "drafter": "int8", "k": 2}}}, "speculation"),
    ({"extra_body": {"speculation": {"mode": "sometimes"}}}, "speculation.mode"),
    ({"extra_body": {"speculation": {"mode": "off", "drafter": "ngram", "k": 9999}}}, "speculation"),
    ({"extra_body": {"temperature": True}}, "temperature"),  # not 1.0
    ({"extra_body": {"top_p": "0.5"}}, "top_p"),
])
def test_invalid_fields_are_400_naming_the_field(api, kwargs, param):
    with pytest.raises(openai.BadRequestError) as caught:
        api.completions.create(model=MODEL, prompt=PROMPTS[0], **{"max_tokens": 8, **kwargs})
    assert caught.value.status_code == 400 and caught.value.body["param"] == param
    assert "Traceback" not in caught.value.message


def test_asking_for_log_probabilities_an_echo_or_best_of_is_a_400_naming_the_field(api):
    """Answering without them would look like success; a client that needs them must be told."""
    asks = [(api.completions.create, {"prompt": PROMPTS[0], "logprobs": 2}, "logprobs"),
            (api.completions.create, {"prompt": PROMPTS[0], "logprobs": 0}, "logprobs"),
            (api.completions.create, {"prompt": PROMPTS[0], "echo": True}, "echo"),
            (api.completions.create, {"prompt": PROMPTS[0], "best_of": 3}, "best_of"),
            (api.chat.completions.create, {"messages": [{"role": "user", "content": PROMPTS[0]}], "logprobs": True},
             "logprobs"),
            (api.chat.completions.create, {"messages": [{"role": "user", "content": PROMPTS[0]}], "top_logprobs": 2},
             "top_logprobs")]
    for create, kwargs, param in asks:
        with pytest.raises(openai.BadRequestError) as caught:
            create(model=MODEL, max_tokens=4, **kwargs)
        error = caught.value.body
        assert error["param"] == param and error["message"].startswith(f"invalid {param}="), kwargs
    # asking for none of them is fine
    out = api.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=4, logprobs=None, echo=False, best_of=1)
    assert out.choices[0].logprobs is None
    chat = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=4,
                                       logprobs=False)
    assert chat.choices[0].finish_reason == "length"


def test_prompt_errors_unknown_model_and_body_limits(api, served):
    with pytest.raises(openai.BadRequestError) as caught:
        api.completions.create(model=MODEL, prompt=[999], max_tokens=4)
    assert caught.value.body["param"] == "prompt"
    with pytest.raises(openai.NotFoundError) as caught:
        api.completions.create(model="/etc/passwd", prompt=PROMPTS[0], max_tokens=4)
    assert caught.value.body["param"] == "model"
    with client(served[0]) as http:
        big = http.post("/v1/completions", content=b'{"prompt": "' + b"<1> " * 400_000 + b'"}',
                        headers={"content-type": "application/json"})
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"
        bad = http.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        lone_surrogate = b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 4}'
        surrogate = http.post("/v1/chat/completions", content=lone_surrogate, headers={"content-type": "application/json"})
        assert surrogate.status_code == 400 and surrogate.json()["error"]["param"] == "messages.0.content"
        missing = http.get("/v1/nothing")
        assert missing.status_code == 404 and "error" in missing.json()


@pytest.mark.parametrize("speculation", [{"mode": "static", "drafter": "nope", "k": 2},
                                         {"mode": "static", "drafter": "ngram", "k": 100_000}])
def test_a_streamed_request_with_bad_speculation_is_400_before_the_stream_starts(served, speculation):
    with client(served[0]) as http:
        answer = http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 4, "stream": True,
                                                    "speculation": speculation})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "speculation"


def test_a_streamed_request_forcing_a_drafter_its_keys_controller_has_no_k_for_is_400_before_the_stream():
    from adaptive_spec.decoder import SpeculativeDecoder
    from adaptive_spec.drafters.ngram import NgramDrafter
    from batch_kit import EchoDrafter
    from policies.registry import PolicyRegistry

    loaded = tiny_decoder()
    decoder = SpeculativeDecoder(loaded.target_model, [NgramDrafter(), EchoDrafter()],
                                 policy=PolicyRegistry("static:ngram:4", ["ngram", "echo"]))
    with one_thread(), live_server(decoder) as (url, _), client(url) as http:
        body = {"prompt": PROMPTS[0], "max_tokens": 4, "stream": True}
        refused = http.post("/v1/completions", json={**body, "speculation": {"mode": "static", "drafter": "echo"}})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "speculation"
        # its own drafter takes the controller's k
        kept = http.post("/v1/completions", json={**body, "speculation": {"mode": "static", "drafter": "ngram"}})
        assert kept.status_code == 200 and kept.text.rstrip().endswith("data: [DONE]")


def test_bad_bodies_are_400_naming_the_field_and_its_value_and_the_connection_serves_on(served):
    with client(served[0]) as http:
        deep = http.post("/v1/completions", content=b"[" * 100_000 + b"]" * 100_000,
                         headers={"content-type": "application/json"})
        assert deep.status_code == 400 and deep.json()["error"]["code"] == "invalid_json"
        for body, param, value in [({"prompt": PROMPTS[0], "stream": "yes"}, "stream", "'yes'"),
                                   ({"prompt": PROMPTS[0], "stream_options": {"include_usage": 1}},
                                    "stream_options.include_usage", "1"),
                                   ({"prompt": PROMPTS[0], "user": 7}, "user", "7")]:
            answer = http.post("/v1/completions", json={**body, "max_tokens": 4})
            assert answer.status_code == 400 and answer.json()["error"]["param"] == param
            assert answer.json()["error"]["message"].startswith(f"invalid {param}={value}: ")
        # options for a stream that is not one: a 400, as OpenAI's API answers it
        options = http.post("/v1/completions", json={"prompt": PROMPTS[0], "stream_options": {"include_usage": True}})
        assert options.status_code == 400 and options.json()["error"]["param"] == "stream_options"
        # and the same connection answers the next request
        assert http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 2}).status_code == 200


def test_null_n_and_stream_are_their_defaults_as_in_openais_api(served):
    with client(served[0]) as http:
        answer = http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 2, "n": None, "stream": None})
        assert answer.status_code == 200 and answer.json()["object"] == "text_completion"


def test_an_unexpected_error_is_a_json_500_and_the_connection_serves_on(served, monkeypatch):
    from adaptive_spec.server import protocol

    def broken(request):
        raise RuntimeError("a bug")

    with client(served[0]) as http:
        monkeypatch.setattr(protocol, "speculation_overrides", broken)
        failed = http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 2})
        monkeypatch.undo()
        assert failed.status_code == 500 and failed.json()["error"]["type"] == "internal_server_error"
        assert "a bug" not in failed.text and "Traceback" not in failed.text
        # Starlette's own last resort raises again after answering, and the server drops the connection
        assert http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 2}).status_code == 200


def test_a_chat_template_that_refuses_the_messages_is_a_400_naming_them(served, monkeypatch):
    from jinja2.exceptions import TemplateError

    decoder = served[2]

    def refuse(messages, **kwargs):
        raise TemplateError("Conversation roles must alternate user/assistant/user/assistant/...")

    monkeypatch.setattr(decoder.tokenizer, "apply_chat_template", refuse)
    with client(served[0]) as http:
        answer = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "<4>"}] * 2,
                                                         "max_tokens": 2})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "messages"
    assert "roles must alternate" in answer.json()["error"]["message"]


def test_a_request_the_engine_cannot_take_is_a_500_and_the_worker_serves_on(served, monkeypatch):
    url, app, decoder = served
    worker = app.state.service.worker
    target = worker.engine if hasattr(worker, "engine") else decoder  # batched: submit; one at a time: stream
    name = "submit" if hasattr(worker, "engine") else "stream"
    real, calls = getattr(target, name), []

    def broken_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            if name == "stream":  # a stream that ends without handing over its result
                return (piece for piece in ())
            raise RuntimeError("a bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, broken_once)
    with client(url) as http:
        failed = http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 2})
        assert failed.status_code == 500 and "a bug" not in failed.text
        assert http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 2}).status_code == 200
    assert len(calls) == 2


def test_an_invented_http_method_is_counted_as_other(served):
    with client(served[0]) as http:
        for i in range(3):
            http.request(f"XMETHOD{i}", "/health")
        metrics = http.get("/metrics").text
    assert "XMETHOD" not in metrics and 'method="other",route="/health"' in metrics


def test_api_key_is_required_when_set():
    with one_thread(), live_server(tiny_decoder(), Settings(api_key="s3cret")) as (url, _):
        wrong = openai.OpenAI(base_url=url + "/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=4)
        with client(url) as http:
            assert http.post("/v1/completions", json={"prompt": PROMPTS[0]}).status_code == 401
            assert http.get("/health").status_code == 200  # health stays open for the balancer
        right = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert right.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=4, temperature=0).choices[0].text


@pytest.mark.parametrize("max_batch", BATCHES)
def test_counters_summed_over_requests_equal_the_prometheus_counters(max_batch):
    from adaptive_spec.telemetry.spec import build_prometheus_observer

    observer = build_prometheus_observer([])
    decoder = tiny_decoder(observers=[observer], policy="static:ngram:3")  # drafts whatever the timing
    with one_thread(), live_server(decoder, Settings(max_batch=max_batch)) as (url, _), client(url) as http:
        before = _spec_counters(http.get("/metrics").text)
        drafts = accepted = 0
        for prompt in PROMPTS * 2:
            spec = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 20, "temperature": 0}) \
                .json()["metrics"]["speculative_decoding"]
            drafts, accepted = drafts + spec["num_draft_tokens"], accepted + spec["num_accepted_draft_tokens"]
        after = _spec_counters(http.get("/metrics").text)
    assert drafts > 0
    assert (after[0] - before[0], after[1] - before[1]) == (drafts, accepted)


def _spec_counters(text: str) -> tuple[float, float]:
    """Draft and accepted tokens of the tiny model in the Prometheus exposition."""
    totals = {"draft": 0.0, "accepted": 0.0}
    for line in text.splitlines():
        if line.startswith("#") or f'"{MODEL}"' not in line:
            continue
        name = line.split("{")[0]
        if name == "adaptive_spec_spec_decode_draft_tokens_total":
            totals["draft"] += float(line.rsplit(" ", 1)[1])
        elif name == "adaptive_spec_spec_decode_accepted_tokens_total":
            totals["accepted"] += float(line.rsplit(" ", 1)[1])
    return totals["draft"], totals["accepted"]


@pytest.mark.parametrize("max_batch", BATCHES)
def test_a_client_that_leaves_mid_stream_cancels_its_request(max_batch):
    counter = StepCounter()
    decoder = tiny_decoder(observers=[counter])
    with one_thread(), live_server(decoder, Settings(max_batch=max_batch)) as (url, app), client(url) as http:
        body = {"prompt": PROMPTS[1], "max_tokens": 200, "temperature": 0, "stream": True,
                "speculation": {"mode": "off"}}  # one token per step: 200 steps if nobody stops it
        with http.stream("POST", "/v1/completions", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    break  # first chunk read: leave
        worker = app.state.service.worker
        assert wait_until(lambda: worker.cancelled == 1 and worker.in_flight == 0)
        steps = counter.steps
        assert steps < 199
        assert http.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 3}).status_code == 200
        assert counter.steps <= steps + 3  # only the next request's steps


@pytest.mark.parametrize("max_batch", BATCHES)
def test_a_client_that_leaves_before_a_non_streamed_answer_cancels_its_request(max_batch):
    counter = StepCounter(delay_s=0.01)  # 240 steps: well over the client's 0.3 s
    decoder = tiny_decoder(observers=[counter])
    settings = Settings(disconnect_poll_s=0.05, max_batch=max_batch)
    with one_thread(), live_server(decoder, settings) as (url, app):
        worker = app.state.service.worker
        body = {"prompt": PROMPTS[1], "max_tokens": 240, "temperature": 0, "speculation": {"mode": "off"}}
        with client(url) as http, pytest.raises(httpx.ReadTimeout):
            # the client gives up as soon as the request is being decoded
            http.post("/v1/completions", json=body, timeout=httpx.Timeout(60.0, read=0.3))
        assert wait_until(lambda: worker.cancelled == 1 and worker.in_flight == 0), \
            (worker.cancelled, worker.in_flight, worker.served, counter.steps)
        assert counter.steps < 239  # stopped before the end


class HoldFirstStep:
    """An observer that holds the engine's thread in its first decode step until ``go`` is set."""

    def __init__(self) -> None:
        self.held, self.go = threading.Event(), threading.Event()

    def on_step(self, request, outcome, events) -> None:
        self.held.set()
        self.go.wait(timeout=30)


def test_a_failed_batch_step_answers_every_job_once_and_the_worker_serves_on(monkeypatch):
    hold = HoldFirstStep()
    decoder = tiny_decoder(observers=[hold])
    first_token = decoder.first_token

    def failing_for_seed_13(logits, cfg, generator):
        if cfg.seed == 13:
            raise RuntimeError("a bug")
        return first_token(logits, cfg, generator)

    monkeypatch.setattr(decoder, "first_token", failing_for_seed_13)
    worker = BatchedWorker(decoder, max_queue=8, max_batch=4)

    async def answers() -> list[tuple[str, object]]:
        loop = asyncio.get_running_loop()

        def job(ids, max_new_tokens, seed=None, **overrides):
            submitted = Job(ids, GenerationConfig(max_new_tokens=max_new_tokens, seed=seed), "", overrides, loop,
                            streamed=False)
            worker.submit(submitted)
            return submitted

        # one token a step: its third (and last) token comes in the step that fails
        done_in_failed_step = job([1, 2, 3, 4, 5, 1, 2, 3], 3, force_plain=True)
        await asyncio.to_thread(hold.held.wait, 30)
        # both ride in the next step: the first joins as a row, the second's first token fails the step
        seated, failing = job([7, 8, 9], 5), job([1, 2, 3], 5, seed=13)
        hold.go.set()
        got = [await asyncio.wait_for(j.events.get(), 30) for j in (done_in_failed_step, seated, failing)]
        return got + [await asyncio.wait_for(job([1, 2, 3], 3).events.get(), 30)]  # one after the failure

    try:
        (finished, result), *failed, (after, _) = asyncio.run(answers())
    finally:
        worker.stop()
    assert finished == "done" and len(result.token_ids) == 3  # its result, not a 500
    assert [(kind, value.status) for kind, value in failed] == [("error", 500), ("error", 500)]
    assert after == "done" and worker.in_flight == 0


def test_a_blank_api_key_is_refused_before_binding():
    from adaptive_spec.errors import InvalidParameterError
    from adaptive_spec.server.run import check_bind

    for blank in ("", "  "):
        with pytest.raises(InvalidParameterError) as caught:
            check_bind("0.0.0.0", blank, allow_open=False)
        assert caught.value.name == "api_key"
    check_bind("0.0.0.0", "s3cret", allow_open=False)


def test_a_blank_api_key_set_in_code_admits_no_one():
    with one_thread(), live_server(tiny_decoder(), Settings(api_key="")) as (url, _), client(url) as http:
        for header in ({}, {"Authorization": "Bearer"}, {"Authorization": "bearer"}):
            assert http.post("/v1/completions", json={"prompt": PROMPTS[0]}, headers=header).status_code == 401
