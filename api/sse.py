"""Server-sent events for the `/v1` endpoints: a stored event as an SSE message, the relay of
a stream's events up to its terminal one (with the end made from the record when the events
expired), resuming after `Last-Event-ID`, and how the SSE endpoints are documented. The query
endpoints (`api.routes`) and the ingest job's events (`api.jobs`) share them."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any, NamedTuple

from fastapi import Header
from nats.js import JetStreamContext
from sse_starlette import ServerSentEvent

from api.event_hub import EventHub
from api.event_stream import last_sequence, request_messages
from contracts import subjects as sj
from orchestrator.store import StateStore

SSE_PING_S = 15

LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=24,
        pattern=r"^(\d+(\.\d+)?|null|)$",
        description="Resume after this event: the `id` of the last event received, its stream "
        "sequence (`<seq>`, or `<seq>.<part>` for one of several phase events stored in one "
        "message); empty or `null` starts from the beginning.",
    ),
]


class ResumePoint(NamedTuple):
    """Where a stream resumes (`Last-Event-ID`): after the stream message `seq`, or after its
    entry `part` when the message carries several events (a `phases` message)."""

    seq: int = 0
    part: int = 0


def event_id(seq: int, event: dict[str, Any]) -> str:
    """An event's SSE `id`: its stream sequence, and its part when its message holds several."""
    part = event.get("part")
    return f"{seq}.{part}" if part else str(seq)


def sse_message(seq: int, event: dict[str, Any], name: str | None = None) -> ServerSentEvent:
    return ServerSentEvent(
        data=json.dumps(event, separators=(",", ":")),
        event=name or str(event.get("type", "message")),
        id=event_id(seq, event),
    )


async def request_events(
    js: JetStreamContext,
    store: StateStore,
    tenant: str,
    request_id: str,
    after: ResumePoint = ResumePoint(),
    hub: EventHub | None = None,
) -> AsyncGenerator[tuple[int, list[dict[str, Any]]]]:
    """A request's caller events, message by message, up to the `done` the stream holds; if
    the events expired, a `done` from the state (with the stream's sequence, like every
    event). Read through the process's shared consumer (`hub`) when it has one. Every door
    follows a request through this: the SSE relays below, the OpenAI-compatible chat and
    MCP's `ask`."""

    async def finished() -> bool:
        """Terminal, with every event it decided published. A state is committed before its
        events go out: an orchestrator killed in between leaves them in the outbox, and the
        redelivery that publishes them comes seconds later. Until then the request is not
        finished for a reader, whatever its status says."""
        state = await store.get(request_id)
        if state is None:
            return True
        return state.status.is_terminal and not await store.outbox_pending(request_id)

    async def done_from_state(seq: int) -> dict[str, Any] | None:
        state = await store.get(request_id)
        if state is None:
            return None
        return {
            "type": "done",
            "request_id": request_id,
            "seq": seq,
            "data": {"status": state.status.value},
        }

    messages = request_messages(
        js,
        request_id,
        after.seq,
        after_part=after.part,
        tenant=tenant,
        is_finished=finished,
        reader=hub.messages if hub is not None else None,
    )
    subject = sj.events_subject(tenant, request_id)
    async for seq, events in to_end(
        messages,
        ends=lambda event: event.get("type") == "done",
        stream=(js, sj.STREAM_EVENTS, subject, after.seq),
        summary=done_from_state,
    ):
        yield seq, events


async def relay_request(
    js: JetStreamContext,
    store: StateStore,
    tenant: str,
    request_id: str,
    after: ResumePoint,
    hub: EventHub | None = None,
) -> AsyncGenerator[ServerSentEvent | bytes]:
    """`request_events` as SSE."""
    async for message in as_sse(request_events(js, store, tenant, request_id, after, hub)):
        yield message


async def to_end(
    messages: AsyncGenerator[tuple[int, list[dict[str, Any]]]],
    *,
    ends: Callable[[dict[str, Any]], bool],
    stream: tuple[JetStreamContext, str, str, int],
    summary: Callable[[int], Awaitable[dict[str, Any] | None]],
) -> AsyncGenerator[tuple[int, list[dict[str, Any]]]]:
    """A stream's events up to its terminal one. If none of those it held was terminal (they
    expired), `summary` makes the end from the record, with an id a resuming client can send
    back: the stream's last sequence for the subject (`stream` = JetStream, stream name,
    subject, and the sequence the reader resumed after)."""
    ended = False
    async with aclosing(messages):
        async for seq, events in messages:
            ended = ends(events[-1])
            yield seq, events
    if not ended:
        js, stream_name, subject, after_seq = stream
        seq = max(after_seq, await last_sequence(js, stream_name, subject))
        closing = await summary(seq)
        if closing is not None:
            yield seq, [closing]


async def as_sse(
    messages: AsyncGenerator[tuple[int, list[dict[str, Any]]]], name: str | None = None
) -> AsyncGenerator[ServerSentEvent | bytes]:
    """Events as SSE: those of one stored message in one write (a `phases` message's several
    phase events cost the response one send)."""
    async with aclosing(messages):
        async for seq, events in messages:
            if len(events) == 1:
                yield sse_message(seq, events[0], name)
            else:
                yield b"".join(sse_message(seq, event, name).encode() for event in events)


def resume_after(last_event_id: str | None) -> ResumePoint:
    """Where a `Last-Event-ID` resumes (`ResumePoint()`: from the start)."""
    seq, _, part = (last_event_id or "").partition(".")
    if not seq.isdigit():
        return ResumePoint()
    return ResumePoint(int(seq), int(part) if part.isdigit() else 0)


SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "Server-sent events."}
}
