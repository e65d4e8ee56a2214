"""A request whose state turned terminal while its last events are still in the outbox (its
orchestrator was killed between the commit and the publish) is not finished for a reader of
its events: the reader waits for them, then ends with the real `done`, never one of its own.

The chaos suite found 2 of 2,469 streams that ended early this way."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from contracts import subjects as sj
from contracts.enums import RequestStatus
from contracts.envelope import new_request_id
from contracts.events import AnswerData, AnswerEvent, DoneData, DoneEvent
from contracts.queries import QuerySubmitted
from launcher.runtime import Runtime
from orchestrator.state import RequestState
from orchestrator.store import Outgoing, StateStore, Transition
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

QUIET_S = 7.0
"""Longer than the relay's idle check (5 s) and final drain (0.5 s) together."""


async def test_a_reader_waits_for_events_a_commit_left_in_the_outbox(
    http: httpx.AsyncClient, stack: Runtime
) -> None:
    assert stack.resources is not None
    store = StateStore(stack.resources.redis(), stack.settings)
    rid = new_request_id()
    await store.create(QuerySubmitted(request_id=rid, query="What is Gatun Lake?", top_k=5))
    subject = sj.events_subject("default", rid)
    answer = AnswerEvent(request_id=rid, data=AnswerData(content="An artificial lake."))
    done = DoneEvent(request_id=rid, data=DoneData(status=RequestStatus.COMPLETED))

    def finish(state: RequestState | None) -> Transition:
        assert state is not None
        state.status = RequestStatus.COMPLETED
        messages = [Outgoing(subject, sj.STREAM_EVENTS, e) for e in (answer, done)]
        return Transition(state, messages)

    applied = await store.apply(rid, "finish", finish)  # committed, not published
    reading = asyncio.create_task(read_events(http, f"/v1/queries/{rid}/events"))
    await asyncio.sleep(QUIET_S)
    assert not reading.done(), "the stream ended before the request's events were published"

    for entry in applied.outbox:  # what the redelivered message's handler does
        await stack.resources.bus.publish_raw(
            entry.body.encode(), entry.subject, entry.stream, entry.event_id
        )
    await store.outbox_sent(rid, [e.event_id for e in applied.outbox])
    events = await asyncio.wait_for(reading, 30)
    assert [e.event for e in events] == ["answer", "done"]
    assert events[0].data["data"]["content"] == "An artificial lake."
    assert events[-1].data["event_id"] == done.event_id, "the real done, not one made up"
