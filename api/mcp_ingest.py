"""MCP's `ingest` tool: text documents as `POST /v1/documents` takes JSON
(`api.documents.accept_batch`), or files sent as base64 as it takes them as multipart
(`api.uploads.read_file_batch` checks them, `api.documents.accept_files` queues them)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tempfile
from typing import Any, BinaryIO, cast

from pydantic import ValidationError
from starlette.datastructures import FormData, Headers, UploadFile

from api.documents import accept_batch, accept_files, get_files
from api.limits import check_spool_room
from api.mcp_call import Call, Outcome, ToolRefused, invalid
from api.mcp_schemas import (
    FileDocument,
    IngestArgs,
    TextDocument,
)
from api.routes import take_submission
from api.schemas import (
    DocumentsRequest,
    DocumentUpload,
    IngestAccepted,
)
from api.uploads import FileOverLimit, read_file_batch
from contracts.access import DocumentAccess
from infra.logging import get_logger

log = get_logger(__name__)

SPOOL_BYTES = 1024 * 1024
"""A file sent to `ingest` is kept in memory up to this, then on disk, as an upload's part."""


def _text_id(document: TextDocument) -> str:
    return document.document_id or "text-" + hashlib.sha256(document.text.encode()).hexdigest()[:24]


async def ingest(call: Call, args: IngestArgs) -> Outcome:
    if (args.documents is None) == (args.files is None):
        raise ToolRefused(
            "422: give `documents` (text) or `files` (base64), one of the two, in one call"
        )
    if args.documents is not None:
        accepted = await _ingest_texts(call, args.documents, args.namespace, args.access)
    else:
        assert args.files is not None
        accepted = await _ingest_files(call, args.files, args.namespace, args.metadata, args.access)
    text = (
        f"ingest job {accepted.job_id}: {accepted.accepted} documents queued"
        f"{f', {accepted.duplicates} unchanged' if accepted.duplicates else ''}; "
        "follow it with job_status"
    )
    return Outcome(text, accepted)


async def _ingest_texts(
    call: Call, documents: list[TextDocument], namespace: str, access: DocumentAccess | None
) -> IngestAccepted:
    """As `POST /v1/documents` with a JSON body."""
    state = call.state
    try:
        body = DocumentsRequest(
            documents=[
                DocumentUpload(
                    id=_text_id(doc),
                    title=doc.title,
                    text=doc.text,
                    metadata=doc.metadata or {},
                    namespace=namespace,
                    access=access,
                )
                for doc in documents
            ]
        )
    except ValidationError as exc:
        raise ToolRefused(invalid(exc)) from None
    accepted, _ = await accept_batch(
        call.caller,
        body,
        bus=state.bus,
        redis=state.redis,
        max_payload=state.nc.max_payload,
        settings=state.settings,
        quotas=call.quotas,
        idempotency=call.idempotency(),
        idempotency_key=None,
    )
    return accepted


async def _ingest_files(
    call: Call,
    files: list[FileDocument],
    namespace: str,
    metadata: dict[str, Any] | None,
    access: DocumentAccess | None,
) -> IngestAccepted:
    """As `POST /v1/documents` with a multipart body: the same quota and disk checks, each
    file as a form's file part, checked by the upload route's own `read_file_batch`, queued
    by its `accept_files`."""
    state, settings = call.state, call.state.settings
    await take_submission(call.quotas, call.caller)
    decoded: list[tuple[str, bytes]] = []
    for n, upload in enumerate(files):
        try:
            content = base64.b64decode(upload.content_base64, validate=True)
        except (binascii.Error, ValueError):
            raise ToolRefused(
                f"422: files.{n}.content_base64: {upload.filename} is not base64"
            ) from None
        if len(content) > settings.max_file_bytes:
            raise ToolRefused(f"413: {FileOverLimit(upload.filename, settings.max_file_bytes)}")
        decoded.append((upload.filename, content))
    total = sum(len(content) for _, content in decoded)
    check_spool_room(
        Headers({"content-length": str(total)}),
        settings.max_request_bytes,
        settings.upload_min_free_mb,
    )
    fields: list[tuple[str, str | UploadFile]] = [("namespace", namespace)]
    if metadata is not None:
        fields.append(("metadata", json.dumps(metadata)))
    if access is not None:
        fields.append(("access", access.model_dump_json()))
    for filename, content in decoded:
        # closed with the form, as an upload's spooled parts are
        spooled = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        spooled.write(content)
        spooled.seek(0)
        part = UploadFile(cast(BinaryIO, spooled), size=len(content), filename=filename)
        fields.append(("files", part))
    form = FormData(fields)
    try:
        batch = await read_file_batch(form)
        store = await get_files(call.request, state.js, settings)
        accepted, _ = await accept_files(
            call.caller,
            batch,
            bus=state.bus,
            redis=state.redis,
            files=store,
            settings=settings,
            quotas=call.quotas,
            idempotency=call.idempotency(),
            idempotency_key=None,
        )
    finally:
        await form.close()
    return accepted
