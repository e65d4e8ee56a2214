"""Parse worker: files of a job in (`rag.ingest.parse.<tenant>.<job>`), documents out, for the
ingest workers (`rag.ingest.docs.<job>`).

Each tenant's files arrive in a lane of their own (`infra.runtime.tenant_lanes`), one file of
each tenant held at a time, and wait their turn for one of `RAGBUS_PARSE_SLOTS` parsers
(`infra.runtime.fair_slots`: the tenant served longest ago goes first, and no tenant holds two
parsers while another waits). In `tenants` mode a tenant past its hourly budget of pages and
parser seconds waits first (`infra.tenancy.parse_budget`), its watchers told why. So one
tenant's flood never holds another's one-page file behind it: that file waits for a lane to
open (`POLL_S`, a second) and, when every parser is busy with other tenants' files, for the
first of them to end (at most `RAGBUS_PARSE_TIMEOUT_S`).

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

import asyncio
import time
from typing import Any

import structlog
from faststream import AckPolicy
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.ingest import (
    MAX_DOCUMENT_CHARS,
    DocumentIn,
    IngestDocument,
    IngestFile,
    IngestRefused,
    check_metadata,
)
from contracts.tenancy import DEFAULT_TENANT, tenant_of
from infra.documents import ParsedDocument, ParseLimits, ParseRefused, ParserFailed, ParserPool
from infra.documents.properties import clean_properties
from infra.errors import TransientError, describe_error
from infra.logging import get_logger
from infra.metrics import STEP_SECONDS
from infra.runtime.bus import Bus, wire_json
from infra.runtime.dead_letters import report_document_failure
from infra.runtime.fair_slots import FairSlots
from infra.runtime.files import FileStore, FileUnavailable
from infra.runtime.ingest_jobs import JobTracker, publish_progress
from infra.runtime.ingest_producer import HEADER_ALLOWANCE
from infra.runtime.resources import Resources
from infra.runtime.tenant_lanes import LanesRouter
from infra.runtime.topology import PARSE_WORKER, parse_lane_consumer
from infra.runtime.worker_runtime import error_policy
from infra.settings import Settings
from infra.tenancy.parse_budget import Budget, ParseBudgets

__all__ = ["FileRefused", "ParseCrashed", "create_router", "made_document", "parse_limits"]

log = get_logger(__name__)

MIB = 1024 * 1024
PARSED_MSG_ID_SUFFIX = "~parsed"
BUDGET_RECHECK_S = 60.0
"""A tenant waiting on its parse budget looks again at least this often."""
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
    """The caller's metadata, the file's name (`source`) and its kind (`media_type`), and
    what the file says about itself (`file`: `infra.documents.properties`), unless the
    caller gave a `file` of its own (the caller's wins) or it would take the metadata past
    its bound (`check_metadata`): a file's own properties never make it fail."""
    document = message.document
    metadata = {
        **document.metadata,
        "source": document.file.filename,
        "media_type": parsed.media_type,
    }
    stated = clean_properties(parsed.properties)
    if stated and "file" not in metadata:
        try:
            check_metadata({**metadata, "file": stated})
        except ValueError:
            return metadata
        metadata["file"] = stated
    return metadata


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
            access=document.access,
        )
    except ValidationError as exc:
        raise FileRefused(f"{document.file.filename}: {describe_error(exc)}") from None


def parse_budget(settings: Settings) -> Budget:
    """What a tenant may parse an hour. The default tenant's files (everything of a `none` or
    `token` install, and what the operator ingests with the CLI) are not budgeted: it is the
    install's own."""
    return Budget(settings.tenant_parse_pages_per_hour, settings.tenant_parse_seconds_per_hour)


def create_router(resources: Resources, files: FileStore | None = None) -> LanesRouter:
    """`files`: the object store to fetch from (default: this process's broker's)."""
    settings, bus = resources.settings, resources.bus
    tracker: JobTracker | None = None
    pools: list[ParserPool] = []
    slots = FairSlots(settings.parse_slots)
    budgets: ParseBudgets | None = None

    def jobs() -> JobTracker:
        nonlocal tracker
        if tracker is None:
            tracker = JobTracker(resources.redis(), settings.state_ttl_s)
        return tracker

    def parser(slot: int) -> ParserPool:
        """One pool a slot, each started with its first file."""
        while len(pools) <= slot:
            pools.append(ParserPool(parse_limits(settings)))
        return pools[slot]

    def budget() -> ParseBudgets:
        nonlocal budgets
        if budgets is None:
            budgets = ParseBudgets(resources.redis(), parse_budget(settings))
        return budgets

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

    async def parse(message: IngestFile, slot: int) -> tuple[ParsedDocument, float]:
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
            parsed = await parser(slot).parse(data, ref.filename)
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

    async def charge(tenant: str, pages: int, seconds: float) -> None:
        """Count a parse against the tenant's budget (the default tenant has none)."""
        if tenant != DEFAULT_TENANT:
            await budget().charge(tenant, pages, seconds)

    async def within_budget(message: IngestFile, tenant: str) -> None:
        """Wait while the tenant is past its parse budget, its job's watchers told why once."""
        if tenant == DEFAULT_TENANT:
            return
        told = False
        while (wait := await budget().wait_s(tenant)) > 0:
            if not told:
                told = True
                log.info("parse_budget_wait", tenant=tenant, seconds=round(wait, 1))
                await publish_progress(
                    bus,
                    resources.redis(),
                    message.request_id,
                    message.document.id,
                    stage="waiting",
                    detail=f"the tenant's parse budget ({budget().budget.describe()}) is spent: "
                    f"this file waits about {wait:,.0f} s",
                )
            try:
                async with asyncio.timeout(min(wait, BUDGET_RECHECK_S)):
                    await router.closing.wait()
            except TimeoutError:
                continue
            raise TransientError(
                "the worker stopped while the file waited for its tenant's parse budget: it is "
                "delivered again"
            )

    async def on_file(message: IngestFile) -> None:
        job_id, document_id = message.request_id, message.document.id
        tenant = tenant_of(message.document.namespace)
        structlog.contextvars.bind_contextvars(job_id=job_id, document_id=document_id)
        if await jobs().counted(job_id, message.event_id):
            return  # a redelivery of a file already refused, or indexed: nothing left to do
        await within_budget(message, tenant)
        asked = time.perf_counter()
        async with slots.slot(tenant) as slot:
            began = time.perf_counter()
            queued_s = began - asked
            try:
                parsed, seconds = await parse(message, slot)
                document = made_document(message, parsed)
            except FileRefused as exc:
                await refuse(message, str(exc))
                return
            except ParseCrashed:
                await charge(tenant, 1, time.perf_counter() - began)
                raise
        await charge(tenant, len(parsed.pages), seconds)
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
            queued_s=round(queued_s, 3),
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

    def lane_handler(lane: str) -> Any:
        async def parse_file(message: IngestFile) -> None:
            await on_file(message)

        parse_file.__name__ = f"parse_{lane or 'base'}"
        return parse_file

    router = LanesRouter(
        settings=settings,
        stream=sj.STREAM_INGEST,
        subjects=f"{sj.INGEST_PARSE_PREFIX}.>",
        model=IngestFile,
        base=PARSE_WORKER,
        consumer=parse_lane_consumer,
        lane_of=sj.parse_lane,
        handler=lane_handler,
        title="parse",
        middlewares=[
            error_policy(bus, settings, on_dead_letter=on_dead_letter, is_live=resources.is_live)
        ],
        ack_policy=AckPolicy.MANUAL,
    )
    return router
