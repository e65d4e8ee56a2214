"""The ingest worker on FastStream's in-memory broker, with a private redis-server: jobs
complete whatever the order of seal and documents, redeliveries are not counted twice,
unchanged documents are skipped and bad ones are counted as failed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from nats.js.api import PubAck

from contracts import subjects as sj
from contracts.ingest import (
    DocumentIn,
    IngestDocument,
    IngestJobSealed,
    IngestProgress,
    ingest_message_adapter,
)
from infra.errors import TransientError
from infra.retrieval.lexical import SparseEncoder
from infra.runtime.ingest_jobs import read_job
from infra.runtime.ingest_producer import load_documents, publish_job
from infra.runtime.services import LocalService
from infra.settings import Settings
from tests.unit.conftest import WorkerHarness, worker_harness
from tests.unit.fakes import FakeEncoder
from workers.ingest import create_router
from workers.ingest import indexer as indexer_module

DOCS = [
    DocumentIn(id="a", title="Statins", text="Statin therapy lowers LDL cholesterol. " * 30),
    DocumentIn(id="b", title="Vitamin D", text="Vitamin D deficiency weakens bones. " * 3),
    DocumentIn(id="c", title="Bread", text="# Bread\nKnead the dough. Bake the bread."),
]


@pytest.fixture
def settings(tmp_path: Path, redis_service: LocalService) -> Settings:
    return Settings(data_dir=tmp_path, redis_url=redis_service.url, max_deliver=3, retry_delay_s=0)


@pytest.fixture
async def harness(settings: Settings) -> AsyncIterator[WorkerHarness]:
    async with worker_harness(create_router, settings, FakeEncoder()) as running:
        yield running


def _job() -> str:
    return "job-" + uuid.uuid4().hex[:8]


def _progress(harness: WorkerHarness, job_id: str) -> list[IngestProgress]:
    return [IngestProgress.model_validate(m) for m in harness.on(sj.ingest_events_subject(job_id))]


async def _send(harness: WorkerHarness, message: IngestDocument | IngestJobSealed) -> None:
    await harness.publish(message, sj.ingest_docs_subject(message.request_id), sj.STREAM_INGEST)


async def test_a_job_indexes_every_document_and_completes(harness: WorkerHarness) -> None:
    receipt = await publish_job(harness.resources.bus, DOCS, job_id=_job())
    assert (receipt.accepted, receipt.duplicates) == (3, 0)

    job = await read_job(harness.resources.redis(), receipt.job_id)
    assert job is not None
    assert job["status"] == "completed" and job["expected"] == 3
    assert job["documents_done"] == 3 and job["documents_failed"] == 0
    assert job["chunks"] >= 3 and job["entities"] > 0 and job["errors"] == {}

    vectors = await harness.resources.vectors()
    assert vectors.count("default") == job["chunks"]
    graph = await harness.resources.graph()
    for _ in range(100):  # a finished job's communities are recomputed beside it, at once
        stats = await graph.stats()
        if not stats["communities_dirty"]:
            break
        await asyncio.sleep(0.05)
    assert stats["documents"] == 3 and stats["communities_dirty"] is False

    progress = _progress(harness, receipt.job_id)
    assert len(progress) == 4  # three documents and the seal
    assert progress[-1].data.status == "completed"
    assert {p.data.document_id for p in progress[:3]} == {"a", "b", "c"}


async def test_seal_may_arrive_first(harness: WorkerHarness) -> None:
    job_id = _job()
    await _send(harness, IngestJobSealed(request_id=job_id, expected=2))
    assert (await read_job(harness.resources.redis(), job_id))["status"] == "running"  # type: ignore[index]
    for doc in DOCS[:2]:
        await _send(
            harness, IngestDocument(request_id=job_id, event_id=doc.content_hash(), document=doc)
        )
    job = await read_job(harness.resources.redis(), job_id)
    assert job is not None and job["status"] == "completed" and job["documents_done"] == 2


async def test_redelivered_document_counts_once(harness: WorkerHarness) -> None:
    job_id = _job()
    message = IngestDocument(request_id=job_id, event_id="same-event", document=DOCS[0])
    await _send(harness, message)
    await _send(harness, message)
    await _send(harness, IngestJobSealed(request_id=job_id, expected=1))
    job = await read_job(harness.resources.redis(), job_id)
    assert job is not None
    assert job["documents_done"] == 1 and job["documents_unchanged"] == 0
    assert job["status"] == "completed"


async def test_unchanged_documents_are_skipped_and_changed_ones_replaced(
    harness: WorkerHarness,
) -> None:
    await publish_job(harness.resources.bus, DOCS, job_id=_job())
    vectors = await harness.resources.vectors()
    before = vectors.count("default")
    assert before == 4  # "a" takes two chunks
    changed = DOCS[0].model_copy(update={"text": "Completely new text about aspirin."})
    receipt = await publish_job(harness.resources.bus, [changed, *DOCS[1:]], job_id=_job())
    job = await read_job(harness.resources.redis(), receipt.job_id)
    assert job is not None and job["status"] == "completed"
    assert (job["documents_done"], job["documents_unchanged"]) == (1, 2)
    assert vectors.count("default") == before - 1  # the old three-sentence version is gone
    hits = vectors.search_sparse(["default"], *SparseEncoder().encode_query("aspirin"), 3)
    assert [h.document_id for h in hits] == ["a"]


async def test_a_bad_document_fails_alone(
    harness: WorkerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = indexer_module.chunk_document

    def picky(doc: DocumentIn, *args: object) -> list:  # type: ignore[type-arg]
        if doc.id == "b":
            raise ValueError("cannot parse this one")
        return real(doc, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(indexer_module, "chunk_document", picky)
    with structlog.testing.capture_logs() as logs:
        receipt = await publish_job(harness.resources.bus, DOCS, job_id=_job())
    (failure,) = [e for e in logs if e["event"] == "ingest_document_failed"]
    assert failure["exc_info"] is True and failure["document_id"] == "b", "logged with traceback"
    job = await read_job(harness.resources.redis(), receipt.job_id)
    assert job is not None and job["status"] == "completed"
    assert (job["documents_done"], job["documents_failed"]) == (2, 1)
    assert "cannot parse this one" in job["errors"]["b"]
    failed = [p for p in _progress(harness, receipt.job_id) if p.data.document_id == "b"]
    assert failed and "cannot parse this one" in (failed[0].data.error or "")


async def test_transient_failure_is_retried_not_counted(
    harness: WorkerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def flaky(resources: object, doc: DocumentIn) -> object:
        raise TransientError("qdrant away")

    monkeypatch.setattr("workers.ingest.index_document", flaky)
    job_id = _job()
    await _send(harness, IngestDocument(request_id=job_id, document=DOCS[0]))
    assert await read_job(harness.resources.redis(), job_id) is None  # nacked, not counted
    assert harness.on("rag.dlq.") == []


async def test_all_documents_failing_fails_the_job(
    harness: WorkerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(resources: object, doc: DocumentIn) -> object:
        raise RuntimeError("bug")

    monkeypatch.setattr("workers.ingest.index_document", broken)
    receipt = await publish_job(harness.resources.bus, DOCS[:2], job_id=_job())
    job = await read_job(harness.resources.redis(), receipt.job_id)
    assert job is not None and job["status"] == "failed" and job["documents_failed"] == 2


async def test_malformed_documents_are_dead_lettered_and_counted_failed(
    harness: WorkerHarness,
) -> None:
    """A document the worker cannot even read (here a namespace `model_copy` let through
    unvalidated) is dead-lettered as poison and counted failed, so its job still ends."""
    job_id = _job()
    for doc in DOCS[:2]:
        bad = IngestDocument(request_id=job_id, event_id=doc.content_hash(), document=doc)
        body = bad.model_dump(mode="json")
        body["document"]["namespace"] = "ing-W"
        await harness.broker.publish(body, sj.ingest_docs_subject(job_id), stream=sj.STREAM_INGEST)
    await _send(harness, IngestJobSealed(request_id=job_id, expected=2))

    job = await read_job(harness.resources.redis(), job_id)
    assert job is not None and job["status"] == "failed"
    assert (job["documents_failed"], job["documents_done"]) == (2, 0)
    assert set(job["errors"]) == {"a", "b"}
    assert "namespace" in job["errors"]["a"]
    assert len(harness.on("rag.dlq.")) == 2
    progress = _progress(harness, job_id)
    assert {p.data.document_id for p in progress if p.data.error} == {"a", "b"}
    assert progress[-1].data.status == "failed"


async def test_a_malformed_last_document_ends_a_sealed_job(harness: WorkerHarness) -> None:
    job_id = _job()
    await _send(harness, IngestJobSealed(request_id=job_id, expected=2))
    good = IngestDocument(request_id=job_id, event_id="good", document=DOCS[1])
    await _send(harness, good)
    await harness.broker.publish(
        {"type": "ingest.document", "request_id": job_id, "event_id": "bad", "document": {}},
        sj.ingest_docs_subject(job_id),
        stream=sj.STREAM_INGEST,
    )
    job = await read_job(harness.resources.redis(), job_id)
    assert job is not None and job["status"] == "completed"
    assert (job["documents_done"], job["documents_failed"]) == (1, 1)
    assert _progress(harness, job_id)[-1].data.status == "completed"


async def test_empty_job_completes_on_seal(harness: WorkerHarness) -> None:
    receipt = await publish_job(harness.resources.bus, [], job_id=_job())
    job = await read_job(harness.resources.redis(), receipt.job_id)
    assert job is not None and job["status"] == "completed" and job["expected"] == 0


async def test_unknown_job_reads_as_none(harness: WorkerHarness) -> None:
    assert await read_job(harness.resources.redis(), "never-heard-of") is None


async def test_producer_counts_and_reports_progress(harness: WorkerHarness) -> None:
    seen: list[int] = []
    receipt = await publish_job(harness.resources.bus, DOCS, progress=seen.append)
    assert seen == [1, 2, 3] and receipt.accepted == 3
    assert len(receipt.job_id) == 32


def test_load_documents_from_beir_file_and_folder(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        '{"_id": "MED-1", "title": "T1", "text": "Body one.", "metadata": {"url": "u"}}\n'
        '{"_id": "MED-2", "title": "", "text": ""}\n'
    )
    docs = list(load_documents(corpus))
    assert [(d.id, d.title, d.text, d.metadata) for d in docs] == [
        ("MED-1", "T1", "Body one.", {"url": "u"})
    ]
    folder = tmp_path / "notes"
    (folder / "sub dir").mkdir(parents=True)
    (folder / "a.md").write_text("intro\n# Alpha Title\nText.")
    (folder / "sub dir" / "b.txt").write_text("Plain text.")
    (folder / "ignored.bin").write_text("x")
    docs = list(load_documents(folder))
    assert [(d.id, d.title) for d in docs] == [("a.md", "Alpha Title"), ("sub_dir__b.txt", "b")]
    single = list(load_documents(folder / "a.md"))
    assert single[0].id == "a.md"
    with pytest.raises(ValueError, match="cannot ingest"):
        list(load_documents(folder / "ignored.bin"))


async def test_transient_failure_on_last_delivery_counts_as_failed(
    harness: WorkerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def flaky(resources: object, doc: DocumentIn) -> object:
        raise TransientError("qdrant away")

    monkeypatch.setattr("workers.ingest.index_document", flaky)
    monkeypatch.setattr("workers.ingest.current_deliveries", lambda: 3)  # == max_deliver
    receipt = await publish_job(harness.resources.bus, DOCS[:1], job_id=_job())
    job = await read_job(harness.resources.redis(), receipt.job_id)
    assert job is not None and job["status"] == "failed"
    assert "qdrant away" in job["errors"]["a"]


class _DedupingBus:
    """Stands in for JetStream's duplicate window: a repeated Nats-Msg-Id is acked as duplicate."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.sent: list[tuple[str, str, object]] = []

    async def publish(self, message: Any, subject: str, stream: str) -> PubAck:
        duplicate = message.event_id in self.seen
        self.seen.add(message.event_id)
        if not duplicate:
            self.sent.append((subject, stream, message))
        return PubAck(stream=stream, seq=len(self.sent), duplicate=duplicate)

    async def publish_raw(
        self, body: bytes, subject: str, stream: str, event_id: str | None
    ) -> PubAck:
        message = ingest_message_adapter.validate_json(body)
        assert message.event_id == event_id, "the Nats-Msg-Id is the message's event_id"
        return await self.publish(message, subject, stream)


async def test_producer_counts_broker_duplicates_and_seals_last() -> None:
    bus = _DedupingBus()
    receipt = await publish_job(bus, [DOCS[0], DOCS[1], DOCS[0]], job_id="job-dup")  # type: ignore[arg-type]
    assert (receipt.accepted, receipt.duplicates) == (2, 1)
    subjects = {subject for subject, _, _ in bus.sent}
    assert subjects == {"rag.ingest.docs.job-dup"}
    assert {stream for _, stream, _ in bus.sent} == {sj.STREAM_INGEST}
    seal = bus.sent[-1][2]
    assert isinstance(seal, IngestJobSealed) and (seal.expected, seal.duplicates) == (2, 1)
    assert bus.sent[0][2].event_id == DOCS[0].content_hash()  # type: ignore[attr-defined]


async def test_the_corpus_refresh_runs_at_once_then_at_most_once_an_interval() -> None:
    from workers.ingest import RefreshPacer

    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def work() -> None:
        runs.append(loop.time())

    pacer = RefreshPacer(work, 0.3)
    started = loop.time()
    pacer.job_finished()
    await asyncio.sleep(0.05)
    assert len(runs) == 1 and runs[0] - started < 0.05  # the first at once
    for _ in range(5):  # a burst of jobs within the interval: one more run, at its end
        pacer.job_finished()
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)
    assert len(runs) == 2 and runs[1] - runs[0] >= 0.29
    await pacer.aclose()
