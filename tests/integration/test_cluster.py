"""ragbus on a three-node JetStream cluster: every stream on three nodes, and questions that
keep reaching exactly one terminal event while the nodes that lead the streams are killed.

The cluster is three real `nats-server` processes on loopback ports, routed to each other
(`infra.runtime.nats_cluster`); a node is killed with SIGKILL and started again on its ports
and storage. The stack talks to the cluster through `RAGBUS_NATS_URL`'s list of nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import nats
import pytest

from api.event_stream import stored_events
from api.sse import event_id
from contracts import subjects as sj
from contracts.events import caller_events
from infra.runtime.nats_cluster import (
    NatsCluster,
    stream_leader,
    streams_behind,
    until_streams_current,
)
from infra.runtime.services import LocalService
from infra.runtime.topology import stream_specs
from infra.settings import Settings
from launcher.layout import WORKER_KINDS
from tests.integration.conftest import ingest_and_wait, running, serving_api, stack_settings
from tests.integration.corpus import QUESTION
from tests.integration.sse import SseEvent, read_events

pytestmark = pytest.mark.integration

MIN_QUESTIONS = 12
CONCURRENCY = 4


@pytest.fixture(scope="module")
def cluster_settings(
    cluster: NatsCluster, cluster_redis: LocalService, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    return stack_settings(
        cluster.url,
        cluster_redis.url,
        tmp_path_factory.mktemp("cluster-data"),
        stream_replicas=3,
        # A stream without a leader answers nothing until the cluster elects one (seconds):
        # a publish waits that out.
        publish_retry_s=30.0,
    )


@pytest.fixture(scope="module")
async def cluster_api(cluster_settings: Settings) -> AsyncIterator[str]:
    async with running(cluster_settings, orchestrator=True, workers=WORKER_KINDS) as runtime:
        await ingest_and_wait(runtime)
        async with serving_api(runtime) as url:
            yield url


def test_the_setting_takes_the_cluster_as_a_list(cluster: NatsCluster) -> None:
    settings = Settings(nats_url=cluster.url)
    assert settings.nats_servers == [node.url for node in cluster.nodes]


async def test_every_stream_keeps_three_replicas(
    cluster_api: str, cluster: NatsCluster, cluster_settings: Settings
) -> None:
    nc = await nats.connect(cluster_settings.nats_servers)
    try:
        js = nc.jetstream()
        for spec in stream_specs(cluster_settings):
            info = await js.stream_info(spec.name)
            assert info.config.num_replicas == 3, spec.name
            assert info.cluster is not None and info.cluster.leader is not None
            assert len(info.cluster.replicas or []) == 2, spec.name
        consumers = await js.consumers_info(sj.STREAM_CMD)
        assert consumers and all(
            c.cluster and len(c.cluster.replicas or []) == 2 for c in consumers
        )
    finally:
        await nc.close()


async def _kill_leaders(cluster: NatsCluster, killed: list[str]) -> None:
    """Kill the node leading each stream of the query path in turn, and bring it back. The
    next kill waits until the restarted node has caught up on every stream, so no stream loses
    its quorum (two of three replicas)."""
    for stream in (sj.STREAM_CMD, sj.STREAM_EVENTS, sj.STREAM_RES, sj.STREAM_QUERIES):
        await asyncio.sleep(1.0)
        if not await until_streams_current(cluster.url, timeout_s=90.0):
            raise AssertionError(f"streams not caught up: {await streams_behind(cluster.url)}")
        leader = await stream_leader(cluster.url, stream)
        assert leader is not None, f"{stream} has no leader"
        await asyncio.to_thread(cluster.kill, leader)
        killed.append(f"{stream}@{leader}")
        await asyncio.sleep(4.0)
        await asyncio.to_thread(cluster.restart, leader)


async def _ask(http: httpx.AsyncClient) -> tuple[str, list[SseEvent]]:
    response = await http.post("/v1/queries", json={"query": QUESTION})
    assert response.status_code == 202, response.text
    submitted = response.json()
    return submitted["request_id"], await read_events(http, submitted["events_url"], timeout=150)


async def test_questions_reach_one_terminal_event_while_stream_leaders_die(
    cluster_api: str, cluster: NatsCluster, cluster_settings: Settings
) -> None:
    killed: list[str] = []
    answered: list[tuple[str, list[SseEvent]]] = []
    chaos = asyncio.create_task(_kill_leaders(cluster, killed))

    async def client() -> None:
        """Asks one question after another until every leader has been killed."""
        async with httpx.AsyncClient(base_url=cluster_api, timeout=60) as http:
            while not chaos.done() or len(answered) < MIN_QUESTIONS:
                answered.append(await _ask(http))

    try:
        await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
        await chaos
    finally:
        chaos.cancel()
        for node in cluster.nodes:
            await asyncio.to_thread(cluster.restart, node.name)
    assert len(killed) == 4, killed

    nc = await nats.connect(cluster_settings.nats_servers)
    try:
        js = nc.jetstream()
        # Each read ends after the subject has been quiet for half a second: read them
        # side by side (a hundred-odd questions, one after the other, took a minute).
        reads = asyncio.Semaphore(32)

        async def stored(request_id: str) -> list[tuple[int, dict[str, Any]]]:
            async with reads:
                return await stored_events(js, request_id)

        held = await asyncio.gather(*(stored(request_id) for request_id, _ in answered))
        for (request_id, events), stored_now in zip(answered, held, strict=True):
            kinds = [e.event for e in events]
            assert kinds.count("done") == 1 and kinds[-1] == "done", (request_id, kinds)
            assert kinds.count("answer") <= 1, (request_id, kinds)
            assert events[-1].data["data"]["status"] == "completed", (request_id, events[-1])
            # What the caller saw over SSE is what the subject holds, in order, exactly once.
            seen = [e.id for e in events]
            owed = [
                (event_id(seq, event), event.get("type"), (event.get("data") or {}).get("phase"))
                for seq, body in stored_now
                for event in caller_events(body)
            ]
            unseen = [item for item in owed if item[0] not in seen]
            assert seen == [item[0] for item in owed], (request_id, kinds, unseen)
    finally:
        await nc.close()
