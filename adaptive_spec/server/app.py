"""The OpenAI-compatible HTTP app: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``
(and ``/v1/models/{id}``), ``/health``, ``/version`` and ``/metrics``.

``create_app(load, model_name)`` returns a FastAPI app that loads its decoder in the background
(``/health`` answers 503 until it is ready) and serves it through one ``EngineWorker``. Requests
are parsed and tokenized on the event loop; every forward runs on the worker's thread.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from jinja2.exceptions import TemplateError

from adaptive_spec.config import PREFILL_CHUNK, context_overflow
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.prompts import check_prompt_text
from adaptive_spec.server import protocol, responses
from adaptive_spec.server.errors import AnswerUnexpected, APIError, error_body, install_handlers
from adaptive_spec.server.metrics import ServerMetrics
from adaptive_spec.server.worker import EngineWorker, Job
from policies.batch_cap import BatchDraftCap

log = logging.getLogger("adaptive_spec.server")


@dataclass(frozen=True)
class Settings:
    api_key: str | None = None
    max_queue: int = 64  # jobs waiting for the engine; one more is a 429
    max_batch: int = 1  # jobs decoding together (continuous batching above 1)
    prefill_chunk: int = PREFILL_CHUNK  # batched: prompt tokens a step prefills while other jobs decode
    step_costs: tuple = ()  # batched: (rows, width, seconds) of timed steps that warm the batch's draft cap
    plain_slowdown: float | None = BatchDraftCap.plain_slowdown  # batched: what others' drafts may cost a plain row
    batch_objective: str = BatchDraftCap.objective  # batched: what the batch's drafts maximise
    batch_cut: str = BatchDraftCap.cut  # batched: the bound rows' drafts cut row by row, or to one length
    max_body_bytes: int = 1 << 20
    chat_max_tokens: int = 512  # a chat request without max_tokens: this, or what the context leaves
    grace_s: float = 30.0  # SIGTERM: how long in-flight requests may take to finish
    disconnect_poll_s: float = 0.25  # how often a non-streamed request checks that its client is there


class Service:
    """What the routes share: the decoder once loaded, its worker, the settings and the counters."""

    def __init__(self, load: Callable, model_name: str, settings: Settings, version: str) -> None:
        self.model_name, self.settings, self.version = model_name, settings, version
        self.decoder = None
        self.worker: EngineWorker | None = None
        self.load_error: str | None = None
        self.draining = False
        self.metrics = ServerMetrics(lambda: self.worker.depth if self.worker else 0, self._suffix_stats,
                                     lambda: self.worker.running if self.worker else 0)
        self._load = load

    def _suffix_stats(self) -> dict | None:
        suffix = self.decoder.drafters.get("suffix") if self.decoder is not None else None
        return suffix.store.stats() if suffix is not None else None

    def start(self) -> None:
        threading.Thread(target=self._load_in_background, name="adaptive-spec-load", daemon=True).start()

    def _load_in_background(self) -> None:
        try:
            decoder = self._load()
        except Exception as exc:  # reported by /health; the process keeps running for the operator to see
            log.exception("loading the model failed")
            self.load_error = str(exc)
            return
        self.decoder = decoder
        if self.settings.max_batch > 1:
            from adaptive_spec.server.batched_worker import BatchedWorker

            self.worker = BatchedWorker(decoder, self.settings.max_queue, self.settings.max_batch,
                                        prefill_chunk=self.settings.prefill_chunk, step_costs=self.settings.step_costs,
                                        plain_slowdown=self.settings.plain_slowdown,
                                        objective=self.settings.batch_objective, cut=self.settings.batch_cut)
        else:
            self.worker = EngineWorker(decoder, self.settings.max_queue)

    @property
    def status(self) -> str:
        if self.draining:
            return "draining"
        if self.load_error:
            return "failed"
        return "ok" if self.worker is not None else "loading"

    def drain(self) -> bool:
        """Refuse new requests (503) and let the admitted ones finish within the grace period."""
        self.draining = True
        return self.worker.drain(self.settings.grace_s) if self.worker else True

    def ready_worker(self) -> EngineWorker:
        if self.draining:
            raise APIError(503, "the server is shutting down; retry on another replica", code="draining")
        if self.worker is None:
            reason = f"the model failed to load: {self.load_error}" if self.load_error else "the model is loading"
            raise APIError(503, f"{reason}; retry shortly", code="not_ready", headers={"Retry-After": "1"})
        return self.worker


def create_app(load: Callable, model_name: str, settings: Settings | None = None, version: str = "",
               on_shutdown: Callable[[], None] | None = None) -> FastAPI:
    """``on_shutdown``: called once the worker stopped (e.g. saving the suffix drafter's history)."""
    service = Service(load, model_name, settings or Settings(), version or _version())

    async def lifespan(app: FastAPI):
        service.start()
        yield
        if service.worker is not None:
            service.drain()
            service.worker.stop()
        if on_shutdown is not None:
            try:
                on_shutdown()
            except Exception:  # noqa: BLE001 - a failed save must not turn a clean drain into a crash
                log.exception("shutdown hook failed")

    app = FastAPI(title="adaptive-spec", version=service.version, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    install_handlers(app)

    # plain ASGI middlewares: Starlette's BaseHTTPMiddleware would hide a client's disconnect from
    # request.is_disconnected(), which is how a non-streamed request learns its client left
    app.add_middleware(AnswerUnexpected)
    app.add_middleware(_CountRequests, metrics=service.metrics)

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: balancers that probe without a body
    async def health() -> JSONResponse:
        status = service.status
        return JSONResponse({"status": status}, status_code=200 if status == "ok" else 503)

    @app.get("/version")
    async def version() -> dict:
        return {"version": service.version}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        body, content_type = service.metrics.exposition()
        return PlainTextResponse(body, media_type=content_type)

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        _authorize(request, service.settings)
        return {"object": "list", "data": [_model_card(service.model_name)]}

    @app.get("/v1/models/{model_id:path}")  # path: a served folder's name may hold slashes
    async def model(request: Request, model_id: str) -> dict:
        _authorize(request, service.settings)
        if model_id != service.model_name:
            raise APIError(404, f"model {model_id!r} is not served here; served: {service.model_name!r}",
                           param="model", code="model_not_found")
        return _model_card(model_id)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _generate(request, service, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _generate(request, service, chat=True)

    return app


def _model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "adaptive-spec"}


async def _generate(request: Request, service: Service, chat: bool):
    _authorize(request, service.settings)
    body = await _read_body(request, service.settings.max_body_bytes)
    parsed = protocol.parse(protocol.ChatRequest if chat else protocol.CompletionRequest, body)
    if parsed.model is not None and parsed.model != service.model_name:
        raise APIError(404, f"model {parsed.model!r} is not served here; served: {service.model_name!r}",
                       param="model", code="model_not_found")
    worker = service.ready_worker()
    prompt_ids = _encode(service.decoder, parsed, chat)
    default_max = protocol.COMPLETIONS_DEFAULT_MAX_TOKENS
    context = service.decoder.target_model.max_context
    if chat:
        default_max = max(1, min(service.settings.chat_max_tokens, context - len(prompt_ids)))
    config = protocol.generation_config(parsed, default_max)
    if len(prompt_ids) + config.max_new_tokens > context:
        name = "max_completion_tokens" if parsed.max_completion_tokens is not None else "max_tokens"
        raise APIError.from_invalid(context_overflow(len(prompt_ids), config.max_new_tokens, context),
                                    {"max_new_tokens": name, "prompt": "messages" if chat else "prompt"})
    key = request.headers.get("x-traffic-key") or parsed.user or request.url.path
    overrides = protocol.speculation_overrides(parsed)
    try:  # here, not on the engine's thread: a streamed answer would already have said 200
        if overrides.get("force_drafter") is not None and overrides.get("force_k") is None:
            # k from the key's controller: refused where it has none for that drafter (a static one)
            service.decoder.policy_for(key, None, **overrides)
        else:
            service.decoder.check_overrides(**overrides)
    except InvalidParameterError as exc:
        raise APIError.from_invalid(exc) from None
    job = Job(prompt_ids, config, key, overrides, asyncio.get_running_loop(), streamed=parsed.stream)
    worker.submit(job)
    request_id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
    if parsed.stream:
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        return StreamingResponse(_stream(job, request_id, service.model_name, chat, include_usage),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    result = await _wait(job, request, service.settings.disconnect_poll_s)
    build = responses.chat_completion if chat else responses.completion
    return build(request_id, service.model_name, result, job)


class _CountRequests:
    """Counts every HTTP request by method, matched route and status (``/metrics``)."""

    def __init__(self, app, metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = [500]  # what the client saw if the app never started a response

        async def send_and_note(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.request(scope["method"], route, status[0])


def _authorize(request: Request, settings: Settings) -> None:
    if settings.api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # an empty token never matches, so a blank key set in code (the CLI refuses one) admits no one
    if scheme.lower() != "bearer" or not token or not hmac.compare_digest(token.encode(), settings.api_key.encode()):
        raise APIError(401, "a valid API key is required: 'Authorization: Bearer <key>'", code="invalid_api_key")


async def _read_body(request: Request, limit: int) -> bytes:
    too_big = APIError(413, f"the request body exceeds {limit} bytes", code="body_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise too_big
    return bytes(body)


def _encode(decoder, parsed, chat: bool) -> list[int]:
    """Token ids of the prompt: a completion's text as it is, a chat through the model's template."""
    tokenizer = decoder.tokenizer
    try:
        if chat:
            if getattr(tokenizer, "chat_template", None) is None:
                raise APIError(400, "this model has no chat template; use /v1/completions", param="messages")
            messages = []
            for i, message in enumerate(parsed.messages):
                check_prompt_text(f"messages.{i}.content", message.text())
                messages.append({"role": "system" if message.role == "developer" else message.role,
                                 "content": message.text()})
            try:
                encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            except TemplateError as exc:  # the template's own refusal, e.g. roles that must alternate
                raise APIError(400, f"the model's chat template refused the messages: {exc}", param="messages") from None
            ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
            return list(ids[0] if ids and isinstance(ids[0], list) else ids)
        if isinstance(parsed.prompt, str):
            check_prompt_text("prompt", parsed.prompt)
            return list(tokenizer(parsed.prompt)["input_ids"])
        return decoder.encode_prompt(parsed.prompt)
    except InvalidParameterError as exc:
        raise APIError.from_invalid(exc) from None


async def _wait(job: Job, request: Request, poll_s: float):
    """The job's result; a client that disconnects cancels it. The check runs every ``poll_s`` on the
    clock, not only when the queue is quiet: text events arrive every step."""
    loop = asyncio.get_running_loop()
    next_check = loop.time() + poll_s
    while True:
        try:
            kind, value = await asyncio.wait_for(job.events.get(), max(0.0, next_check - loop.time()))
        except asyncio.TimeoutError:
            kind, value = None, None
        if kind == "done":
            return value
        if kind == "error":
            raise value
        if loop.time() >= next_check:
            if await request.is_disconnected():
                job.cancelled.set()
                raise APIError(499, "client disconnected")
            next_check = loop.time() + poll_s


async def _stream(job: Job, request_id: str, model: str, chat: bool, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events: text chunks, a final chunk with the finish reason, usage if asked, [DONE].
    A failure after the stream started is sent as an error event, then [DONE]."""
    first, finished = True, False
    stops, unsent = job.config.stop_strings, ""  # unsent: text that may be, or begin, a stop string
    try:
        while True:
            kind, value = await job.events.get()
            if kind == "text":
                unsent += value
                ready = responses.sendable(unsent, stops)
                if ready:
                    yield _event(responses.chunk(request_id, model, chat, unsent[:ready], first=first))
                    first, unsent = False, unsent[ready:]
            elif kind == "done":
                rest = responses.cut_at_stop(unsent, stops)  # no more text comes to complete a stop string
                if rest:
                    yield _event(responses.chunk(request_id, model, chat, rest, first=first))
                    first = False
                yield _event(responses.chunk(request_id, model, chat, "" if first and chat else None,
                                             responses.FINISH[value.finish_reason], first=first))
                if include_usage:
                    yield _event(responses.usage_chunk(request_id, model, chat, value, job))
                break
            else:
                yield _event(value.body() if isinstance(value, APIError) else error_body(500, "internal error"))
                break
        finished = True
        yield "data: [DONE]\n\n"
    finally:
        if not finished:  # the client went away mid-stream: stop decoding for nobody
            job.cancelled.set()


def _event(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("adaptive-spec")
    except PackageNotFoundError:
        return "unknown"
