"""Errors in OpenAI's shape for the OpenAI-compatible routes (`api.openai_chat`):
`{"error": {"message", "type", "param", "code"}}`, as OpenAI's SDKs read them into their
exceptions (`AuthenticationError`, `NotFoundError`, `RateLimitError`, ...).

Scoped to those routes by their route class (`OpenAIRoute`): it answers what its route raises
(a body's validation, a dependency's `HTTPException`, an `OpenAIError`, an unreachable Redis)
before the application's handlers see it, so the rest of the API keeps its own shape
(`api.app`). What the middlewares refuse before any route runs (a body over its limit, a
caller's requests at once) keeps the API's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.openai_schemas import OpenAIErrorDetail, OpenAIErrorResponse
from infra.logging import get_logger
from infra.runtime.redis_client import RETRY_AFTER_S, UNAVAILABLE_ERRORS

log = get_logger(__name__)


class OpenAIError(Exception):
    """An error these routes answer in OpenAI's shape."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers

    def detail(self) -> OpenAIErrorDetail:
        kind = (
            "server_error"
            if self.status_code >= 500
            else "rate_limit_error"
            if self.status_code == status.HTTP_429_TOO_MANY_REQUESTS
            else "invalid_request_error"
        )
        return OpenAIErrorDetail(message=self.message, type=kind, param=self.param, code=self.code)

    def response(self) -> Response:
        body = OpenAIErrorResponse(error=self.detail())
        return Response(
            body.model_dump_json(),
            status_code=self.status_code,
            media_type="application/json",
            headers=self.headers,
        )


_CODES = {
    400: "invalid_body",
    401: "invalid_api_key",
    404: "not_found",
    409: "conflict",
    429: "rate_limit_exceeded",
    503: "service_unavailable",
}
_UNSUPPORTED = ("n", "tool_choice", "function_call", "response_format", "modalities")
_TAGS = frozenset(
    {"str", "int", "float", "bool", "list", "dict", "none"}
    | {"user", "system", "developer", "assistant", "tool", "function"}
)
"""The union branches and discriminator tags pydantic puts in an error's location."""


def _param(loc: Sequence[Any]) -> str:
    """`("body", "messages", 0, "user", "content", "str")` -> `messages[0].content`."""
    parts = list(loc[1:]) if loc and loc[0] == "body" else list(loc)
    named = ""
    for part in parts:
        if isinstance(part, int):
            named += f"[{part}]"
        elif part not in _TAGS and not any(mark in str(part) for mark in "-["):
            named += f".{part}" if named else str(part)
    return named or "body"


def _invalid(exc: RequestValidationError | ValidationError) -> OpenAIError:
    errors = list(exc.errors())
    described: list[str] = []
    for error in errors:
        text = f"{_param(error.get('loc', ()))}: " + str(error.get("msg", "invalid value"))
        text = text.replace("Value error, ", "")
        if text not in described:
            described.append(text)
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return OpenAIError(422, f"the body is not JSON: {first.get('msg')}", code="invalid_json")
    param = _param(first.get("loc", ())) if errors else None
    code = "invalid_value"
    if first.get("type") == "missing":
        code = "missing_required_parameter"
    elif param in _UNSUPPORTED:
        code = "unsupported_value"
    message = "; ".join(described[:5]) or "invalid request"
    return OpenAIError(422, message, code=code, param=param)


def translated(exc: Exception) -> OpenAIError | None:
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, RequestValidationError | ValidationError):
        return _invalid(exc)
    if isinstance(exc, StarletteHTTPException):
        headers = dict(exc.headers) if exc.headers else None
        return OpenAIError(
            exc.status_code, str(exc.detail), code=_CODES.get(exc.status_code), headers=headers
        )
    if isinstance(exc, UNAVAILABLE_ERRORS):
        log.warning("redis_unavailable", error=str(exc))
        return OpenAIError(
            503,
            f"the state store (Redis) is unavailable: {exc}",
            code="service_unavailable",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return None


class OpenAIRoute(APIRoute):
    """A route whose errors (its body's validation, its dependencies' and its own) are
    answered in OpenAI's shape; the application's handlers never see them."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                said = translated(exc)
                if said is None:
                    raise
                return said.response()

        return route


def error_doc(what: str) -> dict[str, Any]:
    return {"model": OpenAIErrorResponse, "description": what}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_doc("A body that cannot be read (not UTF-8)."),
    401: error_doc("A missing or wrong key (`invalid_api_key`)."),
    404: error_doc("No such model (`model_not_found`)."),
    409: error_doc("A request id already in use."),
    422: error_doc("A body that is not a question ragbus can answer as asked."),
    429: error_doc("Past the caller's rate, or its address's wrong keys; `Retry-After` says when."),
    503: error_doc("The bus or the state store is unavailable; `Retry-After` says when."),
}
ANSWER_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    500: error_doc("The request failed: `code` is its error's, `x-request-id` its id."),
    504: error_doc("The request timed out (`request_timeout`, or its step's: `generate_timeout`)."),
}
