"""The `/v1` endpoints: submit, status, SSE events, chat, and document ingestion."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any

import redis.asyncio as aioredis
from fastapi import (
    APIRouter,
    Depends,
    Header,
    HTTPException,
    Path,
    Query,
    Request,
    Response,
    status,
)
from nats.js import JetStreamContext
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.deps import (
    BusDep,
    IdempotencyDep,
    JetStreamDep,
    NatsDep,
    RedisDep,
    SettingsDep,
    StoreDep,
    require_token,
)
from api.event_stream import last_sequence, request_events
from api.idempotency import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    Claim,
    Idempotency,
    IdempotencyKey,
    fingerprint,
)
from api.schemas import (
    DocumentsRequest,
    ErrorResponse,
    IngestAccepted,
    JobView,
    QueryAccepted,
    QueryRequest,
    QueryView,
)
from contracts import subjects as sj
from contracts.enums import RequestStatus
from contracts.envelope import REQUEST_ID_PATTERN, new_request_id
from contracts.ingest import DOCUMENT_ID_PATTERN
from contracts.queries import NAMESPACE_PATTERN, QuerySubmitted
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.runtime.ingest_jobs import open_job, read_job
from infra.runtime.ingest_producer import (
    DocumentTooLarge,
    JobReceipt,
    check_sizes,
    publish_deletion,
    publish_job,
)
from infra.runtime.redis_client import RETRY_AFTER_S
from infra.settings import Settings
from orchestrator.store import StateExists, StateStore

log = get_logger(__name__)

SSE_PING_S = 15

RequestIdPath = Annotated[
    str, Path(pattern=REQUEST_ID_PATTERN, description="Letters, digits, '_' or '-'; 1-64.")
]
JobIdPath = Annotated[
    str, Path(pattern=REQUEST_ID_PATTERN, description="Letters, digits, '_' or '-'; 1-64.")
]
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=20,
        pattern=r"^(\d+|null|)$",
        description="Resume after this stream sequence (the `id` of the last event received); "
        "empty or `null` starts from the beginning.",
    ),
]

_errors: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 422, 503)
}
router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=_errors)


# -- queries -----------------------------------------------------------------------------


async def submit_query(
    body: QueryRequest,
    store: StateStore,
    bus: Bus,
    settings: Settings,
    idempotency: Idempotency,
    key: str | None,
) -> tuple[QuerySubmitted, bool]:
    """Record the request, then publish it: the orchestrator always finds the state it expects.
    With an `Idempotency-Key` seen before (same body), the earlier request is the answer, and
    it is published again only if it may never have reached the bus. The flag says whether
    the request is such an earlier one."""
    request_id, replayed = new_request_id(), False
    if key is not None:
        claim = Claim(work_id=request_id, fingerprint=fingerprint(body))
        earlier = await idempotency.claim("queries", key, claim)
        if earlier is not None:
            request_id, replayed = earlier.work_id, True
    submitted = QuerySubmitted(
        request_id=request_id,
        query=body.query,
        session_id=body.session_id,
        namespaces=body.namespaces or ["default"],
        intent=body.intent,
        top_k=body.top_k or settings.default_top_k,
        mode=body.mode,
    )
    try:
        await store.create(submitted)
    except StateExists as exc:
        if not replayed:
            raise HTTPException(status.HTTP_409_CONFLICT, "request id already in use") from exc
        state = await store.get(request_id)
        if state is None or state.status is not RequestStatus.SUBMITTED:
            return submitted, True  # under way (or finished): nothing to send again
    try:
        await bus.publish(submitted, sj.QUERY_SUBMITTED, sj.STREAM_QUERIES)
    except Exception as exc:
        log.exception("submit_publish_failed", request_id=request_id)
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            _unconfirmed(f"request {request_id}", f"/v1/queries/{request_id}", key),
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from exc
    log.info("query_submitted", request_id=request_id, intent=body.intent, replayed=replayed)
    return submitted, replayed


def _unconfirmed(what: str, status_url: str, key: str | None) -> str:
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
    store: StoreDep,
    bus: BusDep,
    settings: SettingsDep,
    idempotency: IdempotencyDep,
    idempotency_key: IdempotencyKey = None,
) -> QueryAccepted:
    submitted, replayed = await submit_query(
        body, store, bus, settings, idempotency, idempotency_key
    )
    rid = submitted.request_id
    accepted = QueryAccepted(
        request_id=rid,
        status_url=request.app.url_path_for("get_query", request_id=rid),
        events_url=request.app.url_path_for("query_events", request_id=rid),
    )
    response.headers["Location"] = accepted.status_url
    if replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return accepted


@router.get(
    "/queries/{request_id}",
    response_model=QueryView,
    name="get_query",
    summary="A request's status and, once done, its answer",
)
async def get_query(request_id: RequestIdPath, store: StoreDep) -> dict[str, Any]:
    state = await store.get(request_id)
    if state is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no request {request_id!r}")
    return state.public_view()


def _sse(seq: int, event: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(
        data=json.dumps(event, separators=(",", ":")),
        event=str(event.get("type", "message")),
        id=str(seq),
    )


async def _relay(
    js: JetStreamContext, store: StateStore, request_id: str, after_seq: int
) -> AsyncGenerator[ServerSentEvent]:
    """Caller events as SSE, up to the `done` the stream holds; if the events expired, a
    `done` from the state (with an id, like every event)."""

    async def finished() -> bool:
        state = await store.get(request_id)
        return state is None or state.status.is_terminal

    saw_done = False
    events = request_events(js, request_id, after_seq, is_finished=finished)
    async with aclosing(events):
        async for seq, event in events:
            saw_done = event.get("type") == "done"
            yield _sse(seq, event)
    if not saw_done and (state := await store.get(request_id)) is not None:
        # Every event the stream holds was relayed and none was `done`: they expired. The
        # `done` comes from the state, with an id a resuming client can send back.
        seq = max(
            after_seq, await last_sequence(js, sj.STREAM_EVENTS, sj.events_subject(request_id))
        )
        done = {
            "type": "done",
            "request_id": request_id,
            "seq": seq,
            "data": {"status": state.status.value},
        }
        yield _sse(seq, done)


_SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "Server-sent events."}
}


@router.get(
    "/queries/{request_id}/events",
    name="query_events",
    response_class=EventSourceResponse,
    responses=_SSE_DOC,
    summary="Replay then follow a request's events (SSE); resumes after Last-Event-ID",
)
async def query_events(
    request_id: RequestIdPath,
    store: StoreDep,
    js: JetStreamDep,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    if await store.get(request_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no request {request_id!r}")
    after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
    return EventSourceResponse(_relay(js, store, request_id, after), ping=SSE_PING_S)


@router.post(
    "/chat",
    response_class=EventSourceResponse,
    responses=_SSE_DOC,
    summary="Submit a question and stream its events in one response (SSE)",
)
async def chat(
    body: QueryRequest,
    store: StoreDep,
    bus: BusDep,
    js: JetStreamDep,
    settings: SettingsDep,
    idempotency: IdempotencyDep,
    idempotency_key: IdempotencyKey = None,
) -> EventSourceResponse:
    """With an `Idempotency-Key` seen before, the earlier request's events from the start."""
    submitted, replayed = await submit_query(
        body, store, bus, settings, idempotency, idempotency_key
    )

    async def stream() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(
            data=json.dumps({"request_id": submitted.request_id}), event="submitted"
        )
        relay = _relay(js, store, submitted.request_id, 0)
        async with aclosing(relay):
            async for message in relay:
                yield message

    headers = {REPLAYED_HEADER: "true"} if replayed else None
    return EventSourceResponse(stream(), ping=SSE_PING_S, headers=headers)


# -- ingestion ---------------------------------------------------------------------------


async def _start_job(
    request: Request,
    response: Response,
    redis: aioredis.Redis,
    settings: Settings,
    publish: Callable[[str], Awaitable[JobReceipt]],
    idempotent: tuple[Idempotency, str, str] | None = None,
) -> IngestAccepted:
    """Make the job readable, publish it, and answer 202 with where to follow it.
    `idempotent` = (the store, the key, the body's fingerprint): a key whose job was accepted
    answers with that job; one whose job is still being published answers 409."""
    job_id = new_request_id()
    if idempotent is not None:
        idempotency, key, body_print = idempotent
        earlier = await idempotency.claim(
            "documents", key, Claim(work_id=job_id, fingerprint=body_print)
        )
        if earlier is not None:
            if earlier.receipt is None:
                raise HTTPException(
                    status.HTTP_409_CONFLICT,
                    f"job {earlier.work_id} with this {IDEMPOTENCY_HEADER} is still being queued",
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )
            response.headers["Location"] = str(earlier.receipt["status_url"])
            response.headers[REPLAYED_HEADER] = "true"
            return IngestAccepted.model_validate(earlier.receipt)
    try:
        await open_job(redis, job_id, settings.state_ttl_s)
        receipt = await publish(job_id)
    except Exception as exc:
        log.exception("ingest_publish_failed", job_id=job_id)
        if idempotent is not None:
            await idempotent[0].release("documents", idempotent[1])
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            _unconfirmed(
                f"ingest job {job_id}",
                f"/v1/ingest/{job_id}",
                idempotent[1] if idempotent is not None else None,
            ),
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from exc
    accepted = IngestAccepted(
        job_id=receipt.job_id,
        accepted=receipt.accepted,
        duplicates=receipt.duplicates,
        status_url=request.app.url_path_for("get_job", job_id=receipt.job_id),
    )
    if idempotent is not None:
        idempotency, key, body_print = idempotent
        done = Claim(work_id=job_id, fingerprint=body_print, receipt=accepted.model_dump())
        await idempotency.accepted("documents", key, done)
    response.headers["Location"] = accepted.status_url
    return accepted


@router.post(
    "/documents",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestAccepted,
    responses={413: {"model": ErrorResponse, "description": "A document exceeds the bus's limit."}},
    summary="Queue documents for indexing as one ingest job",
    description="The batch is accepted whole or refused whole: a document the bus cannot carry "
    "(larger than the NATS server's max_payload as a message) refuses the batch with 413, "
    "naming it, before anything is queued.",
)
async def ingest_documents(
    body: DocumentsRequest,
    request: Request,
    response: Response,
    bus: BusDep,
    redis: RedisDep,
    nc: NatsDep,
    settings: SettingsDep,
    idempotency: IdempotencyDep,
    idempotency_key: IdempotencyKey = None,
) -> IngestAccepted:
    try:
        check_sizes(body.documents, nc.max_payload)
    except DocumentTooLarge as exc:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from exc
    return await _start_job(
        request,
        response,
        redis,
        settings,
        lambda job_id: publish_job(bus, body.documents, job_id=job_id),
        None if idempotency_key is None else (idempotency, idempotency_key, fingerprint(body)),
    )


@router.delete(
    "/documents/{document_id}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestAccepted,
    summary="Remove a document's chunks, vectors and graph facts everywhere",
)
async def delete_document(
    document_id: Annotated[str, Path(min_length=1, max_length=256, pattern=DOCUMENT_ID_PATTERN)],
    request: Request,
    response: Response,
    bus: BusDep,
    redis: RedisDep,
    settings: SettingsDep,
    namespace: Annotated[str, Query(pattern=NAMESPACE_PATTERN)] = "default",
) -> IngestAccepted:
    return await _start_job(
        request,
        response,
        redis,
        settings,
        lambda job_id: publish_deletion(bus, namespace, document_id, job_id=job_id),
    )


@router.get(
    "/ingest/{job_id}",
    response_model=JobView,
    name="get_job",
    summary="An ingest job's progress and counts",
)
async def get_job(job_id: JobIdPath, redis: RedisDep) -> JobView:
    job = await read_job(redis, job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no ingest job {job_id!r}")
    return JobView.model_validate({**job, "job_id": job_id})
