"""Batch ingestion producer: documents onto the bus as one job, then the job's seal.

A job may mix text documents (`DocumentIn`, on `rag.ingest.docs.<job>` for the ingest workers)
and files (`FileDocument`, on `rag.ingest.parse.<tenant>.<job>` for the parse workers, in the
lane of the tenant whose namespace the file goes to, which make each into a document for the
ingest workers). A file is in the object store before its message is
sent (`infra.runtime.files`): the message carries its reference, never its bytes.

Each message's `event_id` is its content hash, so the broker drops a copy re-sent within
its duplicate window (`PubAck.duplicate`): re-running a producer does not double the work.
The seal tells the workers how many documents (files included) were accepted, so completion
can be known.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from contracts import subjects as sj
from contracts.access import DocumentAccess
from contracts.envelope import Envelope, new_request_id
from contracts.ingest import (
    DOCUMENT_ID_PATTERN,
    DocumentIn,
    FileDocument,
    IngestDeletion,
    IngestDocument,
    IngestFile,
    IngestJobSealed,
)
from contracts.tenancy import tenant_of
from infra.documents import SUPPORTED_SUFFIXES
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.runtime.files import FileStore
from infra.runtime.ingest_tree import Skipped, read_regular, regular_size, walk_tree, why

log = get_logger(__name__)

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
"""Read as text, here: their text is the document."""
FILE_SUFFIXES = frozenset(SUPPORTED_SUFFIXES) - TEXT_SUFFIXES
"""Uploaded and parsed by a parse worker (`workers.parse`): PDFs, Word, PowerPoint, HTML,
images."""
KINDS_READ = (
    f"{', '.join(sorted(FILE_SUFFIXES | TEXT_SUFFIXES))} files, folders of them, and BEIR "
    "corpus .jsonl files"
)
"""What `load_sources` reads, as a person is told it."""

_DOCUMENT_ID = re.compile(DOCUMENT_ID_PATTERN)
MAX_DOCUMENT_ID_CHARS = 256


def document_id_for(name: str) -> str | None:
    """A file's path (relative to the folder ingested) or uploaded name as a document id: its
    folders joined by `__`, every run of white space one `_`; None when that is no id (empty,
    or over 256 characters)."""
    doc_id = "_".join(name.replace("/", "__").replace("\ufeff", " ").split())
    if not doc_id or len(doc_id) > MAX_DOCUMENT_ID_CHARS or not _DOCUMENT_ID.match(doc_id):
        return None
    return doc_id


@dataclass(frozen=True)
class LocalFile:
    """A file on disk that a parse worker reads: the producer uploads it to the object store
    and sends a `FileDocument` (`FileDocument` of `upload`) in its place."""

    path: Path
    id: str
    namespace: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)
    access: DocumentAccess | None = None

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def media_type(self) -> str:
        return mimetypes.guess_type(self.path.name)[0] or ""


Source = DocumentIn | LocalFile
"""What a folder tree yields: a text document, or a file to upload and parse."""
JobItem = DocumentIn | FileDocument
"""What a job publishes: a text document, or a stored file to parse."""


class NotDocuments(ValueError):
    """A path `load_documents` cannot read documents from: its message says what it reads."""


HEADER_ALLOWANCE = 512
"""Bytes a message's headers and protocol line take beside its body (well over what they do)."""


class DocumentTooLarge(ValueError):
    """A document whose bus message exceeds what the NATS server accepts (`max_payload`)."""

    def __init__(self, document_id: str, size: int, limit: int) -> None:
        self.document_id, self.size, self.limit = document_id, size, limit
        super().__init__(
            f"document {document_id!r} is {size:,} bytes as a bus message; the NATS server "
            f"takes at most {limit:,} per message (its max_payload): split it, or raise the limit"
        )


def job_message(
    job_id: str, document: JobItem, event_id: str | None = None
) -> tuple[Envelope, bytes]:
    """A job's message for one document and its body: its `event_id` is the document's
    content hash unless one is given (a source's sync gives each operation its own)."""
    message: Envelope
    event_id = event_id or document.content_hash()
    if isinstance(document, FileDocument):
        message = IngestFile(request_id=job_id, event_id=event_id, document=document)
    else:
        message = IngestDocument(request_id=job_id, event_id=event_id, document=document)
    return message, message.model_dump_json().encode()


def job_subject(job_id: str, document: JobItem) -> str:
    """Where a job's document goes: a file to its tenant's parse lane, text to the ingest
    workers."""
    if isinstance(document, FileDocument):
        return sj.ingest_parse_subject(job_id, tenant_of(document.namespace))
    return sj.ingest_docs_subject(job_id)


def check_sizes(documents: Iterable[JobItem], max_payload: int, job_id: str = "x") -> None:
    """Raise `DocumentTooLarge` for the first document that the server would refuse: a batch
    is refused whole before any of it is published."""
    for document in documents:
        size = len(job_message(job_id, document)[1]) + HEADER_ALLOWANCE
        if size > max_payload:
            raise DocumentTooLarge(document.id, size, max_payload)


class FileTooLarge(ValueError):
    """A file over the configured upload limit (`RAGBUS_MAX_FILE_BYTES`)."""

    def __init__(self, name: str, size: int, limit: int) -> None:
        self.name, self.size, self.limit = name, size, limit
        super().__init__(
            f"{name} is {size:,} bytes; files of at most {limit:,} bytes are taken "
            "(RAGBUS_MAX_FILE_BYTES)"
        )


def check_file_sizes(files: Iterable[LocalFile], limit: int) -> None:
    """Raise `FileTooLarge` for the first file over `limit`: a job is refused whole before
    any of it is uploaded."""
    for file in files:
        if file.size > limit:
            raise FileTooLarge(str(file.path), file.size, limit)


class FileUnreadable(ValueError):
    """A file that could be read when the folder was walked, and no longer can (removed,
    made a link or a FIFO): the job is refused whole, before anything is published."""


async def upload_file(store: FileStore, file: LocalFile) -> FileDocument:
    """Put a local file into the object store; the `FileDocument` that refers to it. Read as
    the walk found it: a regular file, not through a link (`FileUnreadable`)."""
    try:
        data = await asyncio.to_thread(read_regular, file.path)
    except OSError as exc:
        raise FileUnreadable(f"{file.path} changed since it was found ({why(exc)})") from exc
    ref = await store.put(file.namespace, file.id, data, file.path.name, file.media_type)
    return FileDocument(
        id=file.id, metadata=file.metadata, namespace=file.namespace, file=ref, access=file.access
    )


@dataclass(frozen=True)
class JobReceipt:
    job_id: str
    accepted: int
    duplicates: int


async def publish_job(
    bus: Bus,
    documents: Iterable[JobItem],
    job_id: str | None = None,
    progress: Callable[[int], None] | None = None,
    max_payload: int | None = None,
) -> JobReceipt:
    """Publish every document of a job, then seal it; `progress` gets the running count. A
    `FileDocument` (a file already in the object store) goes to the parse workers, a
    `DocumentIn` to the ingest workers; the one seal counts both. With `max_payload`, a
    document the server would refuse raises `DocumentTooLarge` before it is sent (callers
    with the whole batch at hand check it all first: `check_sizes`)."""
    job_id = job_id or new_request_id()
    subject = sj.ingest_docs_subject(job_id)
    accepted = duplicates = files = 0
    for sent, document in enumerate(documents, start=1):
        message, body = job_message(job_id, document)
        if max_payload is not None and len(body) + HEADER_ALLOWANCE > max_payload:
            raise DocumentTooLarge(document.id, len(body) + HEADER_ALLOWANCE, max_payload)
        is_file = isinstance(document, FileDocument)
        files += is_file
        ack = await bus.publish_raw(
            body, job_subject(job_id, document), sj.STREAM_INGEST, message.event_id
        )
        if ack is not None and ack.duplicate:
            duplicates += 1
        else:
            accepted += 1
        if progress is not None:
            progress(sent)
    seal = IngestJobSealed(request_id=job_id, expected=accepted, duplicates=duplicates)
    await bus.publish(seal, subject, sj.STREAM_INGEST)
    log.info(
        "ingest_job_published",
        job_id=job_id,
        accepted=accepted,
        duplicates=duplicates,
        files=files,
    )
    return JobReceipt(job_id=job_id, accepted=accepted, duplicates=duplicates)


async def publish_deletion(
    bus: Bus, namespace: str, document_id: str, job_id: str | None = None
) -> JobReceipt:
    """A one-operation job that removes a document everywhere: ingest workers own the stores."""
    job_id = job_id or new_request_id()
    subject = sj.ingest_docs_subject(job_id)
    deletion = IngestDeletion(request_id=job_id, namespace=namespace, document_id=document_id)
    await bus.publish(deletion, subject, sj.STREAM_INGEST)
    await bus.publish(IngestJobSealed(request_id=job_id, expected=1), subject, sj.STREAM_INGEST)
    log.info("ingest_deletion_published", job_id=job_id, document_id=document_id)
    return JobReceipt(job_id=job_id, accepted=1, duplicates=0)


def title_of(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or fallback
    return fallback


def _skip(skipped: list[Skipped], name: str, reason: str) -> None:
    log.warning("ingest_file_skipped", path=name, reason=reason)
    skipped.append(Skipped(name, reason))


def _source(path: Path, name: str, skipped: list[Skipped]) -> Source | None:
    """The regular file `path` as a text document (Markdown, text: read here) or a file to
    upload; `name` is its path in the folder ingested. None, and added to `skipped` with the
    reason, when it is empty, cannot be read, or its path makes no document id."""
    doc_id = document_id_for(name)
    if doc_id is None:
        _skip(skipped, name, "its path makes no document id (1-256 characters)")
        return None
    try:
        if path.suffix.lower() in TEXT_SUFFIXES:
            text = read_regular(path).decode("utf-8", errors="replace")
            if not text.strip():
                _skip(skipped, name, "empty" if not text else "no text (white space only)")
                return None
            return DocumentIn(id=doc_id, title=title_of(text, PurePath(name).stem), text=text)
        if not regular_size(path):
            _skip(skipped, name, "empty")
            return None
    except OSError as exc:
        _skip(skipped, name, why(exc))
        return None
    return LocalFile(path=path, id=doc_id)


def _from_jsonl(path: Path) -> Iterator[DocumentIn]:
    """BEIR `corpus.jsonl`: `_id`, `title`, `text` (and optional `metadata`) per line."""
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                doc_id = row.get("_id") or row["id"]
            except (ValueError, KeyError, TypeError, AttributeError):
                raise NotDocuments(
                    f"line {number} of {path} is not a BEIR corpus row: a JSON object with "
                    '"_id" (or "id"), "title" and "text"'
                ) from None
            text = str(row.get("text") or "")
            if not text.strip():
                log.warning("ingest_row_empty", path=str(path), line=number)
                continue
            yield DocumentIn(
                id=str(doc_id),
                title=str(row.get("title") or ""),
                text=text,
                metadata=row.get("metadata") or {},
            )


def load_sources(path: Path, skipped: list[Skipped] | None = None) -> Iterator[Source]:
    """What `ragbus ingest PATH` sends: the documents of a BEIR corpus.jsonl; one file of a
    kind read (`KINDS_READ`); or every such file of a folder tree, in path order, never
    through a symbolic link (`infra.runtime.ingest_tree`: a link out of the folder is not
    read). Markdown and text are read here, as text documents; the other kinds are
    `LocalFile`s, for the parse workers. What is passed over (empty, unreadable, a link, a
    FIFO...) is added to `skipped`, each with its reason. A file named alone is read where a
    link to it leads: the person named it."""
    skipped = [] if skipped is None else skipped
    wanted = TEXT_SUFFIXES | FILE_SUFFIXES
    if path.is_dir():
        root = path.resolve()
        for file in walk_tree(path, wanted, skipped):
            if (source := _source(file, file.relative_to(root).as_posix(), skipped)) is not None:
                yield source
    elif path.suffix.lower() == ".jsonl":
        yield from _from_jsonl(path)
    elif path.suffix.lower() in wanted:
        if (source := _source(path.resolve(), path.name, skipped)) is not None:
            yield source
    else:
        raise NotDocuments(f"cannot ingest {path}: ragbus reads {KINDS_READ}")


def load_documents(path: Path) -> Iterator[DocumentIn]:
    """The text documents of `load_sources` (a folder's PDFs and other files to parse left
    out): a BEIR corpus.jsonl, one .md/.txt file, or a folder of them."""
    if path.suffix.lower() in FILE_SUFFIXES and not path.is_dir():
        raise NotDocuments(f"cannot read {path} as text: `ragbus ingest` uploads it to be parsed")
    for source in load_sources(path):
        if isinstance(source, DocumentIn):
            yield source
