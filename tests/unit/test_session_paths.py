"""Every `/v1/sessions/{id}` path answers 404 for a session the caller's tenant does not have:
never used, forgotten, or another tenant's, whatever the memory scope (on a real
redis-server; the bus is a fake)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

from contracts.sessions import SessionTurn
from infra.memory.semantic import MemoryIndex, new_memory, scope_of
from infra.memory.sessions import SessionStore, forgotten_key
from infra.runtime.services import LocalService
from infra.settings import Settings
from tests.unit.test_api_validation import FakeBus, FakeStore, make_client


@pytest.fixture
async def redis(redis_service: LocalService) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_service.url, decode_responses=True)
    yield client
    await client.aclose()


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


async def asked(redis: aioredis.Redis, tenant: str, session_id: str) -> None:
    store = SessionStore.from_settings(redis, Settings())
    turn = SessionTurn(request_id=uuid.uuid4().hex, query="Who built it?", submitted_at=time.time())
    assert await store.begin(tenant, session_id, turn)


async def remembered(redis: aioredis.Redis, scope: str, text: str) -> str:
    memory = new_memory("fact", text, "You said", uuid.uuid4().hex)
    index = MemoryIndex(redis, 3600)
    assert await index.add(scope, memory, forgotten_marker="unused", asked_at=time.time())
    return memory.memory_id


def api(redis_service: LocalService, **settings: object) -> TestClient:
    return make_client(FakeBus(), FakeStore(), redis_service.url, **settings)


def every_path(client: TestClient, session_id: str, memory_id: str) -> dict[str, int]:
    return {
        "get": client.get(f"/v1/sessions/{session_id}").status_code,
        "memories": client.get(f"/v1/sessions/{session_id}/memories").status_code,
        "forget memory": client.delete(
            f"/v1/sessions/{session_id}/memories/{memory_id}"
        ).status_code,
        "forget": client.delete(f"/v1/sessions/{session_id}").status_code,
    }


NOT_FOUND = {"get": 404, "memories": 404, "forget memory": 404, "forget": 404}


@pytest.mark.parametrize("scope", ["session", "tenant"])
async def test_an_unknown_session_is_404_on_every_path(
    redis_service: LocalService, scope: str
) -> None:
    client = api(redis_service, memory_scope=scope)
    assert every_path(client, sid(), str(uuid.uuid4())) == NOT_FOUND


async def test_another_tenants_session_is_404_on_every_path(
    redis: aioredis.Redis, redis_service: LocalService
) -> None:
    theirs = sid()
    await asked(redis, "acme", theirs)
    memory_id = await remembered(redis, f"acme/session/{theirs}", "I live in Rhodes.")
    assert every_path(api(redis_service), theirs, memory_id) == NOT_FOUND
    # and acme's session is untouched
    index = MemoryIndex(redis, 3600)
    assert [m.memory_id for m in await index.list(f"acme/session/{theirs}")] == [memory_id]
    assert await SessionStore.from_settings(redis, Settings()).exists("acme", theirs)


async def test_with_tenant_memory_an_unknown_session_shows_or_deletes_nothing(
    redis: aioredis.Redis, redis_service: LocalService
) -> None:
    """The tenant's memories are every session's, but only a session it has may reach them."""
    client = api(redis_service, memory_scope="tenant")
    scope = scope_of("default", None, "tenant")
    assert scope is not None
    memory_id = await remembered(redis, scope, f"My locker is number {uuid.uuid4().int % 999}.")
    unknown = sid()
    assert client.get(f"/v1/sessions/{unknown}/memories").status_code == 404
    gone = client.delete(f"/v1/sessions/{unknown}/memories/{memory_id}")
    assert gone.status_code == 404
    assert memory_id in {m.memory_id for m in await MemoryIndex(redis, 3600).list(scope)}

    mine = sid()
    await asked(redis, "default", mine)
    listed = client.get(f"/v1/sessions/{mine}/memories")
    assert listed.status_code == 200, listed.text
    assert memory_id in {m["memory_id"] for m in listed.json()["memories"]}


async def test_a_session_answers_while_it_has_turns_or_memories(
    redis: aioredis.Redis, redis_service: LocalService
) -> None:
    client = api(redis_service)
    talked = sid()
    await asked(redis, "default", talked)
    assert client.get(f"/v1/sessions/{talked}").status_code == 200
    listed = client.get(f"/v1/sessions/{talked}/memories")
    assert listed.status_code == 200 and listed.json()["memories"] == []

    # its turns expired, what it taught is kept (RAGBUS_MEMORY_TTL_S outlives the turns)
    taught = sid()
    memory_id = await remembered(redis, f"default/session/{taught}", "I am allergic to figs.")
    view = client.get(f"/v1/sessions/{taught}")
    assert view.status_code == 200 and view.json()["turns"] == []
    assert [
        m["memory_id"] for m in client.get(f"/v1/sessions/{taught}/memories").json()["memories"]
    ] == [memory_id]
    assert client.delete(f"/v1/sessions/{taught}/memories/{memory_id}").status_code == 204
    assert every_path(client, taught, memory_id) == NOT_FOUND  # nothing left: unknown

    forgotten = client.delete(f"/v1/sessions/{talked}")
    assert forgotten.status_code == 200
    assert await redis.exists(forgotten_key("default", talked))
    assert every_path(client, talked, memory_id) == NOT_FOUND
