"""A batch of files from a `multipart/form-data` request, read within bounds: the files of
`POST /v1/documents` (`api.documents`), which takes JSON on the same path.

`FilesOrJsonRoute` keeps a multipart body unread until the route has authenticated the caller
and taken the submission; `file_batch` then reads it, each file bounded while it streams in
(`FileOverLimit`), the files together bounded by the bytes the tenant has left
(`ByteAllowance`: its limit less what it keeps, plus what the files it re-sends keep now),
and the whole body by `api.limits.BodyLimit`. It then checks every part: the bytes' kind
(`infra.documents.sniff_file`, which reads a file's head and a zip's table of contents, never
the whole), the names as document ids, one version of each document, the form's other fields.
A file's SHA-256 is taken in a thread, a chunk at a time: no upload is ever held whole in the
API's memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

from fastapi import (
    HTTPException,
    Request,
    Response,
    status,
)
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.types import Message, Receive

from api.idempotency import (
    fingerprint,
)
from api.schemas import (
    MAX_FILES_PER_CALL,
    FileBatchPrint,
    _namespace,
)
from contracts.access import DocumentAccess
from contracts.ingest import (
    MAX_METADATA_CHARS,
    check_metadata,
    metadata_too_deep,
)
from infra.documents import ParseRefused
from infra.documents.sniff import sniff_file
from infra.errors import describe_error
from infra.runtime.ingest_producer import (
    document_id_for,
)

MULTIPART = "multipart/form-data"
MULTIPART_RECEIVE = "ragbus.multipart_receive"
"""Where `FilesOrJsonRoute` keeps a multipart request's body (its ASGI `receive`) for the
endpoint, which reads it once the caller is authenticated."""
FORM_FIELDS = ("files", "namespace", "metadata", "access")
MAX_FIELD_BYTES = 4 * MAX_METADATA_CHARS + 1024
"""A form field's bytes at most: the metadata's characters, four bytes each at worst."""
MAX_FILENAME_CHARS = 512
HASH_CHUNK_BYTES = 1024 * 1024


def is_multipart(headers: Headers) -> bool:
    content_type = headers.get("content-type", "")
    return content_type.split(";", 1)[0].strip().lower() == MULTIPART


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


class FilesOrJsonRoute(APIRoute):
    """`POST /v1/documents` takes JSON (a `DocumentsRequest`, validated by FastAPI) or
    `multipart/form-data` (files). FastAPI reads a route's body as the one content type it
    declares, before the dependencies run; so a multipart request reaches the endpoint with an
    empty body (its `body` None) and its stream set aside, which the endpoint reads only once
    the caller is authenticated and within its rate (`file_batch`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if is_multipart(request.headers):
                request.scope[MULTIPART_RECEIVE] = request.receive
                request = Request(request.scope, _no_body)
            return await handler(request)

        return route


class FileOverLimit(Exception):
    def __init__(self, filename: str, limit: int) -> None:
        super().__init__(
            f"{filename} is over {limit:,} bytes, the largest file taken "
            "(RAGBUS_MAX_FILE_BYTES): nothing of the batch was queued"
        )


class OverAllowance(Exception):
    def __init__(self, received: int, free: int) -> None:
        super().__init__(
            f"the batch's files are over {received:,} bytes, and the tenant has {free:,} left "
            "to keep (its limit, less what it keeps, plus what the documents it sends again "
            "keep now): nothing of the batch was queued; delete documents, or ask for a larger "
            "limit"
        )


@dataclass(frozen=True)
class ByteAllowance:
    """The bytes a tenant may still keep (`free`), and what a document it keeps takes now
    (`kept(namespace, document_id)`, 0 for a new one): a file sent again replaces its old
    bytes, so those count as free for it."""

    free: int
    kept: Callable[[str, str], Awaitable[int]]


class _BoundedMultiPartParser(MultiPartParser):
    """Starlette's multipart parser, with each file's bytes bounded as they arrive (its own
    bounds are for the other fields): a file over the limit ends the upload there, rather than
    after it was spooled to disk whole. It also notes each file's name as its part begins and
    counts the files' bytes, for `_within_allowance`."""

    def __init__(self, headers: Headers, stream: AsyncIterator[bytes], max_file_bytes: int):
        super().__init__(
            headers,
            stream,  # type: ignore[arg-type]
            max_files=MAX_FILES_PER_CALL,
            max_fields=len(FORM_FIELDS) * 2,
            max_part_size=MAX_FIELD_BYTES,
        )
        self._max_file_bytes = max_file_bytes
        self._file_bytes = 0
        self.files_bytes = 0
        """Every file part's bytes so far."""
        self.begun: list[str] = []
        """The file names of the parts begun so far, in order."""

    def on_part_begin(self) -> None:
        super().on_part_begin()
        self._file_bytes = 0

    def on_headers_finished(self) -> None:
        super().on_headers_finished()
        if self._current_part.file is not None:
            self.begun.append(self._current_part.file.filename or "")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        file = self._current_part.file
        if file is not None:
            self._file_bytes += end - start
            self.files_bytes += end - start
            if self._file_bytes > self._max_file_bytes:
                raise FileOverLimit(file.filename or "a file", self._max_file_bytes)
        super().on_part_data(data, start, end)

    def field(self, name: str) -> str | None:
        """A form field's value, once its part has ended."""
        for key, value in self.items:
            if key == name and isinstance(value, str):
                return value
        return None


async def _within_allowance(
    stream: AsyncIterator[bytes],
    parser: _BoundedMultiPartParser,
    allowance: ByteAllowance,
) -> AsyncIterator[bytes]:
    """The body's chunks, each handed on only while the files so far fit the tenant's bytes:
    between two chunks, each file begun meanwhile is credited with what its document keeps
    now (in the form's `namespace` when that field came first, as the web page and the CLI
    send it; else in `default`), and `OverAllowance` ends the reading once the files' bytes
    are past what is free. A chunk's bytes past the bound at most are read."""
    credit = 0
    credited = 0
    async for chunk in stream:
        namespace = parser.field("namespace") or "default"
        for name in parser.begun[credited:]:
            document_id = document_id_for(name)
            if document_id is not None:
                credit += await allowance.kept(namespace, document_id)
        credited = len(parser.begun)
        if parser.files_bytes > allowance.free + credit:
            raise OverAllowance(parser.files_bytes, allowance.free + credit)
        yield chunk


@dataclass(frozen=True)
class UploadedFile:
    """One file of a multipart batch, checked; its bytes stay spooled in `upload`."""

    document_id: str
    upload: UploadFile
    filename: str
    media_type: str
    """what the bytes are (`infra.documents.sniff`), whatever the name or the part said"""
    sha256: str
    size: int


@dataclass(frozen=True)
class FileBatch:
    namespace: str
    metadata: dict[str, Any]
    files: list[UploadedFile]
    access: DocumentAccess | None = None

    def fingerprint(self) -> str:
        files = [(f.document_id, f.sha256) for f in self.files]
        print_ = FileBatchPrint(
            namespace=self.namespace, metadata=self.metadata, files=files, access=self.access
        )
        return fingerprint(print_)


def _invalid(field: str, message: str) -> RequestValidationError:
    """A 422 naming `field` of the form, as FastAPI words one of a JSON body's."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ("body", field), "msg": message, "input": None}]
    )


def _one_field(form: Any, name: str) -> str | None:
    values = form.getlist(name)
    if len(values) > 1:
        raise _invalid(name, f"give `{name}` once")
    if values and not isinstance(values[0], str):
        raise _invalid(name, f"`{name}` is a form field, not a file")
    return values[0] if values else None


def _form_metadata(raw: str | None) -> dict[str, Any]:
    if raw is None or not raw.strip():
        return {}
    try:
        metadata = json.loads(raw)
    except RecursionError:  # the field's 64 KiB of `[` nest deeper than the parser recurses
        raise _invalid("metadata", f"{metadata_too_deep()}: give a flatter JSON object") from None
    except ValueError:
        raise _invalid("metadata", "not JSON: give a JSON object") from None
    if not isinstance(metadata, dict):
        raise _invalid("metadata", "give a JSON object")
    try:
        check_metadata(metadata)
    except ValueError as exc:
        raise _invalid("metadata", str(exc)) from None
    return metadata


def _form_access(raw: str | None) -> DocumentAccess | None:
    """The `access` field: a JSON object, `{"groups": [...], "users": [...]}`."""
    if raw is None or not raw.strip():
        return None
    try:
        return DocumentAccess.model_validate_json(raw)
    except ValidationError as exc:
        raise _invalid("access", describe_error(exc)) from None


async def _checked_file(upload: UploadFile) -> UploadedFile:
    filename = upload.filename or ""
    document_id = document_id_for(filename)
    if document_id is None or len(filename) > MAX_FILENAME_CHARS:
        raise _invalid(
            "files",
            f"the file name {filename[:300]!r} makes no document id: name the file with "
            "1-256 characters (white space becomes `_`)",
        )
    if not upload.size:
        raise _invalid("files", f"{filename} is empty")
    try:
        media_type, sha256 = await asyncio.to_thread(_kind_and_digest, upload.file, filename)
    except ParseRefused as exc:
        reason = str(exc)
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            reason if filename in reason else f"{filename}: {reason}",
        ) from None
    return UploadedFile(
        document_id=document_id,
        upload=upload,
        filename=filename,
        media_type=media_type,
        sha256=sha256,
        size=upload.size,
    )


def _kind_and_digest(file: BinaryIO, filename: str) -> tuple[str, str]:
    """What a spooled file is (`sniff_file`) and its SHA-256, a chunk at a time (in a
    thread: the hash releases the GIL over each chunk)."""
    media_type = sniff_file(file, filename)
    digest = hashlib.sha256()
    file.seek(0)
    while chunk := file.read(HASH_CHUNK_BYTES):
        digest.update(chunk)
    file.seek(0)
    return media_type, digest.hexdigest()


def _one_version_each(files: list[UploadedFile]) -> list[UploadedFile]:
    """A file sent twice under one document id is sent once; two different files that would
    be one document are refused, not guessed between (as two versions in a JSON batch are)."""
    first: dict[str, UploadedFile] = {}
    for file in files:
        earlier = first.setdefault(file.document_id, file)
        if earlier.sha256 != file.sha256:
            raise _invalid(
                "files",
                f"{file.filename} and {earlier.filename} would both be document "
                f"{file.document_id!r}, with different content: send one of them",
            )
    return list(first.values())


async def read_file_batch(form: Any) -> FileBatch:
    """A parsed multipart form as a batch of files, checked whole: 422 naming the field (or
    the file), 415 naming a file whose kind is not read."""
    unknown = sorted(set(form.keys()) - set(FORM_FIELDS))
    if unknown:
        raise _invalid(unknown[0], f"not a field of this form ({', '.join(FORM_FIELDS)})")
    namespace = _one_field(form, "namespace") or "default"
    try:
        _namespace(namespace)
    except ValueError as exc:
        raise _invalid("namespace", str(exc)) from None
    metadata = _form_metadata(_one_field(form, "metadata"))
    access = _form_access(_one_field(form, "access"))
    parts = form.getlist("files")
    if not parts:
        raise _invalid("files", "no file: send each as a `files` part with its file name")
    if not all(isinstance(part, UploadFile) for part in parts):
        raise _invalid("files", "every `files` part must be a file, sent with its file name")
    files = _one_version_each([await _checked_file(part) for part in parts])
    return FileBatch(namespace=namespace, metadata=metadata, files=files, access=access)


@asynccontextmanager
async def file_batch(
    request: Request, max_file_bytes: int, allowance: ByteAllowance | None = None
) -> AsyncIterator[FileBatch]:
    """The multipart body of `request`, read and checked whole (`read_file_batch`); its files
    stay spooled (in memory, or on disk past 1 MB) until the block ends. A file over
    `max_file_bytes` ends the reading with a 413 naming it; files past the tenant's
    `allowance`, with a 429."""
    receive: Receive = request.scope.get(MULTIPART_RECEIVE, request.receive)
    source = Request(request.scope, receive)
    try:
        async with aclosing(source.stream()) as body:
            stream: AsyncIterator[bytes] = body
            parser = _BoundedMultiPartParser(source.headers, stream, max_file_bytes)
            if allowance is not None:
                parser.stream = _within_allowance(body, parser, allowance)  # type: ignore[assignment]
            form = await parser.parse()
    except FileOverLimit as exc:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from None
    except OverAllowance as exc:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc)) from None
    except MultiPartException as exc:
        if exc.message.startswith("Too many files"):
            raise _invalid("files", f"at most {MAX_FILES_PER_CALL} files a call") from None
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, f"the multipart body could not be read: {exc.message}"
        ) from None
    try:
        yield await read_file_batch(form)
    finally:
        await form.close()
