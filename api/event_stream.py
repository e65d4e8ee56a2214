"""Reading a subject of a limits stream from JetStream: replay, then follow live.

An ordered consumer is ephemeral, flow-controlled and resets itself on a sequence gap,
so a reader sees every message exactly once and in order without any server-side
state to clean up. The SSE endpoint and the CLI share these iterators.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, Literal, Protocol, TypeVar

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects as sj
from contracts.events import caller_events
from contracts.tenancy import DEFAULT_TENANT
from infra.logging import get_logger
from infra.runtime.bus import until_jetstream_answers

log = get_logger(__name__)

T = TypeVar("T")

Finished = Callable[[], Awaitable[bool]]
"""Asked while the subject is quiet: True means nothing more will ever come."""

IDLE_CHECK_S = 5.0
FINAL_DRAIN_S = 0.5
ELECTION_WAIT_S = 60.0
"""How long a reader's JetStream calls wait out a stream with no leader (a cluster electing
one after losing a node) before the reader gives up and its stream breaks off (a client
resumes it with `Last-Event-ID`). An election takes about 5 s, but `test_cluster` on a busy
2-core machine once saw the events stream answer nothing for 30 s, the old limit."""


async def answered(call: Callable[[], Awaitable[T]]) -> T:
    """A JetStream API call of a reader, retried while JetStream cannot answer it."""
    return await until_jetstream_answers(
        call, ELECTION_WAIT_S, first_delay_s=0.2, max_delay_s=2.0, event="event_reader_retried"
    )


async def last_sequence(js: JetStreamContext, stream: str, subject: str) -> int:
    """The stream sequence of the subject's last message (0: it holds none)."""
    try:
        return int((await answered(lambda: js.get_last_msg(stream, subject))).seq or 0)
    except nats.js.errors.NotFoundError:
        return 0


async def _ordered(
    js: JetStreamContext, subject: str, stream: str, after_seq: int
) -> JetStreamContext.PushSubscription:
    """An ordered consumer of `subject` from after `after_seq`, once JetStream answers."""
    return await answered(
        lambda: js.subscribe(subject, stream=stream, ordered_consumer=True, config=_from(after_seq))
    )


def _from(after_seq: int) -> ConsumerConfig:
    if after_seq > 0:
        return ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1
        )
    return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)


Quiet = Literal["wait", "drain", "end", "catch_up"]


async def after_quiet(
    js: JetStreamContext,
    stream: str,
    subject: str,
    delivered: int,
    draining: bool,
    is_finished: Finished | None,
) -> Quiet:
    """What a reader does after a quiet spell: `wait` (its request goes on), `drain` (it is
    finished and the stream holds nothing past `delivered`: the state turns terminal a moment
    before its last events are published, so wait a last moment), `end` (quiet again while
    draining), or `catch_up` (the stream holds more than the reader delivered: read it)."""
    if not draining and (is_finished is None or not await is_finished()):
        return "wait"
    if await last_sequence(js, stream, subject) <= delivered:
        return "end" if draining else "drain"
    log.warning("event_reader_behind", subject=subject, delivered=delivered)
    return "catch_up"


def json_body(data: bytes, subject: str) -> dict[str, Any] | None:
    """A message's JSON object, or None (logged) when it is not one."""
    try:
        body = json.loads(data)
    except ValueError:
        log.warning("event_not_json", subject=subject)
        return None
    return body if isinstance(body, dict) else None


async def stream_messages(
    js: JetStreamContext,
    subject: str,
    stream: str,
    after_seq: int = 0,
    *,
    is_finished: Finished | None = None,
    idle_s: float = IDLE_CHECK_S,
) -> AsyncGenerator[tuple[int, dict[str, Any]]]:
    """Yield `(stream sequence, JSON body)` for `subject`, starting after `after_seq`.

    Runs until the caller stops iterating, or until `is_finished()` says so during a quiet
    spell and the stream holds nothing for the subject past what was yielded. A quiet
    subscription is not trusted to mean "no more": an ordered consumer lives on the server,
    and one lost in a nats-server restart delivers nothing more. So the stream's own last
    sequence for the subject is checked, and a reader that is behind subscribes again from
    where it stopped.
    """
    delivered, draining = after_seq, False
    sub = await _ordered(js, subject, stream, delivered)
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=FINAL_DRAIN_S if draining else idle_s)
            except nats.errors.TimeoutError:
                quiet = await after_quiet(js, stream, subject, delivered, draining, is_finished)
                if quiet == "end":
                    return
                draining = quiet == "drain"
                if quiet == "catch_up":
                    with contextlib.suppress(Exception):
                        await sub.unsubscribe()
                    sub = await _ordered(js, subject, stream, delivered)
                continue
            draining = False
            delivered = msg.metadata.sequence.stream
            if (body := json_body(msg.data, subject)) is not None:
                yield delivered, body
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


class SubjectReader(Protocol):
    """What reads a subject's messages for `request_messages`: `stream_messages` bound to a
    stream, or an API process's shared consumer (`api.event_hub.EventHub.messages`)."""

    def __call__(
        self,
        subject: str,
        after_seq: int = 0,
        *,
        is_finished: Finished | None = None,
        idle_s: float = IDLE_CHECK_S,
    ) -> AsyncGenerator[tuple[int, dict[str, Any]]]: ...


async def request_messages(
    js: JetStreamContext,
    request_id: str,
    after_seq: int = 0,
    *,
    after_part: int = 0,
    tenant: str = DEFAULT_TENANT,
    is_finished: Finished | None = None,
    idle_s: float = IDLE_CHECK_S,
    reader: SubjectReader | None = None,
) -> AsyncGenerator[tuple[int, list[dict[str, Any]]]]:
    """A request's caller events message by message, after `after_seq` (or after entry
    `after_part` of that message), each event with `"seq"` (its stream sequence) added; ends
    after its `done` event. A `phases` message gives the phase events it carries, each with its
    `"part"`. Read with a consumer of their own unless a `reader` (the API's shared one) is
    given."""
    subject = sj.events_subject(tenant, request_id)
    start = after_seq - 1 if after_part and after_seq > 0 else after_seq
    messages = (
        stream_messages(
            js, subject, sj.STREAM_EVENTS, start, is_finished=is_finished, idle_s=idle_s
        )
        if reader is None
        else reader(subject, start, is_finished=is_finished, idle_s=idle_s)
    )
    async with aclosing(messages):
        async for seq, body in messages:
            events = caller_events(body)
            if seq == after_seq:  # received in part before the stream was resumed
                events = [e for e in events if e.get("part", 0) > after_part]
            for event in events:
                event["seq"] = seq
            if events:
                yield seq, events
            if body.get("type") == "done":
                return


async def each_event(
    messages: AsyncGenerator[tuple[int, list[dict[str, Any]]]],
) -> AsyncGenerator[tuple[int, dict[str, Any]]]:
    """`request_messages`'s events one at a time."""
    async with aclosing(messages):
        async for seq, events in messages:
            for event in events:
                yield seq, event


async def one_each(
    events: AsyncGenerator[tuple[int, dict[str, Any]]],
) -> AsyncGenerator[tuple[int, list[dict[str, Any]]]]:
    """A stream of one event a message (an ingest job's progress) message by message, as
    `api.sse.to_end` takes it."""
    async with aclosing(events):
        async for seq, event in events:
            yield seq, [event]


async def stored_events(
    js: JetStreamContext, request_id: str, quiet_s: float = 0.5, tenant: str = DEFAULT_TENANT
) -> list[tuple[int, dict[str, Any]]]:
    """Every caller event the stream holds for a request now, with its sequence (for checks,
    not for following): read from the start up to the subject's last message, then until the
    subject is quiet for `quiet_s`. A read that stalls short of the last message (a cluster
    electing a leader can hold an ordered consumer back for seconds) is read again, so a
    check never sees a partial history as the whole."""
    subject = sj.events_subject(tenant, request_id)
    last = await last_sequence(js, sj.STREAM_EVENTS, subject)
    if last == 0:
        return []
    found: list[tuple[int, dict[str, Any]]] = []
    for _ in range(STORED_READ_TRIES):
        found = await _read_through(js, subject, last, quiet_s)
        if found and found[-1][0] >= last:
            return found
        log.warning("stored_events_read_again", subject=subject, last=last, got=len(found))
    return found


STORED_READ_TRIES = 3
STORED_STALL_S = 15.0
"""How long a check's read waits for the next message while it is short of the subject's
last one, before it starts again."""


async def _read_through(
    js: JetStreamContext, subject: str, last: int, quiet_s: float
) -> list[tuple[int, dict[str, Any]]]:
    sub = await answered(
        lambda: js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    )
    found: list[tuple[int, dict[str, Any]]] = []
    try:
        while True:
            short = not found or found[-1][0] < last
            try:
                msg = await sub.next_msg(timeout=STORED_STALL_S if short else quiet_s)
            except nats.errors.TimeoutError:
                return found
            found.append((msg.metadata.sequence.stream, json.loads(msg.data)))
    finally:
        await sub.unsubscribe()


INGEST_TERMINAL = frozenset({"completed", "failed"})


async def ingest_events(
    js: JetStreamContext,
    job_id: str,
    after_seq: int = 0,
    *,
    is_finished: Finished | None = None,
) -> AsyncGenerator[tuple[int, dict[str, Any]]]:
    """An ingest job's progress events; ends after the one that says `completed`/`failed`
    (or, with `is_finished`, when the job is over and the stream holds nothing more)."""
    messages = stream_messages(
        js,
        sj.ingest_events_subject(job_id),
        sj.STREAM_INGEST_EVENTS,
        after_seq,
        is_finished=is_finished,
    )
    async with aclosing(messages):
        async for seq, event in messages:
            yield seq, event
            if (event.get("data") or {}).get("status") in INGEST_TERMINAL:
                return
