"""A large sync survives its worker and its NATS node: on a three-node JetStream cluster (every
stream and the sources' KV bucket on three nodes), the sources worker runs as a process of its
own (`ragbus worker sources`) and is SIGKILLed while it publishes a sync of 600 files; then,
while the restarted worker resumes it, the node that leads the sources' KV bucket is killed.
The sync's one job ends with every file indexed exactly once: 600 done, none unchanged (a
second copy of a document would count `unchanged`, or be counted twice), none failed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.runtime.nats_cluster import NatsCluster, stream_leader, until_streams_current
from infra.runtime.services import LocalService
from infra.settings import Settings
from launcher.layout import WORKER_KINDS
from tests.environment import stack_environment
from tests.integration.conftest import running, serving_api, stack_settings
from tests.integration.polling import until

pytestmark = [pytest.mark.integration, pytest.mark.alone]

FILES = 600


@pytest.fixture(scope="module")
def settings(
    cluster: NatsCluster, cluster_redis: LocalService, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    root = tmp_path_factory.mktemp("sources-chaos")
    (root / "roots").mkdir()
    return stack_settings(
        cluster.url,
        cluster_redis.url,
        root / "data",
        stream_replicas=3,
        publish_retry_s=30.0,
        source_roots=[root / "roots"],
        source_sync_concurrency=1,
    )


class SourcesWorker:
    """`ragbus worker sources` as a process of its own, killed and started again."""

    def __init__(self, settings: Settings, log: Path) -> None:
        assert settings.source_roots
        self.env = stack_environment(
            settings,
            RAGBUS_STREAM_REPLICAS="3",
            RAGBUS_PUBLISH_RETRY_S="30",
            RAGBUS_ACK_WAIT_S="3",
            RAGBUS_SOURCE_ROOTS=str(settings.source_roots[0]),
            RAGBUS_SOURCE_SYNC_CONCURRENCY="1",
            RAGBUS_LOG_LEVEL="INFO",
        )
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "sources"],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)


@pytest.fixture(scope="module")
async def stack(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    kinds = [kind for kind in WORKER_KINDS if kind != "sources"]
    worker = SourcesWorker(settings, tmp_path_factory.mktemp("logs") / "sources.log")
    async with (
        running(settings, orchestrator=True, workers=kinds) as runtime,
        serving_api(runtime) as url,
    ):
        worker.start()
        try:
            yield url, worker
        finally:
            worker.stop()


def _note(n: int) -> str:
    return (
        f"# Harbour log {n}\n\nEntry {n} of the harbour log: the pilot boat met ship {n} at "
        f"the breakwater and guided it to berth {n % 40}. Reference HL-{n:05d}.\n"
    )


async def test_a_sync_survives_its_worker_and_its_nats_node(
    stack: Any, settings: Settings, cluster: NatsCluster
) -> None:
    url, worker = stack
    assert settings.source_roots
    folder = Path(settings.source_roots[0]) / "log"
    folder.mkdir()
    for n in range(FILES):
        (folder / f"entry-{n:04d}.md").write_text(_note(n))
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        made = await http.post(
            "/v1/sources", json={"name": "log", "location": str(folder), "namespace": "log"}
        )
        assert made.status_code == 201, made.text
        job_id = made.json()["job_id"]

        async def run_status() -> str:
            source = (await http.get("/v1/sources/log")).json()
            return str((source.get("last_sync") or {}).get("status"))

        assert (
            await until(
                run_status, timeout=120, satisfied=lambda s: s == "publishing", interval=0.02
            )
            == "publishing"
        )
        await asyncio.sleep(0.2)  # some of it sent, most not
        worker.kill()
        worker.start()

        async def job() -> dict[str, Any]:
            return dict((await http.get(f"/v1/ingest/{job_id}")).json())

        # the resumed sync publishes again: its KV bucket's leader goes down meanwhile
        await until(job, timeout=120, satisfied=lambda j: (j.get("documents_done") or 0) > 0)
        leader = await stream_leader(cluster.url, "KV_RAG_SOURCES")
        assert leader is not None
        await asyncio.to_thread(cluster.kill, leader)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(cluster.restart, leader)
        await until_streams_current(cluster.url)

        ended = await until(
            job, timeout=600, satisfied=lambda j: j["status"] != "running", interval=0.5
        )
        assert ended["status"] == "completed", ended
        assert ended["expected"] == FILES, ended
        assert (ended["documents_done"], ended["documents_unchanged"]) == (FILES, 0), ended
        assert ended["documents_failed"] == 0, ended
        source = (await http.get("/v1/sources/log")).json()
        assert source["last_sync"]["job_id"] == job_id
        assert source["last_sync"]["status"] == "published"
        again = await http.post("/v1/sources/log/sync")
        resync_id = again.json()["job_id"]
        resynced = await until(
            lambda: http.get(f"/v1/ingest/{resync_id}"),
            timeout=120,
            satisfied=lambda r: r.json().get("status") == "completed",
        )
        assert resynced.json()["expected"] == 0  # nothing left owed, nothing new
