"""Request bodies as OpenAI and vLLM name their fields, and what the engine makes of them.

Unknown fields are ignored, as vLLM does; known ones asking for what this server does not return
(``n`` or ``best_of`` above 1, ``logprobs``, ``top_logprobs``, ``echo``) are refused. Speculation is steered per request by an extension
object, ``"speculation": {"mode": "auto" | "off" | "static", "drafter": "ngram", "k": 4}``:
``auto`` (the default) lets the traffic key's controller choose, ``off`` decodes plainly,
``static`` forces a drafter and ``k`` for this request.
"""

from __future__ import annotations

import json
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from adaptive_spec.config import GenerationConfig
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.server.errors import APIError

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class Speculation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["auto", "off", "static"] = "auto"
    drafter: str | None = None
    k: int | None = Field(default=None, strict=True)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = Field(default=False, strict=True)


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    max_tokens: int | None = Field(default=None, strict=True)
    max_completion_tokens: int | None = Field(default=None, strict=True)
    temperature: float | None = Field(default=None, strict=True)  # strict: true is not 1.0, "0" not 0 (an int is)
    top_p: float | None = Field(default=None, strict=True)
    top_k: int | None = Field(default=None, strict=True)
    seed: int | None = Field(default=None, strict=True)
    stop: Union[str, list[str], None] = None
    stream: bool | None = Field(default=False, strict=True)  # strict: "yes" is not true; null: false, as OpenAI's
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=1, strict=True)  # null: 1, as OpenAI's
    # read only to be refused: they would change the answer, and this server cannot honour them
    logprobs: Union[StrictBool, StrictInt, None] = None  # chat: a bool; completions: a count
    top_logprobs: int | None = Field(default=None, strict=True)
    user: str | None = None
    speculation: Speculation | None = None


class CompletionRequest(_Request):
    prompt: Union[str, list[int]]
    echo: bool | None = Field(default=None, strict=True)  # refused when true, as logprobs
    best_of: int | None = Field(default=None, strict=True)  # refused above 1, as n


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[TextPart]]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatRequest(_Request):
    messages: list[Message] = Field(min_length=1)


def parse(model: type[_Request], body: bytes) -> _Request:
    """The request in ``body``; an ``APIError`` (400) naming the first bad field otherwise."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # the parser's own limit, reached by arrays or objects nested thousands deep
        raise APIError(400, "the request body is not valid JSON: nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = _top_field(first["loc"])
        value = "" if first["type"] == "missing" else f"={_quoted(first.get('input'))}"
        raise APIError(400, f"invalid {param}{value}: {first['msg']}", param=param, code="invalid_value") from None
    if request.n not in (None, 1):
        raise APIError(400, f"invalid n={request.n}: only n=1 is supported", param="n", code="invalid_value")
    if request.stream_options is not None and not request.stream:  # as OpenAI's API: options for no stream
        raise APIError(400, "invalid stream_options: only allowed when stream is true", param="stream_options",
                       code="invalid_value")
    _refuse_unsupported(request)
    return request


def _refuse_unsupported(request: _Request) -> None:
    """A 400 naming the first field asking for what this server does not return (log probabilities,
    the prompt echoed, the best of several), rather than an answer without it."""
    unsupported = {
        "logprobs": (request.logprobs is not None and request.logprobs is not False,  # 0: the chosen tokens' own
                     "log probabilities are not returned by this server"),
        "top_logprobs": (bool(request.top_logprobs), "log probabilities are not returned by this server"),
        "echo": (getattr(request, "echo", None) is True, "the prompt is not echoed by this server"),
        "best_of": (getattr(request, "best_of", None) not in (None, 1), "only best_of=1 is supported"),
    }
    for name, (asked, reason) in unsupported.items():
        if asked:
            raise APIError(400, f"invalid {name}={getattr(request, name)!r}: {reason}", param=name,
                           code="invalid_value")


def _quoted(value: object, limit: int = 60) -> str:
    """``value`` as the request held it, cut to ``limit`` characters (a field may hold a whole prompt).

    >>> _quoted("yes"), _quoted([1, 2]), _quoted("x" * 100)[-8:]
    ("'yes'", '[1, 2]', 'xxxxx...')
    """
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _top_field(loc: tuple) -> str:
    """``stop`` for ``('stop', 'list[str]', 0)``, ``messages.0.role`` for a message's field."""
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in ("str", "int")))]
    return ".".join(parts) or "body"


def generation_config(request: _Request, default_max_tokens: int) -> GenerationConfig:
    """The engine's config for ``request``; ``APIError`` (400) naming the field it rejects."""
    max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    name = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    temperature = 1.0 if request.temperature is None else request.temperature  # OpenAI's default samples
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    try:
        return GenerationConfig(
            max_new_tokens=default_max_tokens if max_tokens is None else max_tokens,
            do_sample=temperature != 0, temperature=temperature,  # 0: greedy, as OpenAI and vLLM read it
            top_k=request.top_k or 0, top_p=1.0 if request.top_p is None else request.top_p,
            seed=request.seed, stop_strings=tuple(stop))
    except InvalidParameterError as exc:
        raise APIError.from_invalid(exc, {"max_new_tokens": name}) from None


def speculation_overrides(request: _Request) -> dict:
    """The decoder's per-request overrides for the ``speculation`` extension."""
    spec = request.speculation
    if spec is None or spec.mode == "auto":
        if spec is not None and (spec.drafter is not None or spec.k is not None):
            raise APIError(400, "speculation.drafter and speculation.k need mode 'static'", param="speculation")
        return {}
    if spec.mode == "off":
        if spec.drafter is not None or spec.k is not None:
            raise APIError(400, "speculation.drafter and speculation.k need mode 'static'; mode 'off' decodes plainly",
                           param="speculation")
        return {"force_plain": True}
    if spec.drafter is None:
        raise APIError(400, "speculation mode 'static' needs a drafter", param="speculation.drafter")
    return {"force_drafter": spec.drafter, "force_k": spec.k}
