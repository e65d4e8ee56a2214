"""The `/v1` ingest jobs: how one is started, and how its caller follows it.

A job is what the document endpoints (`api.documents`) answer with: `start_job` makes it
readable in Redis before anything is published, publishes it, and says where to follow it,
once per `Idempotency-Key`. `GET /v1/ingest/{job_id}` is its counts, its `events` the progress
as SSE (`api.sse`); a job answers only to its tenant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Depends, HTTPException, Path, Response, status
from sse_starlette import EventSourceResponse

from api.auth import Caller, CallerDep, authenticate
from api.deps import JetStreamDep, RedisDep
from api.event_stream import INGEST_TERMINAL, ingest_events, one_each
from api.idempotency import IDEMPOTENCY_HEADER, REPLAYED_HEADER, Claim, Idempotency
from api.routes import V1_ERRORS, unconfirmed
from api.schemas import IngestAccepted, JobView
from api.sse import SSE_DOC, SSE_PING_S, LastEventId, as_sse, resume_after, to_end
from contracts import subjects as sj
from contracts.envelope import REQUEST_ID_PATTERN, new_request_id
from contracts.ingest import IngestProgress, JobCounts
from infra.logging import get_logger
from infra.runtime.ingest_jobs import open_job, read_job
from infra.runtime.ingest_producer import JobReceipt
from infra.runtime.redis_client import RETRY_AFTER_S
from infra.settings import Settings

log = get_logger(__name__)

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)

COUNT_FIELDS = frozenset(JobCounts.model_fields)

JobIdPath = Annotated[
    str, Path(pattern=REQUEST_ID_PATTERN, description="Letters, digits, '_' or '-'; 1-64.")
]


def job_status_url(job_id: str) -> str:
    return f"/v1/ingest/{job_id}"


def job_events_url(job_id: str) -> str:
    return f"/v1/ingest/{job_id}/events"


async def start_job(
    caller: Caller,
    redis: aioredis.Redis,
    settings: Settings,
    publish: Callable[[str], Awaitable[JobReceipt]],
    idempotent: tuple[Idempotency, str, str] | None = None,
) -> tuple[IngestAccepted, bool]:
    """Make the job readable, publish it, and say where to follow it, and whether the answer
    is an earlier one replayed. `idempotent` = (the store, the key, the body's fingerprint): a
    key whose job was accepted answers with that job; one whose job is still being published
    answers 409."""
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
            return IngestAccepted.model_validate(earlier.receipt), True
    try:
        await open_job(redis, job_id, settings.state_ttl_s, caller.tenant, caller.user_name)
        receipt = await publish(job_id)
    except Exception as exc:
        log.exception("ingest_publish_failed", job_id=job_id)
        if idempotent is not None:
            await idempotent[0].release("documents", idempotent[1])
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            unconfirmed(
                f"ingest job {job_id}",
                job_status_url(job_id),
                idempotent[1] if idempotent is not None else None,
            ),
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from exc
    accepted = IngestAccepted(
        job_id=receipt.job_id,
        accepted=receipt.accepted,
        duplicates=receipt.duplicates,
        status_url=job_status_url(receipt.job_id),
        events_url=job_events_url(receipt.job_id),
    )
    if idempotent is not None:
        idempotency, key, body_print = idempotent
        done = Claim(work_id=job_id, fingerprint=body_print, receipt=accepted.model_dump())
        await idempotency.accepted("documents", key, done)
    return accepted, False


def answer(response: Response, started: tuple[IngestAccepted, bool]) -> IngestAccepted:
    """A started job as the endpoint answers it: where to follow it (`Location`), and whether
    the answer is an earlier one replayed."""
    accepted, replayed = started
    response.headers["Location"] = accepted.status_url
    if replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return accepted


@router.get(
    "/ingest/{job_id}",
    response_model=JobView,
    name="get_job",
    summary="An ingest job's progress and counts",
)
async def get_job(job_id: JobIdPath, caller: CallerDep, redis: RedisDep) -> JobView:
    job = await _owned_job(redis, caller, job_id)
    return JobView.model_validate({**job, "job_id": job_id})


async def _owned_job(redis: aioredis.Redis, caller: Caller, job_id: str) -> dict[str, Any]:
    job = await read_job(redis, job_id)
    if job is None or not caller.owns(job["tenant"], job.get("user")):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no ingest job {job_id!r}")
    return job


@router.get(
    "/ingest/{job_id}/events",
    name="job_events",
    response_class=EventSourceResponse,
    responses=SSE_DOC,
    summary="Replay then follow an ingest job's progress (SSE); resumes after Last-Event-ID",
)
async def job_events(
    job_id: JobIdPath,
    caller: CallerDep,
    redis: RedisDep,
    js: JetStreamDep,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """`progress` events, each the job's counts after one document, until the one whose
    status is `completed` or `failed`. Events that expired are summed up by one from the
    job's record, with an id like every event."""
    await _owned_job(redis, caller, job_id)
    after = resume_after(last_event_id).seq  # progress events are one a message

    async def finished() -> bool:
        job = await read_job(redis, job_id)
        return job is None or job["status"] in INGEST_TERMINAL

    async def progress_from_job(_: int) -> dict[str, Any] | None:
        job = await read_job(redis, job_id)
        if job is None:
            return None
        counts = JobCounts.model_validate({k: v for k, v in job.items() if k in COUNT_FIELDS})
        progress = IngestProgress(request_id=job_id, tenant=caller.tenant, data=counts.model_dump())
        return progress.model_dump(mode="json")

    relay = as_sse(
        to_end(
            one_each(ingest_events(js, job_id, after, is_finished=finished)),
            ends=lambda event: (event.get("data") or {}).get("status") in INGEST_TERMINAL,
            stream=(js, sj.STREAM_INGEST_EVENTS, sj.ingest_events_subject(job_id), after),
            summary=progress_from_job,
        ),
        name="progress",
    )
    return EventSourceResponse(relay, ping=SSE_PING_S)
