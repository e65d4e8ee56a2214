"""A redelivery publishes what a commit left in the outbox in the order the saga decided it.

Redis keeps a hash's fields in insertion order only while the hash is small (listpack); an
`answer` is larger than `hash-max-listpack-value`, and the long chaos run once found a `done`
published before its `answer`, so a reader stopped at `done` without the answer."""

from __future__ import annotations

import redis.asyncio as aioredis

from contracts import subjects as sj
from contracts.enums import Phase, PhaseStatus, RequestStatus
from contracts.events import (
    AnswerData,
    AnswerEvent,
    DoneData,
    DoneEvent,
    PhaseData,
    PhaseEvent,
)
from contracts.queries import QuerySubmitted
from infra.runtime.services import LocalService
from infra.settings import Settings
from orchestrator.state import RequestState
from orchestrator.store import OutboxEntry, Outgoing, StateStore, Transition


async def test_pending_messages_come_back_in_their_decided_order(
    redis_service: LocalService,
) -> None:
    redis = aioredis.from_url(redis_service.url, decode_responses=True)
    store = StateStore(redis, Settings())
    rid = "outbox-order"
    await redis.delete(f"ragbus:req:{{{rid}}}:outbox", f"ragbus:req:{{{rid}}}:state")
    await store.create(QuerySubmitted(request_id=rid, query="q"))
    subject = sj.events_subject("default", rid)
    phases = [
        PhaseEvent(
            request_id=rid,
            data=PhaseData(phase=Phase.CRITIC, status=PhaseStatus.COMPLETED, metadata={"n": n}),
        )
        for n in range(12)
    ]
    answer = AnswerEvent(request_id=rid, data=AnswerData(content="An answer. " * 400))
    done = DoneEvent(request_id=rid, data=DoneData(status=RequestStatus.COMPLETED))
    decided = [*phases, answer, done]

    def finish(state: RequestState | None) -> Transition:
        assert state is not None
        state.status = RequestStatus.COMPLETED
        return Transition(state, [Outgoing(subject, sj.STREAM_EVENTS, e) for e in decided])

    await store.apply(rid, "finish", finish)  # committed; its process dies before publishing
    pending = await store.pending_outbox(rid)
    assert [e.event_id for e in pending] == [e.event_id for e in decided]
    assert await redis.object("encoding", f"ragbus:req:{{{rid}}}:outbox") == "hashtable"
    await redis.aclose()


def test_an_entry_kept_before_places_existed_still_reads() -> None:
    old = OutboxEntry.from_json("e1", 'rag.events.default.r\nRAG_EVENTS\n{"a":1}')
    assert (old.subject, old.stream, old.body, old.place) == (
        "rag.events.default.r",
        "RAG_EVENTS",
        '{"a":1}',
        (0, 0),
    )
    placed = OutboxEntry("e2", "s", "S", "{}", (7, 3))
    assert OutboxEntry.from_json("e2", placed.to_json()) == placed


def test_an_entry_keeps_its_kind() -> None:
    for kind in ("progress", "done", ""):
        placed = OutboxEntry("e3", "s", "S", "{}", (7, 3), kind)
        assert OutboxEntry.from_json("e3", placed.to_json()) == placed
    phase = PhaseEvent(
        request_id="r", data=PhaseData(phase=Phase.CRITIC, status=PhaseStatus.COMPLETED)
    )
    done = DoneEvent(request_id="r", data=DoneData(status=RequestStatus.COMPLETED))
    assert Outgoing("s", sj.STREAM_EVENTS, phase).entry().progress
    assert Outgoing("s", sj.STREAM_EVENTS, done).entry().kind == "done"
