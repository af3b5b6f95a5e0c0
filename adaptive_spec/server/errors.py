"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``, never a traceback.

Every failure a client can see is an ``APIError``; the app's handlers turn it, FastAPI's own
validation errors, unknown routes and anything unexpected into that shape (an unexpected error is
logged here with its traceback and answered with a generic 500).
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from adaptive_spec.errors import InvalidParameterError

log = logging.getLogger("adaptive_spec.server")

MAX_MESSAGE = 500  # characters: a validation message quoting a huge field is cut
TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
         405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
         500: "internal_server_error", 503: "service_unavailable"}
# the engine names generation parameters as transformers does; clients know OpenAI's names
PARAM_NAMES = {"max_new_tokens": "max_tokens", "stop_strings": "stop", "force_drafter": "speculation",
               "force_k": "speculation", "force": "speculation", "k": "speculation"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, _cap(message), param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.status, self.message, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)

    @classmethod
    def from_invalid(cls, exc: InvalidParameterError, renamed: dict[str, str] | None = None) -> "APIError":
        param = (renamed or {}).get(exc.name) or PARAM_NAMES.get(exc.name, exc.name)
        message = str(exc)
        if param != exc.name:
            message = message.replace(f"invalid {exc.name}=", f"invalid {param}=", 1)
        return cls(400, message, param=param, code="invalid_value")


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": _cap(message), "type": TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def _cap(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return APIError(400, f"invalid {param}: {first.get('msg', 'invalid request')}", param).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return APIError(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None)).response()

    @app.exception_handler(Exception)  # what gets past ``AnswerUnexpected`` (an error in a middleware)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error serving %s %s", request.method, request.url.path)
        return UNEXPECTED.response()


UNEXPECTED = APIError(500, "internal server error; the server log has the details")


class AnswerUnexpected:
    """An ASGI middleware that answers any error a route did not turn into a response with the
    generic 500 and goes on. Starlette's own last resort (an ``Exception`` handler) sends the same
    answer, then raises the error again, and the server closes the connection: a client's next
    request on it could get no answer at all. An error after the response started (headers sent)
    is logged and raised: the answer is cut, and closing the connection is what says so."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_and_note(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception:
            log.exception("unexpected error serving %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            body = json.dumps(UNEXPECTED.body()).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
