"""The session store on a private redis-server: submission order whatever the finishing
order, concurrent writers, bounds by count and age, tenants apart, and forgetting for good,
memories included."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from contracts.sessions import SessionTurn
from infra.memory.semantic import MemoryIndex, new_memory, scope_of
from infra.memory.sessions import SessionStore, forgotten_key
from infra.runtime.services import LocalService


@pytest.fixture
async def redis(redis_service: LocalService) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_service.url, decode_responses=True)
    yield client
    await client.aclose()


def asked(n: int, at: float, answer: str | None = None) -> SessionTurn:
    return SessionTurn(
        request_id=f"r{n}",
        query=f"question {n}",
        answer=answer,
        status="completed" if answer else "submitted",
        submitted_at=at,
        finished_at=at + 1 if answer else None,
    )


def session() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


async def test_turns_keep_submission_order_when_answers_come_back_out_of_order(
    redis: aioredis.Redis,
) -> None:
    store = SessionStore(redis, max_turns=10, ttl_s=3600)
    sid, now = session(), time.time()
    for n in range(3):
        await store.begin("acme", sid, asked(n, now + n))
    await store.finish("acme", sid, asked(2, now + 2, "third"))
    await store.finish("acme", sid, asked(0, now, "first"))
    turns = await store.turns("acme", sid)
    assert [(t.request_id, t.answer) for t in turns] == [
        ("r0", "first"),
        ("r1", None),
        ("r2", "third"),
    ]
    # a late `begin` (a redelivered submission) does not undo a finished turn
    await store.begin("acme", sid, asked(0, now))
    assert (await store.turns("acme", sid))[0].answer == "first"
    earlier = await store.turns("acme", sid, before=now + 2, limit=1)
    assert [t.request_id for t in earlier] == ["r1"]


async def test_concurrent_requests_of_one_session_lose_no_turn(redis: aioredis.Redis) -> None:
    store = SessionStore(redis, max_turns=100, ttl_s=3600)
    sid, now = session(), time.time()
    await asyncio.gather(*(store.begin("acme", sid, asked(n, now + n / 1000)) for n in range(40)))
    await asyncio.gather(
        *(store.finish("acme", sid, asked(n, now + n / 1000, f"a{n}")) for n in range(40))
    )
    turns = await store.turns("acme", sid)
    assert [t.request_id for t in turns] == [f"r{n}" for n in range(40)]
    assert all(t.answer == f"a{n}" for n, t in enumerate(turns))


async def test_turns_are_bounded_by_count_and_age(redis: aioredis.Redis) -> None:
    store = SessionStore(redis, max_turns=3, ttl_s=60)
    sid, now = session(), time.time()
    await store.begin("acme", sid, asked(0, now - 120))  # older than the TTL: dropped
    for n in range(1, 6):
        await store.begin("acme", sid, asked(n, now + n))
    assert [t.request_id for t in await store.turns("acme", sid)] == ["r3", "r4", "r5"]
    assert await redis.hlen(f"ragbus:session:{{acme/{sid}}}:turns") == 3
    assert 0 < await redis.ttl(f"ragbus:session:{{acme/{sid}}}:order") <= 60


async def test_a_forgotten_session_stays_forgotten_and_other_tenants_are_apart(
    redis: aioredis.Redis,
) -> None:
    store = SessionStore(redis, max_turns=10, ttl_s=3600)
    sid, now = session(), time.time()
    await store.begin("acme", sid, asked(0, now))
    await store.begin("globex", sid, asked(7, now))
    assert await store.forget("acme", sid) == 1
    assert await store.turns("acme", sid) == []
    # the request that was running when the session was forgotten finishes later
    assert not await store.finish("acme", sid, asked(0, now, "late"))
    assert await store.turns("acme", sid) == []
    # the same session id of another tenant is another conversation
    assert [t.request_id for t in await store.turns("globex", sid)] == ["r7"]
    # and a question asked after forgetting starts the conversation afresh
    await store.begin("acme", sid, asked(1, time.time() + 1))
    assert [t.request_id for t in await store.turns("acme", sid)] == ["r1"]


async def test_a_memory_of_a_forgotten_session_is_refused_by_the_index(
    redis: aioredis.Redis,
) -> None:
    """The memory worker encodes a turn's memory while the session may be forgotten: the index
    refuses a memory of a question asked before the forget, in the same script as its check,
    so a listing never shows one (CI once listed it between an add and its removal)."""
    store = SessionStore(redis, max_turns=10, ttl_s=3600)
    index = MemoryIndex(redis, ttl_s=3600)
    sid, now = session(), time.time()
    scope = scope_of("acme", sid, "session")
    assert scope is not None
    marker = forgotten_key("acme", sid)

    taught = new_memory("fact", "My favourite wonder is the Colossus.", "wonder", "r0")
    assert await index.add(scope, taught, forgotten_marker=marker, asked_at=now)
    assert [m.memory_id for m in await index.list(scope)] == [taught.memory_id]

    await store.begin("acme", sid, asked(1, now))
    await store.forget("acme", sid)
    assert await index.clear(scope) == 1
    late = new_memory("answer", "It was made of bronze.", "made of", "r1")
    assert not await index.add(scope, late, forgotten_marker=marker, asked_at=now)
    assert await index.list(scope) == []
    # a question asked after the forget teaches the new conversation
    fresh = new_memory("fact", "I prefer the lighthouse.", "lighthouse", "r2")
    assert await index.add(scope, fresh, forgotten_marker=marker, asked_at=time.time() + 1)
    assert [m.memory_id for m in await index.list(scope)] == [fresh.memory_id]
