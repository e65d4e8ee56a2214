"""Ingest worker: documents of a job in, indexed chunks and progress events out.

Failures are per document: a document that cannot be indexed is counted as failed (with
its reason) and the job goes on. Only store hiccups are retried, and a document that is
still failing on its last delivery is counted as failed too, so every job completes.

When a job completes, communities are recomputed and summarised: by the LLM when
`RAGBUS_LLM_BASE_URL` is set (and `RAGBUS_LLM_SUMMARIES` is on), extractively otherwise or
wherever the model fails.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from faststream.nats import NatsRouter

from contracts.ingest import (
    IngestDeletion,
    IngestDocument,
    IngestJobSealed,
    IngestMessage,
    IngestRefused,
)
from infra.errors import is_transient
from infra.logging import get_logger
from infra.retrieval.graph.llm_summaries import LLMCommunitySummariser
from infra.runtime.bus import Bus
from infra.runtime.dead_letters import report_document_failure
from infra.runtime.ingest_jobs import JobTracker
from infra.runtime.ingest_jobs import publish_progress as publish_job_progress
from infra.runtime.resources import Resources
from infra.runtime.step_context import current_deliveries
from infra.runtime.topology import INGEST_WORKER, subscriber_kwargs
from infra.runtime.worker_runtime import step_router
from workers.ingest.indexer import IndexOutcome, index_document, remove_document

__all__ = ["create_router"]

log = get_logger(__name__)

CORPUS_REFRESH_INTERVAL_S = 30.0
"""The corpus-wide work after a job (the vector store's optimize, the graph's communities)
runs at most this often: a watched folder ends a job a change, and at 20,000 documents each
such refresh took seconds of the encoder and the graph (`ragbus bench-sync`, issue 57)."""


class RefreshPacer:
    """Runs `work` when a job finishes, at most once every `interval_s`: the first at once,
    one finishing sooner after the last run waits for the interval's end, and any number
    finishing meanwhile share that one run."""

    def __init__(self, work: Callable[[], Awaitable[None]], interval_s: float) -> None:
        self._work, self._interval = work, interval_s
        self._last = float("-inf")
        self._wanted = False
        self._task: asyncio.Task[None] | None = None

    def job_finished(self) -> None:
        self._wanted = True
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._wanted:
            wait = self._last + self._interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._wanted = False
            self._last = loop.time()
            await self._work()

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def create_router(resources: Resources) -> NatsRouter:
    settings, bus = resources.settings, resources.bus
    resources.on_warm_up(resources.vectors, resources.graph, resources.sparse)
    tracker: JobTracker | None = None
    summariser: LLMCommunitySummariser | None = None

    def community_summariser() -> LLMCommunitySummariser | None:
        """One per router, so its cache spares the model unchanged communities."""
        nonlocal summariser
        client = resources.llm() if settings.llm_summaries else None
        if summariser is None and client is not None:
            summariser = LLMCommunitySummariser(client)
        return summariser

    def jobs() -> JobTracker:
        nonlocal tracker
        if tracker is None:
            tracker = JobTracker(resources.redis(), settings.state_ttl_s)
        return tracker

    async def publish_progress(
        job_id: str, document_id: str | None = None, error: str | None = None
    ) -> dict[str, Any]:
        return await publish_job_progress(
            bus,
            resources.redis(),
            job_id,
            document_id,
            error,
            stage="indexed" if document_id is not None else None,
        )

    async def on_completed(job_id: str, state: dict[str, Any]) -> None:
        log.info("ingest_job_finished", job_id=job_id, status=state.get("status"))
        if state.get("documents_done"):  # something new in the stores
            pacer.job_finished()

    async def refresh_corpus() -> None:
        """What a finished job leaves to do across the corpus: index what the vector store
        appended, and recompute the graph's communities."""
        try:  # index what the jobs appended; the store answers searches meanwhile
            store = await resources.vectors()
            await asyncio.to_thread(store.optimize)
        except Exception:  # unindexed segments are still searched, by a full scan
            log.exception("vectors_optimize_failed")
        try:
            encoder = await resources.encoder()
            graph = await resources.graph()
            await graph.recompute_communities(
                embed=encoder.aencode, summarise=community_summariser()
            )
        except Exception:  # communities are refreshed lazily anyway: never fail the job
            log.exception("communities_refresh_failed")

    pacer = RefreshPacer(refresh_corpus, CORPUS_REFRESH_INTERVAL_S)
    resources.on_close(pacer.aclose)

    async def on_operation(message: IngestDocument | IngestRefused | IngestDeletion) -> None:
        """Index or remove one document and count it in its job, exactly once; a file the
        parse worker refused is counted failed, with its reason."""
        job_id = message.request_id
        doc_id = message.document.id if isinstance(message, IngestDocument) else message.document_id
        if await jobs().counted(job_id, message.event_id):
            await publish_progress(job_id, doc_id)
            return
        error: str | None = None
        outcome: IndexOutcome | None
        try:
            if isinstance(message, IngestRefused):
                error, outcome = message.reason, None
            elif isinstance(message, IngestDocument):
                outcome = await index_document(resources, message.document)
            else:
                outcome = await remove_document(resources, message.namespace, doc_id)
        except Exception as exc:
            if is_transient(exc) and current_deliveries() < settings.max_deliver:
                raise  # the error policy naks with a delay
            error = f"{type(exc).__name__}: {exc}"[:2000]
            # with the traceback: a failure seen once must be findable from its log line
            log.exception("ingest_document_failed", job_id=job_id, document_id=doc_id, error=error)
            outcome = None
        completed = await jobs().record(
            job_id,
            message.event_id,
            "failed" if outcome is None else outcome.status,
            chunks=outcome.chunks if outcome else 0,
            entities=outcome.entities if outcome else 0,
            document_id=doc_id,
            error=error or "",
        )
        state = await publish_progress(job_id, doc_id, error)
        if completed:
            await on_completed(job_id, state)

    async def on_sealed(message: IngestJobSealed) -> None:
        job_id = message.request_id
        completed = await jobs().seal(job_id, message.expected, message.duplicates)
        state = await publish_progress(job_id)
        if completed:
            await on_completed(job_id, state)

    async def on_dead_letter(bus: Bus, _subject: str, body: str, error: str) -> None:
        """A document that will never be indexed (malformed, or failing for good outside
        `on_operation`) is counted failed, so its job still ends."""
        failure = await report_document_failure(jobs(), bus, body, error)
        if failure is not None and failure.completed:
            await on_completed(failure.job_id, failure.state)

    router = step_router(resources, on_dead_letter=on_dead_letter)

    @router.subscriber(**subscriber_kwargs(INGEST_WORKER, settings, IngestMessage), title="ingest")
    async def ingest(message: IngestMessage) -> None:
        if isinstance(message, IngestJobSealed):
            await on_sealed(message)
        else:
            await on_operation(message)

    return router
