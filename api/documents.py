"""The `/v1` document endpoints: ingest a batch as a job, delete a document, follow a job.

Each acts for its caller's tenant (`api.auth`): the caller's namespaces are kept in the stores
under the tenant's name (`contracts.tenancy.store_namespace`), its documents count against its
limits (`infra.tenancy.quotas`), and its jobs answer only to it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import quote

import redis.asyncio as aioredis
from fastapi import (
    APIRouter,
    Body,
    Depends,
    HTTPException,
    Path,
    Query,
    Request,
    Response,
    status,
)
from fastapi.exceptions import RequestValidationError
from nats.js import JetStreamContext
from sse_starlette import EventSourceResponse

from api.auth import Caller, CallerDep, authenticate
from api.deps import BusDep, JetStreamDep, NatsDep, QuotasDep, RedisDep, SettingsDep
from api.event_stream import INGEST_TERMINAL, ingest_events, one_each
from api.idempotency import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    Claim,
    Idempotency,
    IdempotencyDep,
    IdempotencyKey,
    fingerprint,
)
from api.routes import V1_ERRORS, take_submission, unconfirmed
from api.schemas import (
    DOCUMENT_FILES_ENCODING,
    DOCUMENT_FILES_SCHEMA,
    DocumentEntry,
    DocumentList,
    DocumentsRequest,
    DocumentUpload,
    ErrorResponse,
    IngestAccepted,
    JobView,
    NamespaceCount,
    Namespaces,
)
from api.sse import SSE_DOC, SSE_PING_S, LastEventId, relay_to_end, resume_after
from api.uploads import (
    MULTIPART,
    MULTIPART_RECEIVE,
    FileBatch,
    FilesOrJsonRoute,
    file_batch,
)
from contracts import subjects as sj
from contracts.envelope import REQUEST_ID_PATTERN, new_request_id
from contracts.ingest import (
    DOCUMENT_ID_PATTERN,
    DocumentIn,
    FileDocument,
    IngestProgress,
    JobCounts,
)
from contracts.queries import MAX_CALLER_NAMESPACE_CHARS, NAMESPACE_PATTERN
from contracts.tenancy import caller_namespace, store_namespace
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.runtime.files import FileStore
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
from infra.tenancy.quotas import DocumentSize, QuotaExceeded, Quotas

log = get_logger(__name__)

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)

NamespaceQuery = Annotated[
    str, Query(pattern=NAMESPACE_PATTERN, max_length=MAX_CALLER_NAMESPACE_CHARS)
]
COUNT_FIELDS = frozenset(JobCounts.model_fields)
MAX_LISTED = 1000
"""Documents `GET /v1/documents` lists at most."""

JobIdPath = Annotated[
    str, Path(pattern=REQUEST_ID_PATTERN, description="Letters, digits, '_' or '-'; 1-64.")
]


def stored(caller: Caller, upload: DocumentUpload) -> DocumentIn:
    """A caller's document as the bus and the stores take it: in the tenant's namespace."""
    fields = upload.model_dump()
    fields["namespace"] = store_namespace(caller.tenant, upload.namespace)
    return DocumentIn.model_validate(fields)


def job_status_url(job_id: str) -> str:
    return f"/v1/ingest/{job_id}"


def job_events_url(job_id: str) -> str:
    return f"/v1/ingest/{job_id}/events"


async def _start_job(
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
        await open_job(redis, job_id, settings.state_ttl_s, caller.tenant)
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


def _answer(response: Response, started: tuple[IngestAccepted, bool]) -> IngestAccepted:
    accepted, replayed = started
    response.headers["Location"] = accepted.status_url
    if replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return accepted


async def charge(quotas: Quotas, caller: Caller, sizes: list[DocumentSize]) -> None:
    """Count a batch's documents against the caller's limits, or refuse it whole with 429."""
    try:
        await quotas.accept_documents(caller.tenant, sizes, caller.limits)
    except QuotaExceeded as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"the batch is refused whole: {exc}; delete documents, or ask for a larger limit",
        ) from exc


async def accept_batch(
    caller: Caller,
    body: DocumentsRequest,
    *,
    bus: Bus,
    redis: aioredis.Redis,
    max_payload: int,
    settings: Settings,
    quotas: Quotas,
    idempotency: Idempotency,
    idempotency_key: str | None,
) -> tuple[IngestAccepted, bool]:
    """A batch of the caller's documents, checked, charged and queued as one job, as
    `POST /v1/documents` and a tenant's batches over the bus (`api.intake`) take it alike;
    refused with the HTTP error it answers."""
    await take_submission(quotas, caller)
    documents = [stored(caller, upload) for upload in body.documents]
    try:
        check_sizes(documents, max_payload)
    except DocumentTooLarge as exc:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from exc
    sizes = [DocumentSize(d.namespace, d.id, len(d.text.encode())) for d in documents]
    await charge(quotas, caller, sizes)
    return await _start_job(
        caller,
        redis,
        settings,
        lambda job_id: publish_job(bus, documents, job_id=job_id),
        None if idempotency_key is None else (idempotency, idempotency_key, fingerprint(body)),
    )


async def accept_files(
    caller: Caller,
    batch: FileBatch,
    *,
    bus: Bus,
    redis: aioredis.Redis,
    files: FileStore,
    settings: Settings,
    quotas: Quotas,
    idempotency: Idempotency,
    idempotency_key: str | None,
) -> tuple[IngestAccepted, bool]:
    """A batch of the caller's files, charged (each file's bytes against the tenant's limit)
    and queued as one job: each file put into the object store under the caller's namespace,
    then a message per file for the parse workers."""
    space = store_namespace(caller.tenant, batch.namespace)
    sizes = [DocumentSize(space, f.document_id, f.size) for f in batch.files]
    await charge(quotas, caller, sizes)

    async def publish(job_id: str) -> JobReceipt:
        documents = []
        for upload in batch.files:
            await upload.upload.seek(0)
            data = await upload.upload.read()
            ref = await files.put(
                space, upload.document_id, data, upload.filename, upload.media_type
            )
            documents.append(
                FileDocument(
                    id=upload.document_id, metadata=batch.metadata, namespace=space, file=ref
                )
            )
        return await publish_job(bus, documents, job_id=job_id)

    idempotent = None
    if idempotency_key is not None:
        idempotent = (idempotency, idempotency_key, batch.fingerprint())
    return await _start_job(caller, redis, settings, publish, idempotent)


async def get_files(request: Request, js: JetStreamDep, settings: SettingsDep) -> FileStore:
    """The object store of the uploaded files, on the API's JetStream connection."""
    held: tuple[JetStreamContext, FileStore] | None = getattr(request.app.state, "files", None)
    if held is None or held[0] is not js:
        held = (js, FileStore(js, settings, settings.publish_retry_s))
        request.app.state.files = held
    return held[1]


FilesDep = Annotated[FileStore, Depends(get_files)]


async def ingest_documents(
    request: Request,
    response: Response,
    caller: CallerDep,
    bus: BusDep,
    redis: RedisDep,
    nc: NatsDep,
    settings: SettingsDep,
    quotas: QuotasDep,
    idempotency: IdempotencyDep,
    files: FilesDep,
    idempotency_key: IdempotencyKey = None,
    body: Annotated[DocumentsRequest, Body()] = None,  # type: ignore[assignment]
) -> IngestAccepted:
    if body is not None:
        started = await accept_batch(
            caller,
            body,
            bus=bus,
            redis=redis,
            max_payload=nc.max_payload,
            settings=settings,
            quotas=quotas,
            idempotency=idempotency,
            idempotency_key=idempotency_key,
        )
        return _answer(response, started)
    if MULTIPART_RECEIVE not in request.scope:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    await take_submission(quotas, caller)
    async with file_batch(request, settings.max_file_bytes) as batch:
        started = await accept_files(
            caller,
            batch,
            bus=bus,
            redis=redis,
            files=files,
            settings=settings,
            quotas=quotas,
            idempotency=idempotency,
            idempotency_key=idempotency_key,
        )
    return _answer(response, started)


router.add_api_route(
    "/documents",
    ingest_documents,
    methods=["POST"],
    route_class_override=FilesOrJsonRoute,
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestAccepted,
    responses={
        400: {"model": ErrorResponse, "description": "A multipart body that cannot be read."},
        413: {
            "model": ErrorResponse,
            "description": "A document exceeds the bus's limit, or a file RAGBUS_MAX_FILE_BYTES.",
        },
        415: {"model": ErrorResponse, "description": "A file of a kind not read."},
        429: {
            "model": ErrorResponse,
            "description": "Over the tenant's submission rate (with Retry-After), or the batch "
            "would take its documents, namespaces or bytes over their limits.",
        },
    },
    summary="Queue documents, or files to parse, for indexing as one ingest job",
    description="Two kinds of body. JSON: documents as text. `multipart/form-data`: files "
    "(PDF with a text layer or scanned, Word .docx, PowerPoint .pptx, HTML, PNG/JPEG/TIFF "
    "scans, Markdown, text), parsed on the bus by the parse workers, each file's original kept "
    "(`GET /v1/documents/{document_id}`); a file's document id is its file name (white space "
    "made `_`), its title the one the file gives, and its page count is in the job's `parsed` "
    "progress events. Either batch is accepted whole or refused whole, before anything is "
    "queued: a document the bus cannot carry (larger than the NATS server's max_payload as a "
    "message) or a file over RAGBUS_MAX_FILE_BYTES with 413, a file of a kind not read with "
    "415, naming it. A file that turns out damaged, encrypted or unreadable when parsed is "
    "counted failed in the job, with the reason in its errors and events.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                MULTIPART: {"schema": DOCUMENT_FILES_SCHEMA, "encoding": DOCUMENT_FILES_ENCODING}
            },
        }
    },
)


def attachment(filename: str) -> str:
    """`Content-Disposition` for a download named `filename`: an ASCII fallback, and the name
    itself (RFC 6266, RFC 5987) for clients that read it."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1] or "document"
    fallback = "".join(c if " " <= c < "\x7f" and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


BINARY = {"type": "string", "format": "binary"}
DocumentIdPath = Annotated[str, Path(min_length=1, max_length=256, pattern=DOCUMENT_ID_PATTERN)]


@router.get(
    "/documents/{document_id}",
    response_class=Response,
    responses={
        200: {
            "description": "The file as it was uploaded, as an attachment named as it was.",
            "content": {"application/octet-stream": {"schema": BINARY}},
        },
        404: {
            "model": ErrorResponse,
            "description": "No such document of the caller's with a file (one sent as text "
            "has none).",
        },
    },
    summary="A document's original file, as it was uploaded",
)
async def get_original(
    document_id: DocumentIdPath,
    caller: CallerDep,
    files: FilesDep,
    namespace: NamespaceQuery = "default",
) -> Response:
    space = store_namespace(caller.tenant, namespace)
    original = await files.read_original(space, document_id)
    if original is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"document {document_id!r} in namespace {namespace!r} has no original file: it was "
            "sent as text, deleted, or never uploaded",
        )
    return Response(
        original.data,
        media_type=original.media_type,
        headers={
            "Content-Disposition": attachment(original.filename),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox",
            "ETag": f'"{original.sha256}"',
        },
    )


@router.delete(
    "/documents/{document_id}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestAccepted,
    summary="Remove a document's chunks, vectors and graph facts everywhere",
)
async def delete_document(
    document_id: DocumentIdPath,
    request: Request,
    response: Response,
    caller: CallerDep,
    bus: BusDep,
    redis: RedisDep,
    settings: SettingsDep,
    quotas: QuotasDep,
    files: FilesDep,
    namespace: NamespaceQuery = "default",
) -> IngestAccepted:
    """The deletion is a job for the ingest workers; the document's original file, if it has
    one, is deleted here once the job is accepted."""
    space = store_namespace(caller.tenant, namespace)
    accepted = _answer(
        response,
        await _start_job(
            caller,
            redis,
            settings,
            lambda job_id: publish_deletion(bus, space, document_id, job_id=job_id),
        ),
    )
    await quotas.release_document(caller.tenant, space, document_id)
    try:
        await files.delete(space, document_id)
    except Exception as exc:  # the job is queued; the file stays until the next deletion
        log.warning(
            "original_not_deleted", namespace=space, document_id=document_id, error=repr(exc)
        )
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
    if job is None or job["tenant"] != caller.tenant:
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

    relay = relay_to_end(
        one_each(ingest_events(js, job_id, after, is_finished=finished)),
        ends=lambda event: (event.get("data") or {}).get("status") in INGEST_TERMINAL,
        stream=(js, sj.STREAM_INGEST_EVENTS, sj.ingest_events_subject(job_id), after),
        summary=progress_from_job,
        name="progress",
    )
    return EventSourceResponse(relay, ping=SSE_PING_S)


@router.get(
    "/namespaces",
    response_model=Namespaces,
    summary="The caller's namespaces and how many documents each keeps",
)
async def list_namespaces(caller: CallerDep, quotas: QuotasDep) -> Namespaces:
    spaces = await quotas.namespaces(caller.tenant)
    return Namespaces(
        namespaces=[
            NamespaceCount(namespace=caller_namespace(caller.tenant, space), documents=count)
            for space, count in sorted(spaces.items())
        ]
    )


@router.get(
    "/documents",
    response_model=DocumentList,
    summary="The documents the caller keeps in a namespace (accepted through this API), by id",
)
async def list_documents(
    caller: CallerDep,
    quotas: QuotasDep,
    namespace: NamespaceQuery = "default",
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 200,
) -> DocumentList:
    space = store_namespace(caller.tenant, namespace)
    documents = await quotas.documents(caller.tenant, space, limit)
    return DocumentList(
        namespace=namespace,
        documents=[DocumentEntry(id=doc.document_id, bytes=doc.bytes) for doc in documents],
    )
