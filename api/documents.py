"""The `/v1` document endpoints: ingest a batch as a job, read a file's original, delete a
document.

Each acts for its caller's tenant (`api.auth`): the caller's namespaces are kept in the stores
under the tenant's name (`contracts.tenancy.store_namespace`) and its documents count against
its limits (`infra.tenancy.quotas`). Each answers with an ingest job, followed at its own
endpoints (`api.jobs`); the caller's namespaces and documents are listed by `api.catalogue`.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import redis.asyncio as aioredis
from fastapi import (
    APIRouter,
    Body,
    Depends,
    HTTPException,
    Path,
    Request,
    Response,
    status,
)
from fastapi.exceptions import RequestValidationError
from nats.js import JetStreamContext
from starlette.responses import StreamingResponse

from api.auth import Caller, CallerDep, authenticate
from api.catalogue import NamespaceQuery, refuse_unreadable, require_readable
from api.deps import BusDep, JetStreamDep, NatsDep, QuotasDep, RedisDep, SettingsDep
from api.idempotency import Idempotency, IdempotencyDep, IdempotencyKey, fingerprint
from api.jobs import answer, start_job
from api.limits import check_spool_room
from api.routes import V1_ERRORS, take_submission
from api.schemas import (
    DOCUMENT_FILES_ENCODING,
    DOCUMENT_FILES_SCHEMA,
    DocumentsRequest,
    DocumentUpload,
    ErrorResponse,
    IngestAccepted,
)
from api.uploads import (
    MULTIPART,
    MULTIPART_RECEIVE,
    ByteAllowance,
    FileBatch,
    FilesOrJsonRoute,
    file_batch,
)
from contracts.ingest import DOCUMENT_ID_PATTERN, DocumentIn, FileDocument
from contracts.tenancy import store_namespace
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.runtime.files import FileStore
from infra.runtime.ingest_producer import (
    DocumentTooLarge,
    JobReceipt,
    check_sizes,
    publish_deletion,
    publish_job,
)
from infra.settings import Settings
from infra.tenancy.quotas import DocumentSize, QuotaExceeded, Quotas

log = get_logger(__name__)

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)


def stored(caller: Caller, upload: DocumentUpload) -> DocumentIn:
    """A caller's document as the bus and the stores take it: in the tenant's namespace."""
    fields = upload.model_dump()
    fields["namespace"] = store_namespace(caller.tenant, upload.namespace)
    return DocumentIn.model_validate(fields)


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
    by_space: dict[str, list[str]] = {}
    for document in documents:
        by_space.setdefault(document.namespace, []).append(document.id)
    for space, ids in by_space.items():
        await refuse_unreadable(redis, caller, space, ids)
    sizes = [DocumentSize(d.namespace, d.id, len(d.text.encode())) for d in documents]
    await charge(quotas, caller, sizes)
    return await start_job(
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
    await refuse_unreadable(redis, caller, space, [f.document_id for f in batch.files])
    sizes = [DocumentSize(space, f.document_id, f.size) for f in batch.files]
    await charge(quotas, caller, sizes)

    async def publish(job_id: str) -> JobReceipt:
        documents = []
        for upload in batch.files:
            ref = await files.put(
                space,
                upload.document_id,
                upload.upload.file,
                upload.filename,
                upload.media_type,
                sha256=upload.sha256,
            )
            documents.append(
                FileDocument(
                    id=upload.document_id,
                    metadata=batch.metadata,
                    namespace=space,
                    file=ref,
                    access=batch.access,
                )
            )
        return await publish_job(bus, documents, job_id=job_id)

    idempotent = None
    if idempotency_key is not None:
        idempotent = (idempotency, idempotency_key, batch.fingerprint())
    return await start_job(caller, redis, settings, publish, idempotent)


async def get_files(request: Request, js: JetStreamDep, settings: SettingsDep) -> FileStore:
    """The object store of the uploaded files, on the API's JetStream connection."""
    held: tuple[JetStreamContext, FileStore] | None = getattr(request.app.state, "files", None)
    if held is None or held[0] is not js:
        held = (js, FileStore(js, settings, settings.publish_retry_s))
        request.app.state.files = held
    return held[1]


FilesDep = Annotated[FileStore, Depends(get_files)]


def byte_allowance(quotas: Quotas, caller: Caller, free: int) -> ByteAllowance:
    """What the caller's files may take while they stream in (`api.uploads`)."""

    async def kept(namespace: str, document_id: str) -> int:
        try:
            space = store_namespace(caller.tenant, namespace)
        except ValueError:  # the form's namespace is refused, with its reason, once read
            return 0
        return await quotas.kept_bytes(caller.tenant, space, document_id)

    return ByteAllowance(free=free, kept=kept)


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
        return answer(response, started)
    if MULTIPART_RECEIVE not in request.scope:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    await take_submission(quotas, caller)
    check_spool_room(request.headers, settings.max_request_bytes, settings.upload_min_free_mb)
    free = await quotas.free_bytes(caller.tenant, caller.limits)
    allowance = byte_allowance(quotas, caller, free)
    async with file_batch(request, settings.max_file_bytes, allowance) as batch:
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
    return answer(response, started)


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
            "description": "A document exceeds the bus's limit, a file RAGBUS_MAX_FILE_BYTES, "
            "or the body RAGBUS_MAX_REQUEST_BYTES (multipart) or RAGBUS_MAX_JSON_BYTES.",
        },
        415: {"model": ErrorResponse, "description": "A file of a kind not read."},
        429: {
            "model": ErrorResponse,
            "description": "Over the tenant's submission rate or its file transfers at once "
            "(with Retry-After), or the batch would take its documents, namespaces or bytes "
            "over their limits (files: checked while they stream in).",
        },
        507: {
            "model": ErrorResponse,
            "description": "Too little disk left for the upload (RAGBUS_UPLOAD_MIN_FREE_MB).",
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
        429: {
            "model": ErrorResponse,
            "description": "Over the tenant's request rate, or its file transfers at once "
            "(RAGBUS_TENANT_MAX_TRANSFERS), with Retry-After.",
        },
    },
    summary="A document's original file, as it was uploaded, streamed",
)
async def get_original(
    document_id: DocumentIdPath,
    caller: CallerDep,
    files: FilesDep,
    quotas: QuotasDep,
    redis: RedisDep,
    namespace: NamespaceQuery = "default",
) -> Response:
    """Streamed a chunk at a time (`FileStore.open_original`); the caller's downloads at once
    are bounded at the door (`api.gate`)."""
    await take_submission(quotas, caller)
    space = store_namespace(caller.tenant, namespace)
    await require_readable(redis, caller, space, document_id, namespace)
    original = await files.open_original(space, document_id)
    if original is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"document {document_id!r} in namespace {namespace!r} has no original file: it was "
            "sent as text, deleted, or never uploaded",
        )
    return StreamingResponse(
        original.chunks,
        media_type=original.media_type,
        headers={
            "Content-Length": str(original.size),
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
    one, is deleted here once the job is accepted. A user may delete only a document it may
    read."""
    space = store_namespace(caller.tenant, namespace)
    await require_readable(redis, caller, space, document_id, namespace)
    accepted = answer(
        response,
        await start_job(
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
