"""One streamed request, timed as ``vllm bench serve`` times it; the server's counters from ``/metrics``.

Every request streams (``stream: true`` with ``stream_options.include_usage``), so the client sees
when each chunk arrives:

- *TTFT*: from sending the request to the first chunk that carries text.
- *ITL* (inter-chunk latency): the gaps between consecutive chunks that carry text. A speculative
  server may put several accepted tokens in one chunk, so these are gaps between chunks, not
  between tokens (as in vLLM's benchmark).
- *E2EL*: from sending the request to the end of the stream (``data: [DONE]``).
- *TPOT*: ``(E2EL - TTFT) / (output_tokens - 1)``, for requests with at least two output tokens.

Output and prompt token counts are the server's own (the ``usage`` of the final chunk); a server
that sends no usage is counted in text chunks, and the record says so (``usage_reported``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from adaptive_spec.errors import InvalidParameterError

# prometheus sample name -> counter, as the server exports vLLM's spec-decode counters
SPEC_COUNTERS = {
    "adaptive_spec_spec_decode_drafts_total": "drafts",
    "adaptive_spec_spec_decode_draft_tokens_total": "draft_tokens",
    "adaptive_spec_spec_decode_accepted_tokens_total": "accepted_tokens",
}
MODEL_LABEL = "gen_ai_request_model"


@dataclass
class RequestRecord:
    """What one request did. Times are seconds; ``arrival_s`` and ``sent_s`` from the run's start."""

    index: int
    prompt_id: str
    kind: str
    arrival_s: float  # when the request was due
    sent_s: float | None = None  # when it went out (later than arrival_s while all concurrency slots were busy)
    finished_s: float | None = None  # when its stream ended or it failed
    status: int | str = "not_sent"  # HTTP status, or timeout | connection_error | stream_error | incomplete | cancelled
    error: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    usage_reported: bool = False
    chunks: int = 0  # chunks that carried text
    ttft_s: float | None = None
    e2el_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    server: dict | None = None  # the response's ``metrics`` object (speculation statistics, server timing)
    text: str = ""  # the generated text; kept in memory for checks, not written to the report

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.output_tokens < 2:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)


def request_body(endpoint: str, prompt: str, model: str, max_tokens: int, temperature: float,
                 extra_body: dict | None) -> dict:
    """The JSON body of a streamed completion (``endpoint="completions"``) or chat request."""
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
                  "stream_options": {"include_usage": True}}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body.update(extra_body or {})
    return body


def route(endpoint: str) -> str:
    return "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"


async def send(client: httpx.AsyncClient, record: RequestRecord, endpoint: str, body: dict, headers: dict,
               origin: float) -> RequestRecord:
    """Send one streamed request and fill ``record`` with what happened; never raises for a failed
    request (the failure is the record's ``status`` and ``error``). ``origin`` is the run's start on
    ``time.perf_counter``'s clock."""
    start = time.perf_counter()
    record.sent_s = start - origin
    last = None
    try:
        async with client.stream("POST", route(endpoint), json=body, headers=headers) as response:
            record.status = response.status_code
            if response.status_code != 200:
                record.error = _error_message(await response.aread())
                return record
            done = False
            async for line in response.aiter_lines():
                now = time.perf_counter()
                if not line.startswith("data:"):
                    continue  # blank separators and SSE comments
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    done = True
                    break
                event = json.loads(data)
                if not isinstance(event, dict):
                    raise ValueError(f"not a JSON object: {data[:80]}")
                if "error" in event:
                    record.status, record.error = "stream_error", _error_message(event)
                    return record
                text, finish = _choice(event, endpoint)
                if text:
                    if last is None:
                        record.ttft_s = now - start
                    else:
                        record.itl_s.append(now - last)
                    last = now
                    record.chunks += 1
                    record.text += text
                record.finish_reason = finish or record.finish_reason
                usage, metrics = event.get("usage"), event.get("metrics")
                if metrics is not None and not isinstance(metrics, dict):
                    raise ValueError(f"metrics is not an object: {metrics!r}"[:120])
                if usage:
                    if not (isinstance(usage, dict) and _count(usage.get("completion_tokens", 0))
                            and (usage.get("prompt_tokens") is None or _count(usage["prompt_tokens"]))):
                        raise ValueError(f"usage is not an object with integer counts: {usage!r}"[:120])
                    record.prompt_tokens = usage.get("prompt_tokens")
                    record.output_tokens = usage.get("completion_tokens", 0)
                    record.usage_reported = True
                    record.server = event.get("metrics")
            if not done:
                record.status, record.error = "incomplete", "the stream ended without data: [DONE]"
                return record
            record.e2el_s = time.perf_counter() - start
            if not record.usage_reported:
                record.output_tokens = record.chunks
            if record.ttft_s is None:  # no text at all (an immediate end of sequence): first byte is the end
                record.ttft_s = record.e2el_s
    except httpx.TimeoutException as exc:
        record.status, record.error = "timeout", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except httpx.TransportError as exc:  # connection refused or reset, protocol errors
        record.status, record.error = "connection_error", f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # a data line that is not JSON, or not shaped as OpenAI's events are
        record.status, record.error = "stream_error", f"unreadable event: {exc}"
    return record


def _choice(event: dict, endpoint: str) -> tuple[str, str | None]:
    """The first choice's text and finish reason; ``ValueError`` for an event not shaped as OpenAI's."""
    choices = event.get("choices") or []
    if not choices:
        return "", None
    choice = choices[0] if isinstance(choices, list) else None
    if not isinstance(choice, dict):
        raise ValueError(f"choices is not a list of objects: {choices!r}"[:120])
    delta = (choice.get("delta") or {}) if endpoint == "chat" else {}
    if not isinstance(delta, dict):
        raise ValueError(f"a chat choice's delta is not an object: {delta!r}"[:120])
    text = delta.get("content") if endpoint == "chat" else choice.get("text")
    if text is not None and not isinstance(text, str):
        raise ValueError(f"a choice's text is not a string: {text!r}"[:120])
    return text or "", choice.get("finish_reason")


def _count(value: object) -> bool:
    """A token count as OpenAI sends one: an integer, not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _error_message(body: bytes | dict) -> str:
    """The ``error.message`` of an OpenAI-shaped error, else the start of the body."""
    try:
        data = json.loads(body) if isinstance(body, bytes) else body
        error = data["error"]
        return str(error.get("message", error)) if isinstance(error, dict) else str(error)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        return " ".join(text.split())[:200]


async def check_server(client: httpx.AsyncClient, url: str, model: str | None) -> str:
    """The model to request: ``model`` once the server lists it, else the first one it serves.
    Raises ``InvalidParameterError`` naming ``url``, ``api_key`` or ``model`` when the server is not
    there, not ready, refuses the key, or does not serve the model."""
    try:
        health = await client.get("/health")
        listed = await client.get("/v1/models")
    except httpx.HTTPError as exc:
        raise InvalidParameterError("url", url, f"cannot reach the server ({type(exc).__name__}: "
                                    f"{exc or 'no answer'})") from None
    if health.status_code != 200:
        raise InvalidParameterError("url", url, f"the server is not ready: /health answered "
                                    f"{health.status_code} {_error_message(health.content)}")
    if listed.status_code == 401:
        raise InvalidParameterError("api_key", "***", f"the server refused it: {_error_message(listed.content)}")
    if listed.status_code != 200:
        raise InvalidParameterError("url", url, f"/v1/models answered {listed.status_code}; "
                                    "is this an OpenAI-compatible server?")
    try:
        served = [m["id"] for m in listed.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise InvalidParameterError("url", url, "/v1/models did not answer a model list") from None
    if model is None:
        if not served:
            raise InvalidParameterError("url", url, "the server lists no model")
        return served[0]
    if model not in served:
        raise InvalidParameterError("model", model, f"not served at {url}; served: {', '.join(served) or 'none'}")
    return model


async def spec_counters(client: httpx.AsyncClient, model: str) -> dict[str, float] | None:
    """The server's cumulative spec-decode counters for ``model`` (summed over drafters), or None
    when ``/metrics`` is not there or exports none of them."""
    try:
        response = await client.get("/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_spec_counters(response.text, model)


def parse_spec_counters(text: str, model: str) -> dict[str, float] | None:
    """``drafts``, ``draft_tokens`` and ``accepted_tokens`` of ``model`` in a Prometheus exposition;
    None when it has no spec-decode counter at all (a server that does not speculate, or another
    server). A server that has not drafted yet exports none either, so that also reads as zeros
    once any other counter of this project is there.

    >>> parse_spec_counters('adaptive_spec_spec_decode_drafts_total{gen_ai_request_model="m"} 3.0', "m")
    {'drafts': 3.0, 'draft_tokens': 0.0, 'accepted_tokens': 0.0}
    """
    from prometheus_client.parser import text_string_to_metric_families

    totals = dict.fromkeys(SPEC_COUNTERS.values(), 0.0)
    ours = False
    try:
        for family in text_string_to_metric_families(text):
            ours = ours or family.name.startswith("adaptive_spec_")
            for sample in family.samples:
                name = SPEC_COUNTERS.get(sample.name)
                if name is not None and sample.labels.get(MODEL_LABEL) == model:
                    totals[name] += sample.value
    except ValueError:  # not Prometheus text
        return None
    return totals if ours else None
