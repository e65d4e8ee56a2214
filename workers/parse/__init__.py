"""Parse worker: files of a job in (`rag.ingest.parse.<job>`), documents out, for the ingest
workers (`rag.ingest.docs.<job>`).

For each `IngestFile` it fetches the file from the object store by its reference
(`infra.runtime.files`), parses it in a child process held to the configured limits
(`infra.documents.ParserPool`: time, memory, pages), and publishes the `DocumentIn` it makes
(its text, its pages, the reference to its original) with the file message's `event_id`, so
its job counts the file once, whatever happens to it. A `progress` event with
`stage="parsed"` and the page count tells the job's watchers.

Failures, per file, and every job still ends:
- the file is at fault (`ParseRefused`: damaged, encrypted, too many pages, no text, a kind
  not read; over the size limit; its text over `MAX_DOCUMENT_CHARS`; replaced or deleted
  before it was parsed): an `IngestRefused` takes the reason to the ingest workers, which
  count it failed in its job; no dead letter;
- the parser is (`ParserFailed`: it ran past `RAGBUS_PARSE_TIMEOUT_S`, out of memory, or
  crashed; the pool kills and replaces it, and this process goes on): the message is
  dead-lettered with the reason, and counted failed in its job (`on_dead_letter`);
- NATS, the object store or Redis hiccup: the message is retried (the error policy's nak),
  and counted failed with the error once its deliveries are spent.

The parse worker owns no store: it may run anywhere the bus and Redis are.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from faststream.nats import NatsRouter
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.ingest import (
    MAX_DOCUMENT_CHARS,
    DocumentIn,
    IngestDocument,
    IngestFile,
    IngestRefused,
)
from infra.documents import ParsedDocument, ParseLimits, ParseRefused, ParserFailed, ParserPool
from infra.errors import describe_error
from infra.logging import get_logger
from infra.metrics import STEP_SECONDS
from infra.runtime.bus import Bus, wire_json
from infra.runtime.dead_letters import report_document_failure
from infra.runtime.files import FileStore, FileUnavailable
from infra.runtime.ingest_jobs import JobTracker, publish_progress
from infra.runtime.ingest_producer import HEADER_ALLOWANCE
from infra.runtime.resources import Resources
from infra.runtime.topology import PARSE_WORKER, subscriber_kwargs
from infra.runtime.worker_runtime import step_router
from infra.settings import Settings

__all__ = ["FileRefused", "ParseCrashed", "create_router", "made_document", "parse_limits"]

log = get_logger(__name__)

MIB = 1024 * 1024
PARSED_MSG_ID_SUFFIX = "~parsed"
PARSE_CONCURRENCY = 1
"""Files a parse worker takes at once: its pool parses one at a time. Each file it held
beyond that would wait with its bytes in memory and no heartbeat, and past the ack wait be
delivered again and parsed twice (4 of 200 scans were, fetched four at a time)."""
REFUSED_MSG_ID_SUFFIX = "~refused"
"""The document's `Nats-Msg-Id` is its file message's `event_id` and this: both messages are
in `RAG_INGEST`, whose duplicate window would drop a second message under the same id."""


class ParseCrashed(Exception):
    """The parser failed on a file (`ParserFailed`): not transient, so the error policy
    dead-letters the message at once, with this reason."""


class FileRefused(Exception):
    """A file at fault: counted failed in its job with this reason."""


def parse_limits(settings: Settings) -> ParseLimits:
    return ParseLimits(
        timeout_s=settings.parse_timeout_s,
        memory_bytes=settings.parse_memory_mb * MIB,
        max_pages=settings.max_pages,
        ocr_dpi=settings.ocr_dpi,
        max_file_bytes=settings.max_file_bytes,
    )


def _metadata(message: IngestFile, parsed: ParsedDocument) -> dict[str, Any]:
    document = message.document
    return {
        **document.metadata,
        "source": document.file.filename,
        "media_type": parsed.media_type,
    }


def made_document(message: IngestFile, parsed: ParsedDocument) -> DocumentIn:
    """The document a parsed file makes; `FileRefused` when it cannot be one."""
    document = message.document
    if len(parsed.text) > MAX_DOCUMENT_CHARS:
        raise FileRefused(
            f"{document.file.filename} has {len(parsed.text):,} characters of text; a document "
            f"may have at most {MAX_DOCUMENT_CHARS:,}: split the file"
        )
    if not parsed.text.strip():
        raise FileRefused(f"no text was found in {document.file.filename}")
    try:
        return DocumentIn(
            id=document.id,
            title=(document.title or parsed.title)[:1000],
            text=parsed.text,
            pages=parsed.pages,
            metadata=_metadata(message, parsed),
            namespace=document.namespace,
            file=document.file,
        )
    except ValidationError as exc:
        raise FileRefused(f"{document.file.filename}: {describe_error(exc)}") from None


def create_router(resources: Resources, files: FileStore | None = None) -> NatsRouter:
    """`files`: the object store to fetch from (default: this process's broker's)."""
    settings, bus = resources.settings, resources.bus
    tracker: JobTracker | None = None
    pool: ParserPool | None = None

    def jobs() -> JobTracker:
        nonlocal tracker
        if tracker is None:
            tracker = JobTracker(resources.redis(), settings.state_ttl_s)
        return tracker

    def parser() -> ParserPool:
        """One pool per process, started with the first file."""
        nonlocal pool
        if pool is None:
            pool = ParserPool(parse_limits(settings))
        return pool

    def file_store() -> FileStore:
        nonlocal files
        if files is None:
            js = bus.broker.connection.jetstream()
            files = FileStore(js, settings, settings.publish_retry_s)
        return files

    def max_payload() -> int | None:
        try:
            return int(bus.broker.connection.max_payload)
        except Exception:  # not connected to a server (an in-memory test broker)
            return None

    async def refuse(message: IngestFile, reason: str) -> None:
        """The file is at fault: the ingest workers count it failed in its job, with the
        reason (`IngestRefused`), as they count its every other document, so the one that
        counts the job's last also finishes it (its index and communities refreshed)."""
        job_id, document = message.request_id, message.document
        log.warning("file_refused", job_id=job_id, document_id=document.id, reason=reason)
        refused = IngestRefused(
            **message.correlation(),
            event_id=message.event_id,  # the job counts the file once, refused
            namespace=document.namespace,
            document_id=document.id,
            reason=reason[:2000],
        )
        await bus.publish_raw(
            wire_json(refused, sj.STREAM_INGEST).encode(),
            sj.ingest_docs_subject(job_id),
            sj.STREAM_INGEST,
            message.event_id + REFUSED_MSG_ID_SUFFIX,
        )

    async def parse(message: IngestFile) -> tuple[ParsedDocument, float]:
        ref = message.document.file
        if ref.size > settings.max_file_bytes:
            raise FileRefused(
                f"{ref.filename} is {ref.size:,} bytes; files of at most "
                f"{settings.max_file_bytes:,} bytes are parsed (RAGBUS_MAX_FILE_BYTES)"
            )
        try:
            data = await file_store().get(ref)
        except FileUnavailable as exc:
            raise FileRefused(f"{ref.filename}: {exc}") from None
        started = time.perf_counter()
        try:
            parsed = await parser().parse(data, ref.filename)
        except ParseRefused as exc:
            raise FileRefused(str(exc)) from None
        except ParserFailed as exc:
            log.error(
                "parser_failed",
                job_id=message.request_id,
                document_id=message.document.id,
                error=str(exc),
                seconds=round(time.perf_counter() - started, 3),
            )
            raise ParseCrashed(f"{ref.filename}: {exc}") from exc
        return parsed, time.perf_counter() - started

    async def publish_document(message: IngestFile, document: DocumentIn) -> None:
        out = IngestDocument(
            **message.correlation(),
            event_id=message.event_id,  # the job counts the file once, as this document
            document=document,
        )
        body = wire_json(out, sj.STREAM_INGEST).encode()
        limit = max_payload()
        if limit is not None and len(body) + HEADER_ALLOWANCE > limit:
            raise FileRefused(
                f"{message.document.file.filename} made a document of {len(body):,} bytes as a "
                f"bus message; the NATS server takes at most {limit:,} (its max_payload)"
            )
        await bus.publish_raw(
            body,
            sj.ingest_docs_subject(message.request_id),
            sj.STREAM_INGEST,
            message.event_id + PARSED_MSG_ID_SUFFIX,
        )

    async def on_file(message: IngestFile) -> None:
        job_id, document_id = message.request_id, message.document.id
        structlog.contextvars.bind_contextvars(job_id=job_id, document_id=document_id)
        if await jobs().counted(job_id, message.event_id):
            return  # a redelivery of a file already refused, or indexed: nothing left to do
        try:
            parsed, seconds = await parse(message)
            document = made_document(message, parsed)
        except FileRefused as exc:
            await refuse(message, str(exc))
            return
        STEP_SECONDS.labels(phase="parse").observe(seconds)
        log.info(
            "file_parsed",
            job_id=job_id,
            document_id=document_id,
            media_type=parsed.media_type,
            bytes=message.document.file.size,
            pages=len(parsed.pages),
            ocr_pages=parsed.ocr_pages,
            chars=len(parsed.text),
            seconds=round(seconds, 3),
        )
        # before the document goes on: its `indexed` event may end the job's stream of events
        await publish_progress(
            bus, resources.redis(), job_id, document_id, stage="parsed", pages=len(parsed.pages)
        )
        try:
            await publish_document(message, document)
        except FileRefused as exc:
            await refuse(message, str(exc))

    async def on_dead_letter(bus: Bus, _subject: str, body: str, error: str) -> None:
        """A file that will never be parsed (the parser failed on it, or its deliveries ran
        out) is counted failed, so its job still ends."""
        failure = await report_document_failure(jobs(), bus, body, error)
        if failure is not None and failure.completed:
            status = failure.state.get("status")
            log.info("ingest_job_finished", job_id=failure.job_id, status=status)

    router = step_router(resources, on_dead_letter=on_dead_letter)

    @router.subscriber(
        **subscriber_kwargs(PARSE_WORKER, settings, IngestFile, concurrency=PARSE_CONCURRENCY),
        title="parse",
    )
    async def parse_file(message: IngestFile) -> None:
        await on_file(message)

    return router
