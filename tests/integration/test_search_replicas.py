"""Search replicas (`RAGBUS_SEARCH_REPLICAS`): a sibling process answers search commands from
a copy of the stores while that copy holds every write, and never one that is behind.

A real store owner (the runtime with every worker kind, on its own nats-server and
redis-server) starts a real replica process (`python -m cli search-replica r0`); the questions
go through the API and the whole saga."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.runtime.replica_hub import HANDOFFS, ReplicaHub
from launcher.layout import WORKER_KINDS
from launcher.runtime import Runtime
from tests.integration.conftest import ingest_and_wait, own_services, running, serving_api
from tests.integration.corpus import EXPECTED_DOCUMENT, QUESTION
from tests.integration.polling import until
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

SETTLE_S = 0.5

MAUSOLEUM = {
    "id": "mausoleum",
    "title": "The Mausoleum at Halicarnassus",
    "text": "The Mausoleum at Halicarnassus was the tomb of Mausolus, finished in 350 BC. "
    "Artemisia II of Caria commissioned the Mausoleum after Mausolus died.",
}
MAUSOLEUM_QUESTION = "Who commissioned the Mausoleum at Halicarnassus?"


def handed(outcome: str = "done") -> float:
    return HANDOFFS.labels(outcome=outcome)._value.get()


async def ask(http: httpx.AsyncClient, query: str) -> dict[str, Any]:
    response = await http.post("/v1/queries", json={"query": query})
    assert response.status_code == 202, response.text
    events = await read_events(http, response.json()["events_url"])
    assert events[-1].event == "done", events[-1]
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    answer: dict[str, Any] = next(e for e in events if e.event == "answer").data["data"]
    return answer


def cited(answer: dict[str, Any]) -> set[str]:
    return {c["document_id"] for c in answer["citations"].values()}


async def fresh(hub: ReplicaHub, timeout: float = 180.0) -> None:
    async def check() -> bool:
        return bool(hub.fresh())

    assert await until(check, timeout, interval=0.2), (
        f"no replica's copy caught up: {hub.replicas}, the stores at {hub.version()}"
    )


def replica_pids(runtime: Runtime) -> list[int]:
    assert runtime.replicas is not None
    return [c.process.pid for c in runtime.replicas.children if c.process is not None]


async def test_a_replica_answers_from_a_current_copy_and_never_from_a_stale_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBUS_SEARCH_REPLICA_SETTLE_S", str(SETTLE_S))  # the replica's own
    with own_services(tmp_path, search_replicas=1, search_replica_settle_s=SETTLE_S) as settings:
        async with running(settings, orchestrator=True, workers=WORKER_KINDS) as runtime:
            await ingest_and_wait(runtime)
            assert runtime.resources is not None
            hub = runtime.resources.search_replicas
            assert hub is not None, "the store owner started its replicas"
            await fresh(hub)
            async with (
                serving_api(runtime) as url,
                httpx.AsyncClient(base_url=url, timeout=120) as http,
            ):
                # a question while the copy is current: the replica answers its search
                before = handed()
                answer = await ask(http, QUESTION)
                assert EXPECTED_DOCUMENT in cited(answer)
                assert handed() == before + 1, "the search went to the replica"

                # a document written, then asked about at once: the copy is behind, so the
                # owner answers, and the answer finds what was written
                response = await http.post("/v1/documents", json={"documents": [MAUSOLEUM]})
                assert response.status_code == 202, response.text
                job_url = f"/v1/ingest/{response.json()['job_id']}"

                async def job_done() -> str:
                    return str((await http.get(job_url)).json()["status"])

                assert await until(job_done, 60, satisfied=lambda s: s == "completed") == (
                    "completed"
                )
                assert not hub.fresh(), "no copy holds the new document yet"
                before = handed()
                answer = await ask(http, MAUSOLEUM_QUESTION)
                assert "mausoleum" in cited(answer)
                # the replica may have caught up meanwhile; it answered only if it had
                if handed() > before:
                    assert hub.fresh()

                # once the stores held still, the replica fetches a new copy and answers again
                await fresh(hub)
                before = handed()
                answer = await ask(http, MAUSOLEUM_QUESTION)
                assert "mausoleum" in cited(answer)
                assert handed() == before + 1

                # a replica killed mid-service: the owner answers, and the replica comes back
                [pid] = replica_pids(runtime)
                os.kill(pid, signal.SIGKILL)
                await asyncio.sleep(0.2)
                answer = await ask(http, QUESTION)
                assert EXPECTED_DOCUMENT in cited(answer)

                async def restarted() -> bool:
                    return bool(replica_pids(runtime)) and replica_pids(runtime) != [pid]

                assert await until(restarted, 30)
                await fresh(hub)
                before = handed()
                answer = await ask(http, QUESTION)
                assert EXPECTED_DOCUMENT in cited(answer)
                assert handed() == before + 1
        # the owner stopped its replica, and the replica removed its copies
        assert not (settings.data_dir / "replicas" / "r0").exists()
