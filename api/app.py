"""The HTTP API: an application factory, its connections, and one error shape.

The API is a producer and a reader, never a consumer of work: it publishes through
the FastStream broker (its own, or the launcher's when one process runs everything)
and reads caller events with JetStream ordered consumers on a separate nats-py
connection, so a slow SSE client never shares flow control with publishing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import nats
from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from faststream.nats import NatsBroker
from starlette.exceptions import HTTPException as StarletteHTTPException

from api import (
    admin,
    catalogue,
    documents,
    jobs,
    openai_chat,
    ops,
    reference,
    routes,
    sessions,
    sources,
    tools,
    users,
    web,
)
from api.event_hub import EventHub
from api.gate import CallerGate
from api.intake import Intake
from api.limits import BodyLimit
from api.mcp_door import McpDoor
from api.schemas import ErrorDetail, ErrorResponse
from infra.logging import get_logger
from infra.runtime.bus import Bus, create_broker
from infra.runtime.redis_client import RETRY_AFTER_S, UNAVAILABLE_ERRORS, redis_for
from infra.runtime.services import redacted
from infra.settings import Settings, get_settings
from infra.telemetry import tracing_on
from orchestrator.store import StateStore

if TYPE_CHECKING:
    from orchestrator.service import Orchestrator

log = get_logger(__name__)

_ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    503: "unavailable",
    507: "insufficient_storage",
}
_LOCATIONS = ("body", "path", "query", "header", "cookie")


def create_app(
    settings: Settings | None = None,
    *,
    broker: NatsBroker | None = None,
    orchestrator: Orchestrator | None = None,
) -> FastAPI:
    """Build the app; connections open in its lifespan, so building it is free (`openapi`).
    Given the `orchestrator` of its process, it hands questions to that saga in process
    (`api.submission`, `RAGBUS_SUBMIT_IN_PROCESS`)."""
    settings = settings or get_settings()
    mcp = McpDoor(version="0.1.0")  # MCP over streamable HTTP at /mcp (`api.mcp_door`)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            publisher = broker
            if publisher is None:
                publisher = create_broker(settings, name="ragbus-api")
                await publisher.connect()
                stack.push_async_callback(publisher.stop)
            nc = await nats.connect(
                settings.nats_servers,
                name="ragbus-api-events",
                user_credentials=settings.nats_credentials,
            )
            stack.push_async_callback(nc.drain)
            redis = redis_for(settings)
            stack.push_async_callback(redis.aclose)

            app.state.bus = Bus(publisher)
            app.state.nc = nc
            app.state.js = nc.jetstream()
            if settings.shared_event_consumer:
                app.state.event_hub = await stack.enter_async_context(EventHub(app.state.js))
            app.state.redis = redis
            app.state.store = StateStore(redis, settings)
            if orchestrator is not None and settings.submit_in_process:
                app.state.saga = orchestrator
                app.state.store = orchestrator.store  # its state cache: see `api.submission`
            if settings.auth == "tenants":  # tenants' batches over the bus (`api.intake`)
                intake = Intake(nc, app.state.bus, redis, settings)
                await intake.start()
                stack.push_async_callback(intake.stop)
            await stack.enter_async_context(mcp.running(settings))
            log.info("api_started", auth=settings.auth, nats=redacted(settings.nats_url))
            yield
        log.info("api_stopped")

    app = FastAPI(
        title="ragbus",
        version="0.1.0",
        summary="Event-driven agentic RAG over NATS JetStream.",
        description=(
            "Submit a question and get a request id at once; follow its phases, answer tokens "
            "and cited answer over server-sent events, or poll its status. Documents are "
            "ingested as jobs whose progress is an event stream too."
        ),
        lifespan=lifespan,
        # FastAPI's own reference loads Swagger UI and ReDoc from a CDN and takes no key:
        # `api.reference` serves /openapi.json and /docs instead.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        # FastAPI's own span of each HTTP request is the root of a question's trace, on the
        # provider `infra.telemetry` installs; nothing when tracing is off (its wrapper cost
        # 2.5 % of the API process's CPU even with no SDK), and no span per dependency and
        # serialisation, no OTel metrics or logs (Prometheus and structlog have them).
        telemetry={
            "tracing": tracing_on(),
            "metrics": False,
            "logs": False,
            "operation_spans": False,
        },
    )
    app.state.settings = settings
    app.include_router(routes.router)
    app.include_router(documents.router)
    app.include_router(jobs.router)
    app.include_router(catalogue.router)
    app.include_router(sessions.router)
    app.include_router(tools.router)
    app.include_router(users.router)
    app.include_router(sources.router)
    app.include_router(openai_chat.router)
    app.include_router(admin.router)
    app.include_router(ops.router)
    app.include_router(web.router)
    app.include_router(reference.router)
    mcp.mount(app)
    app.add_middleware(BodyLimit)  # bodies bounded before any route reads one
    app.add_middleware(CallerGate)  # outermost: a caller's requests at once, counted first
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    for error in UNAVAILABLE_ERRORS:
        app.add_exception_handler(error, _state_store_unavailable)
    return app


def _error(
    status_code: int,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    code = _ERROR_CODES.get(status_code, f"http_{status_code}")
    body = ErrorResponse(error=ErrorDetail(code=code, message=message, field=field))
    return JSONResponse(
        body.model_dump(exclude_none=True), status_code=status_code, headers=headers
    )


def _field_name(loc: Sequence[Any]) -> str:
    """`("body", "namespaces", 0)` -> `namespaces.0`; a missing body is just `body`."""
    parts = list(loc[1:]) if loc and loc[0] in _LOCATIONS else list(loc)
    return ".".join(str(part) for part in parts) or str(loc[0] if loc else "body")


def _message(error: dict[str, Any]) -> str:
    return str(error.get("msg", "invalid value")).removeprefix("Value error, ")


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if not errors:
        return _error(status.HTTP_422_UNPROCESSABLE_CONTENT, "invalid request")
    described = [f"{_field_name(e.get('loc', ()))}: {_message(e)}" for e in errors]
    return _error(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        "; ".join(described),
        field=_field_name(errors[0].get("loc", ())),
    )


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = getattr(exc, "headers", None)
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        # Starlette names the methods of the first route on the path; a path served by two
        # routes (GET and POST /v1/admin/tenants) answers with all of them.
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    return _error(exc.status_code, str(exc.detail), headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, APIRoute) and route.path_regex.match(request.url.path):
            methods |= route.methods or set()
    return sorted(methods)


async def _state_store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """Redis is unreachable (or stopped answering): the request could not be served."""
    log.warning("redis_unavailable", path=request.url.path, error=str(exc))
    return _error(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        f"the state store (Redis) is unavailable: {exc}",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )
