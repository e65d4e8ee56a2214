"""The orchestrator's cache of the states it committed (`orchestrator.state_cache`): a
transition after one of its own skips the read, and a cached state that another replica has
moved past costs a retry, never a wrong state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts import subjects as sj
from contracts.enums import RequestStatus
from contracts.events import DoneData, DoneEvent
from contracts.queries import QuerySubmitted
from infra.runtime.services import LocalService
from infra.settings import Settings
from orchestrator.state import RequestState
from orchestrator.state_cache import StateCache
from orchestrator.store import (
    Outgoing,
    StateStore,
    Transition,
    initial_state,
    outbox_key,
    state_key,
)


@pytest.fixture
async def redis(redis_service: LocalService) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_service.url, decode_responses=True)
    yield client
    await client.aclose()


class CountingReads:
    """Counts the transitions that read the state from Redis (their pipeline's GET)."""

    def __init__(self, store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        real = store.redis.pipeline

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(store.redis, "pipeline", pipeline)


def renamed(to: str) -> Any:
    def decide(state: RequestState | None) -> Transition:
        assert state is not None
        state.intent_method = to
        return Transition(state)

    return decide


async def test_a_transition_after_this_process_committed_does_not_read(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = StateStore(redis, Settings())
    await store.create(QuerySubmitted(request_id="cache-1", query="q"))
    counting = CountingReads(store, monkeypatch)
    await store.apply("cache-1", "e1", renamed("first"))
    await store.apply("cache-1", "e2", renamed("second"))
    await store.apply("cache-1", "e3", renamed("third"))
    assert counting.reads == 1  # only the first: the others started from what it committed
    stored = await store.get("cache-1")
    assert stored is not None and (stored.intent_method, stored.version) == ("third", 3)


async def test_a_state_another_replica_moved_is_read_again_and_decided_on(
    redis: aioredis.Redis,
) -> None:
    mine, theirs = StateStore(redis, Settings()), StateStore(redis, Settings())
    await mine.create(QuerySubmitted(request_id="cache-2", query="q"))
    await mine.apply("cache-2", "e1", renamed("mine"))  # cached here at version 1
    await theirs.apply("cache-2", "e2", renamed("theirs"))  # version 2, elsewhere
    decided_on: list[str | None] = []

    def after(state: RequestState | None) -> Transition:
        assert state is not None
        decided_on.append(state.intent_method)
        state.query = "decided again"
        return Transition(state)

    applied = await mine.apply("cache-2", "e3", after)
    assert applied.transition is not None and decided_on == ["mine", "theirs"]
    stored = await mine.get("cache-2")
    assert stored is not None
    assert (stored.intent_method, stored.query, stored.version) == ("theirs", "decided again", 3)


async def test_a_redelivered_event_is_a_duplicate_even_from_the_cache(
    redis: aioredis.Redis,
) -> None:
    store = StateStore(redis, Settings())
    await store.create(QuerySubmitted(request_id="cache-3", query="q"))
    await store.apply("cache-3", "e1", renamed("once"))
    again = await store.apply("cache-3", "e1", renamed("twice"))
    assert again.duplicate and again.transition is None
    stored = await store.get("cache-3")
    assert stored is not None and (stored.intent_method, stored.version) == ("once", 1)
    # the duplicate took the guess out: the next transition reads, and is right
    await store.apply("cache-3", "e2", renamed("after"))
    assert (await store.get("cache-3")).intent_method == "after"  # type: ignore[union-attr]


async def test_finished_requests_and_the_bound_leave_the_cache(redis: aioredis.Redis) -> None:
    store = StateStore(redis, Settings(saga_state_cache=2))
    for n in range(3):
        await store.create(QuerySubmitted(request_id=f"cache-b{n}", query="q"))
        await store.apply(f"cache-b{n}", "e1", renamed("x"))
    assert len(store._cache) == 2 and store._cache.take("cache-b0") is None

    def finish(state: RequestState | None) -> Transition:
        assert state is not None
        state.status = RequestStatus.COMPLETED
        return Transition(state)

    await store.apply("cache-b2", "e2", finish)
    assert store._cache.take("cache-b2") is None
    assert await redis.exists(state_key("cache-b2"))


def sending(request_id: str, *, finish: bool = False) -> Any:
    """A transition that queues one message: a command's stand-in, or the request's `done`."""

    def decide(state: RequestState | None) -> Transition:
        assert state is not None
        if finish:
            state.status = RequestStatus.COMPLETED
        done = DoneEvent(request_id=request_id, data=DoneData(status=state.status))
        return Transition(state, [Outgoing(sj.QUERY_SUBMITTED, sj.STREAM_QUERIES, done)])

    return decide


class CountingDeletes:
    """Counts the outbox deletes sent on their own (not inside a commit's script)."""

    def __init__(self, store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.deletes = 0
        real = store.redis.hdel

        async def hdel(*args: Any) -> Any:
            self.deletes += 1
            return await real(*args)

        monkeypatch.setattr(store.redis, "hdel", hdel)


async def test_published_messages_leave_the_outbox_with_the_next_commit(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = StateStore(redis, Settings())
    await store.create(QuerySubmitted(request_id="cache-o1", query="q"))
    counting = CountingDeletes(store, monkeypatch)
    first = await store.apply("cache-o1", "e1", sending("cache-o1"))
    await store.published("cache-o1", [e.event_id for e in first.outbox], ended=False)
    assert await redis.hlen(outbox_key("cache-o1")) == 1  # still there, noted for the next
    second = await store.apply("cache-o1", "e2", sending("cache-o1"))
    kept = await redis.hkeys(outbox_key("cache-o1"))
    assert kept == [second.outbox[0].event_id]  # the first went with the second's commit
    await store.published("cache-o1", kept, ended=False)
    last = await store.apply("cache-o1", "e3", sending("cache-o1", finish=True))
    await store.published("cache-o1", [e.event_id for e in last.outbox], ended=True)
    assert not await redis.exists(outbox_key("cache-o1"))  # a done empties it
    assert counting.deletes == 0


async def test_a_duplicate_does_not_send_again_what_went_out(redis: aioredis.Redis) -> None:
    store = StateStore(redis, Settings())
    await store.create(QuerySubmitted(request_id="cache-o2", query="q"))
    first = await store.apply("cache-o2", "e1", sending("cache-o2"))
    await store.published("cache-o2", [e.event_id for e in first.outbox], ended=False)
    again = await store.apply("cache-o2", "e1", sending("cache-o2"))
    assert again.duplicate and again.outbox == []
    assert not await redis.exists(outbox_key("cache-o2"))


async def test_without_a_cached_state_published_messages_are_deleted_at_once(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = StateStore(redis, Settings(saga_state_cache=0))
    await store.create(QuerySubmitted(request_id="cache-o3", query="q"))
    counting = CountingDeletes(store, monkeypatch)
    first = await store.apply("cache-o3", "e1", sending("cache-o3"))
    await store.published("cache-o3", [e.event_id for e in first.outbox], ended=False)
    assert counting.deletes == 1 and not await redis.exists(outbox_key("cache-o3"))


def test_a_cache_of_size_zero_keeps_nothing() -> None:
    cache = StateCache(0)
    state = initial_state(QuerySubmitted(request_id="r", query="q"), Settings(), now=0.0)
    cache.put("r", state, 1)
    assert len(cache) == 0
