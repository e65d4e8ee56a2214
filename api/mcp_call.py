"""What a call of one of ragbus's MCP tools is (`api.mcp_tools`): who asked, through which HTTP
request, where its progress goes (`Call`); what a tool is and what it gives back (`Tool`,
`Outcome`); and a refusal in words (`ToolRefused`: the route's `HTTPException`, a validation
error, Redis out of reach, said as the tool error a model reads, `run_tool`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from api.asking import Door
from api.auth import Caller
from api.idempotency import Idempotency
from infra.logging import get_logger
from infra.runtime.redis_client import UNAVAILABLE_ERRORS
from infra.tenancy.quotas import Quotas

log = get_logger(__name__)


class ToolRefused(Exception):
    """What a tool could not do, in words for the model: the call's result is a tool error."""


Progress = Callable[[float, str], Awaitable[None]]
"""Report progress: the count so far and what happened (a no-op when the client gave no
progress token)."""


@dataclass(frozen=True)
class Call:
    """One tool call: who asked, through which HTTP request (its app is the API, whose
    lifespan opened the connections), and where its progress goes."""

    caller: Caller
    request: Request
    progress: Progress

    @property
    def state(self) -> Any:
        return self.request.app.state

    @property
    def door(self) -> Door:
        return Door.of(self.state)

    @property
    def quotas(self) -> Quotas:
        return Quotas(self.state.redis)

    def idempotency(self) -> Idempotency:
        return Idempotency(
            self.state.redis, self.state.settings.idempotency_ttl_s, self.caller.space
        )


@dataclass(frozen=True)
class Outcome:
    """A tool's result: the text the model reads, and the structured content."""

    text: str
    structured: BaseModel


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    arguments: type[BaseModel]
    result: type[BaseModel]
    run: Callable[[Call, Any], Awaitable[Outcome]]
    read_only: bool


# -- refusals in words ---------------------------------------------------------------------

_STATUS_WORDS = {
    400: "bad request",
    401: "unauthorized",
    404: "not found",
    409: "conflict",
    413: "too large",
    415: "unsupported file",
    422: "invalid",
    429: "too many requests",
    503: "unavailable",
    507: "insufficient storage",
}


def refusal(exc: HTTPException) -> str:
    """A route's refusal as a tool error's message: its status, its reason, and for a 429 (or
    a 503) when to try again."""
    message = f"{exc.status_code} {_STATUS_WORDS.get(exc.status_code, 'error')}: {exc.detail}"
    retry = (exc.headers or {}).get("Retry-After")
    if retry:
        message += f" (retry after {retry} s)"
    return message


def _where(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "arguments"


def invalid(exc: ValidationError | RequestValidationError) -> str:
    """422 with each field and what is wrong with it, as the API's validation errors say it."""
    described = [
        f"{_where(e.get('loc', ()))}: {str(e.get('msg', 'invalid')).removeprefix('Value error, ')}"
        for e in exc.errors()
    ]
    return "422 invalid: " + "; ".join(described)


async def run_tool(tool: Tool, call: Call, arguments: dict[str, Any]) -> Outcome:
    """Validate the arguments and run the tool; `ToolRefused` with the reason for anything the
    caller can act on (its arguments, a route's refusal, Redis out of reach)."""
    try:
        args = tool.arguments.model_validate(arguments)
    except ValidationError as exc:
        raise ToolRefused(invalid(exc)) from None
    try:
        return await tool.run(call, args)
    except HTTPException as exc:
        raise ToolRefused(refusal(exc)) from None
    except RequestValidationError as exc:
        raise ToolRefused(invalid(exc)) from None
    except UNAVAILABLE_ERRORS as exc:
        log.warning("redis_unavailable", tool=tool.name, error=str(exc))
        raise ToolRefused(
            f"503 unavailable: the state store (Redis) is unavailable ({exc}); try again shortly"
        ) from None
