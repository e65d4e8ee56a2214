"""The `/v1` query endpoints: submit, status, SSE events and chat, each for its caller's
tenant (`api.auth`); documents are `api.documents`, ingest jobs `api.jobs`, the SSE relay
`api.sse`."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any

import structlog
from fastapi import (
    APIRouter,
    Depends,
    HTTPException,
    Path,
    Query,
    Request,
    Response,
    status,
)
from opentelemetry import trace
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.auth import Caller, CallerDep, authenticate
from api.deps import (
    BusDep,
    EventHubDep,
    JetStreamDep,
    QuotasDep,
    SettingsDep,
    StoreDep,
    SubmitterDep,
)
from api.idempotency import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    Claim,
    Idempotency,
    IdempotencyDep,
    IdempotencyKey,
    fingerprint,
)
from api.schemas import (
    ErrorResponse,
    QueryAccepted,
    QueryRequest,
    QueryView,
    RecentRequest,
    RecentRequests,
    WhoAmI,
)
from api.sse import SSE_DOC, SSE_PING_S, LastEventId, ResumePoint, relay_request, resume_after
from api.submission import Submitter
from contracts import subjects as sj
from contracts.envelope import REQUEST_ID_PATTERN, new_request_id
from contracts.queries import QueryCancelled, QuerySubmitted
from contracts.tenancy import store_namespace
from infra.logging import get_logger
from infra.runtime.redis_client import RETRY_AFTER_S
from infra.settings import Settings
from infra.telemetry import mint_trace
from infra.tenancy.quotas import Quotas, RateLimited, submission_cost
from orchestrator.state import RequestState
from orchestrator.store import RECENT_KEPT, StateExists, StateStore

log = get_logger(__name__)

RequestIdPath = Annotated[
    str, Path(pattern=REQUEST_ID_PATTERN, description="Letters, digits, '_' or '-'; 1-64.")
]

V1_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 422, 429, 503)
}
router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)


# -- queries -----------------------------------------------------------------------------


async def submit_query(
    body: QueryRequest,
    caller: Caller,
    store: StateStore,
    submitter: Submitter,
    settings: Settings,
    idempotency: Idempotency,
    key: str | None,
) -> tuple[QuerySubmitted, bool]:
    """Record the request, then send it (`api.submission`): the saga always finds the state it
    expects. With an `Idempotency-Key` seen before (same body), the earlier request is the
    answer, and it is sent again only if it may never have got under way. The flag says
    whether the request is such an earlier one. FastAPI's span of the HTTP request (`POST
    /v1/queries`) is the root of the request's trace (`infra.telemetry`)."""
    request_id, replayed = new_request_id(), False
    if key is not None:
        claim = Claim(work_id=request_id, fingerprint=fingerprint(body))
        earlier = await idempotency.claim("queries", key, claim)
        if earlier is not None:
            request_id, replayed = earlier.work_id, True
    submitted = QuerySubmitted(
        request_id=request_id,
        tenant=caller.tenant,
        query=body.query,
        session_id=body.session_id,
        namespaces=[store_namespace(caller.tenant, ns) for ns in body.namespaces or ["default"]],
        intent=body.intent,
        top_k=body.top_k or settings.default_top_k,
        filter=body.filter,
        reader=caller.reader,
        mode=body.mode,
        trace=mint_trace(),
    )
    structlog.contextvars.bind_contextvars(request_id=request_id, trace_id=submitted.trace.trace_id)
    attributes: dict[str, str | bool] = {
        "ragbus.request_id": request_id,
        "ragbus.replayed": replayed,
    }
    if caller.user_name is not None:  # whose question, in the trace and the door's log lines
        attributes["ragbus.user"] = caller.user_name
        structlog.contextvars.bind_contextvars(user=caller.user_name)
    trace.get_current_span().set_attributes(attributes)
    fresh = True
    try:
        await submitter.record(store, submitted)
    except StateExists as exc:
        if not replayed:
            raise HTTPException(status.HTTP_409_CONFLICT, "request id already in use") from exc
        fresh = False
    try:
        if fresh:
            await submitter.send(submitted)
        elif not await submitter.send_again(store, submitted):
            return submitted, True
    except Exception as exc:
        log.exception("submit_publish_failed", request_id=request_id)
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            unconfirmed(f"request {request_id}", f"/v1/queries/{request_id}", key),
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from exc
    log.info("query_submitted", request_id=request_id, intent=body.intent, replayed=replayed)
    return submitted, replayed


async def take_submission(quotas: Quotas, caller: Caller, cost: int = 1) -> None:
    """`cost` submissions of the caller's rate (a research request's `submission_cost`), or
    429 with when to come back."""
    try:
        await quotas.take_submission(caller.tenant, caller.limits, cost)
    except RateLimited as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"too many submissions: {exc}; retry after the Retry-After seconds",
            headers={"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))},
        ) from exc


def unconfirmed(what: str, status_url: str, key: str | None) -> str:
    """A 503 that tells the truth: the bus took the message or not, nobody knows which."""
    retry = (
        f"retrying with the same {IDEMPOTENCY_HEADER} runs it once"
        if key is not None
        else f"check GET {status_url} before sending it again, or send an {IDEMPOTENCY_HEADER}"
    )
    return f"the bus is unavailable: it did not confirm {what}, which may still run; {retry}"


@router.post(
    "/queries",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=QueryAccepted,
    summary="Submit a question; answer it asynchronously",
)
async def create_query(
    body: QueryRequest,
    request: Request,
    response: Response,
    caller: CallerDep,
    store: StoreDep,
    submitter: SubmitterDep,
    settings: SettingsDep,
    quotas: QuotasDep,
    idempotency: IdempotencyDep,
    idempotency_key: IdempotencyKey = None,
) -> QueryAccepted:
    await take_submission(quotas, caller, submission_cost(settings, body.mode))
    submitted, replayed = await submit_query(
        body, caller, store, submitter, settings, idempotency, idempotency_key
    )
    rid = submitted.request_id
    accepted = _where(request, rid)
    response.headers["Location"] = accepted.status_url
    if replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return accepted


@router.get("/whoami", response_model=WhoAmI, summary="Who the credentials sent are")
async def whoami(caller: CallerDep, settings: SettingsDep) -> WhoAmI:
    """A page or script checks its key here: 401 when one is needed and missing or wrong."""
    reader = caller.reader
    return WhoAmI(
        tenant=caller.tenant,
        auth_mode=settings.auth,
        user=caller.user_name,
        groups=list(reader.groups) if reader is not None else [],
    )


@router.get(
    "/queries",
    response_model=RecentRequests,
    summary="The caller's latest requests, newest first",
)
async def list_queries(
    caller: CallerDep,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=RECENT_KEPT)] = 20,
) -> RecentRequests:
    if caller.user is None:
        states = await store.recent(caller.tenant, limit)
    else:  # a user's own, among the tenant's latest
        states = [
            state
            for state in await store.recent(caller.tenant, RECENT_KEPT)
            if caller.owns(state.tenant, owner_of(state))
        ][:limit]
    return RecentRequests(
        requests=[
            RecentRequest(
                request_id=state.request_id,
                query=state.query,
                status=state.status,
                created_at=state.created_at,
            )
            for state in states
        ]
    )


@router.get(
    "/queries/{request_id}",
    response_model=QueryView,
    name="get_query",
    summary="A request's status and, once done, its answer",
)
async def get_query(
    request_id: RequestIdPath, caller: CallerDep, store: StoreDep
) -> dict[str, Any]:
    return (await owned_request(store, caller, request_id)).public_view()


@router.delete(
    "/queries/{request_id}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=QueryAccepted,
    summary="Cancel a running request: it ends with `done` and status `cancelled`",
)
async def cancel_query(
    request_id: RequestIdPath,
    request: Request,
    caller: CallerDep,
    store: StoreDep,
    bus: BusDep,
) -> QueryAccepted:
    """Accepted means asked: the saga stops the request when it takes the message (at once,
    unless a step's result gets there first and finishes it). A finished request is 409."""
    state = await owned_request(store, caller, request_id)
    if state.status.is_terminal:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"request {request_id!r} already finished with status {state.status.value!r}",
        )
    cancel = QueryCancelled(
        request_id=request_id, tenant=state.tenant, attempt=state.attempt, trace=state.trace
    )
    try:
        await bus.publish(cancel, sj.QUERY_CANCEL, sj.STREAM_QUERIES)
    except Exception as exc:
        log.exception("cancel_publish_failed", request_id=request_id)
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"the bus is unavailable: the cancellation of {request_id} may not have been "
            f"taken; check GET /v1/queries/{request_id}, then ask again",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from exc
    log.info("query_cancel_requested", request_id=request_id)
    return _where(request, request_id)


def _where(request: Request, request_id: str) -> QueryAccepted:
    """Where to follow a request: its status and its events."""
    return QueryAccepted(
        request_id=request_id,
        status_url=request.app.url_path_for("get_query", request_id=request_id),
        events_url=request.app.url_path_for("query_events", request_id=request_id),
    )


def owner_of(state: RequestState) -> str | None:
    """The user a request belongs to; None: the tenant's key."""
    return state.reader.user if state.reader is not None else None


async def owned_request(store: StateStore, caller: Caller, request_id: str) -> RequestState:
    """The caller's request, or 404: another tenant's, or another user's, answers exactly as
    a missing one (the tenant's key sees every request of its tenant)."""
    state = await store.get(request_id)
    if state is None or not caller.owns(state.tenant, owner_of(state)):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no request {request_id!r}")
    return state


@router.get(
    "/queries/{request_id}/events",
    name="query_events",
    response_class=EventSourceResponse,
    responses=SSE_DOC,
    summary="Replay then follow a request's events (SSE); resumes after Last-Event-ID",
)
async def query_events(
    request_id: RequestIdPath,
    caller: CallerDep,
    store: StoreDep,
    js: JetStreamDep,
    hub: EventHubDep,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    await owned_request(store, caller, request_id)
    after = resume_after(last_event_id)
    relay = relay_request(js, store, caller.tenant, request_id, after, hub)
    return EventSourceResponse(relay, ping=SSE_PING_S)


@router.post(
    "/chat",
    response_class=EventSourceResponse,
    responses=SSE_DOC,
    summary="Submit a question and stream its events in one response (SSE)",
)
async def chat(
    body: QueryRequest,
    caller: CallerDep,
    store: StoreDep,
    submitter: SubmitterDep,
    js: JetStreamDep,
    hub: EventHubDep,
    settings: SettingsDep,
    quotas: QuotasDep,
    idempotency: IdempotencyDep,
    idempotency_key: IdempotencyKey = None,
) -> EventSourceResponse:
    """With an `Idempotency-Key` seen before, the earlier request's events from the start."""
    await take_submission(quotas, caller, submission_cost(settings, body.mode))
    submitted, replayed = await submit_query(
        body, caller, store, submitter, settings, idempotency, idempotency_key
    )

    async def stream() -> AsyncIterator[ServerSentEvent | bytes]:
        yield ServerSentEvent(
            data=json.dumps({"request_id": submitted.request_id}), event="submitted"
        )
        relay = relay_request(js, store, caller.tenant, submitted.request_id, ResumePoint(), hub)
        async with aclosing(relay):
            async for message in relay:
                yield message

    headers = {REPLAYED_HEADER: "true"} if replayed else None
    return EventSourceResponse(stream(), ping=SSE_PING_S, headers=headers)
