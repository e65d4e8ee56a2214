"""An ingest worker killed mid-batch: after a restart the job finishes, nothing lost or doubled."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest

from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.retrieval.vectors import open_vector_store
from infra.runtime.ingest_jobs import read_job
from infra.runtime.ingest_producer import publish_job
from infra.runtime.services import free_port, start_nats, start_redis
from tests.integration.conftest import running, stack_settings
from tests.integration.test_worker_crash import spawn_worker, wait_for

pytestmark = pytest.mark.integration

TOPICS = ["harbour", "lighthouse", "aqueduct", "amphitheatre", "granary", "forum", "bridge"]


def batch(n: int) -> list[DocumentIn]:
    docs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        sentences = [
            f"Record {i} describes the {topic} of town {i}, built in year {100 + i}.",
            f"Engineers of town {i} repaired the {topic} after the flood of year {300 + i}.",
            f"The {topic} of town {i} is mentioned by the chronicle of Marcus Varro.",
        ]
        docs.append(DocumentIn(id=f"record-{i}", title=f"Town {i}", text=" ".join(sentences * 4)))
    return docs


async def test_killed_ingest_worker_resumes_the_batch(tmp_path: Path) -> None:
    nats_svc = start_nats(free_port(), tmp_path / "nats")
    redis_svc = start_redis(free_port(), tmp_path / "redis", persistent=False)
    processes: list[subprocess.Popen[bytes]] = []
    docs = batch(160)
    try:
        settings = stack_settings(nats_svc.url, redis_svc.url, tmp_path / "data")
        async with running(settings, orchestrator=False, workers=()) as runtime:
            assert runtime.resources is not None
            redis = runtime.resources.redis()
            first = spawn_worker(settings, "ingest", tmp_path / "ready-1")
            processes.append(first)
            await wait_for(tmp_path / "ready-1", first)
            receipt = await publish_job(runtime.resources.bus, docs)

            for _ in range(1200):
                job = await read_job(redis, receipt.job_id) or {}
                if job.get("documents_done", 0) >= 20:
                    break
                await asyncio.sleep(0.05)
            assert job.get("status") == "running", "the batch must still be under way"
            first.send_signal(signal.SIGKILL)
            assert first.wait(10) == -signal.SIGKILL

            second = spawn_worker(settings, "ingest", tmp_path / "ready-2")
            processes.append(second)
            await wait_for(tmp_path / "ready-2", second)
            for _ in range(2400):
                job = await read_job(redis, receipt.job_id) or {}
                if job.get("status") != "running":
                    break
                await asyncio.sleep(0.05)
            assert job["status"] == "completed", job
            assert job["documents_failed"] == 0
            assert job["documents_done"] + job["documents_unchanged"] == len(docs)

            second.send_signal(signal.SIGTERM)
            second.wait(30)

        store_settings = settings.model_copy(update={"data_dir": settings.data_dir / "proc-ingest"})
        store = open_vector_store(store_settings, 384)
        try:
            expected = sum(
                len(chunk_document(d, settings.chunk_chars, settings.chunk_overlap_chars))
                for d in docs
            )
            assert store.count("default") == expected, "every chunk once: none lost, none doubled"
        finally:
            store.close()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        nats_svc.stop()
        redis_svc.stop()
