"""Redis with failover, on real servers: a primary, a replica and three sentinels
(`infra.runtime.redis_sentinel`). The primary is SIGKILLed while clients ask questions in
conversations, each with an `Idempotency-Key`; the sentinels promote the replica, and nothing
the API acknowledged is lost: every request ends completed, every key still names its request,
every session holds every turn, and no write that mattered went unreplicated before the kill
(`WAIT`, `infra.runtime.redis_client.replicated`)."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.backup.redis_state import primary_of
from infra.replication import replicated
from infra.runtime.redis_client import connect_redis
from infra.runtime.redis_sentinel import RedisSentinelSet
from infra.runtime.services import free_port, start_nats
from tests.integration.conftest import running, serving_api, stack_settings
from tests.integration.polling import until

pytestmark = pytest.mark.integration

CLIENTS = 4
BEFORE_KILL_S = 4.0
AFTER_FAILOVER_S = 6.0
TERMINAL = {"completed", "failed", "cancelled", "timed_out"}


@dataclass
class Asked:
    key: str
    body: dict[str, Any]
    request_id: str
    session_id: str


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[RedisSentinelSet]:
    started = RedisSentinelSet.create(tmp_path / "redis")
    started.start()
    yield started
    started.stop()


async def _submit(http: httpx.AsyncClient, key: str, body: dict[str, Any]) -> str:
    """POST as a careful client does: a 503 (Redis failing over) is tried again, after its
    `Retry-After`, with the same key."""
    for _ in range(60):
        answer = await http.post("/v1/queries", json=body, headers={"Idempotency-Key": key})
        if answer.status_code == 202:
            return str(answer.json()["request_id"])
        assert answer.status_code == 503, answer.text
        await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
    raise AssertionError(f"{key} was never accepted")


async def _status(http: httpx.AsyncClient, request_id: str) -> str | None:
    answer = await http.get(f"/v1/queries/{request_id}")
    return str(answer.json()["status"]) if answer.status_code == 200 else None


async def test_sentinel_set_fails_over_and_a_replicated_write_survives(
    sentinels: RedisSentinelSet,
) -> None:
    redis = connect_redis(sentinels.url)
    try:
        # The guarantee is for a write a replica acknowledged. On a machine busy with the rest
        # of the suite the replica's first acknowledgment can take longer than the policy's
        # wait; such a write stands unreplicated (logged, counted) and is not the one tested,
        # so it is made again, each time with the policy's whole wait.
        for _ in range(10):
            redis.replica_missing = False  # type: ignore[attr-defined]
            assert await replicated(redis, lambda c: c.set("acknowledged", "yes"), "test")
            if not redis.replica_missing:  # type: ignore[attr-defined]
                break
        assert not redis.replica_missing, "the replica never acknowledged the write"  # type: ignore[attr-defined]
        first = sentinels.primary()
        assert first is not None
        sentinels.kill(first.name)
        started = time.monotonic()
        value = None
        while time.monotonic() - started < 30:
            try:
                value = await redis.get("acknowledged")
                break
            except Exception:  # the primary is down until the sentinels promote the replica
                await asyncio.sleep(0.2)
        assert value == "yes"
        promoted = sentinels.primary()
        assert promoted is not None and promoted.name != first.name
        # alone, the new primary's writes wait a few ms for a replica, not the whole timeout
        began = time.monotonic()
        for index in range(20):
            key = f"alone-{index}"
            await replicated(redis, lambda c: c.set(key, "1"), "test")  # noqa: B023 - awaited here
        assert time.monotonic() - began < 5
        assert getattr(redis, "replica_missing", False)
        sentinels.restart(first.name)
        await asyncio.to_thread(sentinels.until_settled, 60)
        await replicated(redis, lambda c: c.set("after", "1"), "test")
        assert not getattr(redis, "replica_missing", True)
    finally:
        await redis.aclose()


async def test_nothing_acknowledged_is_lost_when_the_redis_primary_is_killed(
    tmp_path: Path, sentinels: RedisSentinelSet
) -> None:
    nats = start_nats(free_port(), tmp_path / "nats")
    settings = stack_settings(nats.url, sentinels.url, tmp_path / "data")
    asked: list[Asked] = []
    try:
        async with (
            running(settings) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            stop = asyncio.Event()

            async def client(number: int) -> None:
                session_id = f"failover-{number}-{uuid.uuid4().hex[:8]}"
                turn = 0
                while not stop.is_set():
                    key = f"{session_id}-{turn}"
                    body = {
                        "query": f"question {turn} of client {number}",
                        "session_id": session_id,
                    }
                    request_id = await _submit(http, key, body)
                    asked.append(Asked(key, body, request_id, session_id))
                    turn += 1
                    await until(
                        functools.partial(_status, http, request_id),
                        timeout=120,
                        satisfied=lambda status: status in TERMINAL,
                        interval=0.2,
                    )

            clients = [asyncio.create_task(client(n)) for n in range(CLIENTS)]
            await asyncio.sleep(BEFORE_KILL_S)
            first = sentinels.primary()
            assert first is not None
            before = len(asked)
            await asyncio.to_thread(sentinels.kill, first.name)
            promoted = await until(
                lambda: asyncio.to_thread(sentinels.primary),
                timeout=30,
                satisfied=lambda p: p is not None and p.name != first.name,
            )
            assert promoted is not None and promoted.name != first.name
            await asyncio.sleep(AFTER_FAILOVER_S)
            stop.set()
            await asyncio.gather(*clients)
            assert before > 0 and len(asked) > before, (before, len(asked))

            # every request ended, and completed
            statuses = {a.request_id: await _status(http, a.request_id) for a in asked}
            assert set(statuses.values()) == {"completed"}, statuses
            # every key still names the request it was answered with
            for a in asked:
                again = await http.post(
                    "/v1/queries", json=a.body, headers={"Idempotency-Key": a.key}
                )
                assert again.status_code == 202, again.text
                assert again.json()["request_id"] == a.request_id, a
                assert again.headers.get("idempotent-replayed") == "true"
            # every session holds every turn, in order
            owed: dict[str, list[str]] = defaultdict(list)
            for a in asked:
                owed[a.session_id].append(a.request_id)

            async def turns(session_id: str) -> list[str]:
                view = (await http.get(f"/v1/sessions/{session_id}")).json()
                return [t["request_id"] for t in view["turns"] if t.get("answer")]

            for session_id, request_ids in owed.items():
                held = await until(
                    functools.partial(turns, session_id),
                    satisfied=request_ids.__eq__,
                )
                assert held == request_ids, session_id
    finally:
        nats.stop()


def test_ragbus_up_starts_the_sentinel_set_a_sentinel_url_names(tmp_path: Path) -> None:
    """Where nothing answers at a `redis+sentinel://` URL, the services `ragbus up` starts are
    a primary, a replica and three sentinels (the sentinels on the URL's ports), and the URL
    it hands the roles carries their password; stopping stops all five."""
    from infra.runtime.services import ensure_services_sync
    from infra.settings import Settings

    ports = [free_port() for _ in range(3)]
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    settings = Settings(
        nats_url=f"nats://127.0.0.1:{free_port()}",
        redis_url=f"redis+sentinel://{hosts}/ragbus/0",
        data_dir=tmp_path / "data",
        start_services=True,
    )
    services = ensure_services_sync(settings)
    processes = [s.process for s in services.started]
    try:
        names = sorted(s.name for s in services.started)
        assert names == [
            "nats-server",
            "redis-a",
            "redis-b",
            "sentinel-1",
            "sentinel-2",
            "sentinel-3",
        ]
        url = services.settings.redis_url
        assert url.startswith("redis+sentinel://:") and hosts in url
        primary = primary_of(url)
        assert primary.password and (tmp_path / "data" / "redis" / "password").exists()
        # a second command of the data directory, its URL without the password, finds them
        again = ensure_services_sync(settings)
        assert again.started == [] and again.settings.redis_url == url
    finally:
        services.stop()
    assert len(processes) == 6 and all(p.poll() is not None for p in processes)
