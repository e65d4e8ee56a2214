"""Nothing after a done, enforced by the broker: a step's event that has to ask whether its
request is still live goes out fenced on the request's subject.

Asking Redis and then publishing leaves a window: the saga may finish the request and publish
its `done` between the answer and the publish, and the event lands after the done (the ten-
minute chaos run saw it once in 14,256 requests: a redelivered command's phases, one message
after the done its first delivery had led to). The fence closes the window with JetStream's
own compare-and-set: read the subject's last message; a `done` there means the request has
ended and the event is dropped; otherwise publish with `Nats-Expected-Last-Subject-Sequence`
set to that message's sequence, which the stream refuses (error 10071, or 10164 on a cluster
while another message for the subject is in flight through its replicas) when anything, a
done included, has landed on the subject since. A refused publish reads again, and so does every
re-send (`acked`): nats-server 2.12 checks the sequence before the `Nats-Msg-Id` dedupe, so a
re-send of an event the stream took, with its old expectation, would be refused; with the
fresh one, the dedupe drops it.

Only the events that ask go this way (a redelivery's, or a step's that ran long enough to
announce itself: `phase_events`): it costs a read of the subject first. A request's other
events go out plainly, its first deliveries' quick steps, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import nats.js.errors

from contracts import subjects as sj
from contracts.events import CallerEvent
from infra.logging import get_logger
from infra.metrics import FENCED_EVENTS
from infra.runtime.bus import (
    Bus,
    PublishAbandoned,
    acked,
    json_headers,
    send_held_first,
    wire_json,
)
from infra.runtime.subject_tail import DoneFence, SubjectTail

log = get_logger(__name__)

__all__ = ["MAX_FENCED_TRIES", "DoneFence", "SubjectTail", "emit_unless_done"]

EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = frozenset({10071, 10164})
"""JetStream's error codes for a publish whose `Nats-Expected-Last-Subject-Sequence` is not the
subject's last sequence any more: 10071 names the sequence found; 10164 (nats-server 2.12, a
clustered stream) says only "wrong last sequence", when another message for the subject is
still in flight through the stream's replicas. Either means: read the tail again. Taking 10164
for a failure had dead-lettered every such event's command on a cluster (34 in eight minutes
of `ragbus chaos --nats-nodes 3`), each a late step of a request that had completed."""

MAX_FENCED_TRIES = 16
"""A refused publish reads and tries again; each refusal means another message landed on the
request's subject, and a request has few. Past this many, the event goes out the plain way."""


async def emit_unless_done(
    bus: Bus, event: CallerEvent, still_wanted: Callable[[], Awaitable[bool]]
) -> None:
    """`event` on its request's subject, fenced against the request's `done` (see the module's
    doc); `PublishAbandoned` when the done is there. Without a fence (a bus not connected to
    JetStream: the unit tests' in-memory broker), or past `MAX_FENCED_TRIES` refusals, it asks
    `still_wanted` and publishes the plain way."""
    if bus.fence is None or not await _fenced(bus, bus.fence, event):
        if not await still_wanted():
            raise PublishAbandoned(event.type)
        await bus.emit(event, still_wanted=still_wanted)


async def _fenced(bus: Bus, fence: DoneFence, event: CallerEvent) -> bool:
    """Publish `event` fenced; False when the subject kept moving for `MAX_FENCED_TRIES`
    reads."""
    subject = sj.events_subject(event.tenant, event.request_id)
    body = wire_json(event, sj.STREAM_EVENTS).encode()
    await send_held_first()

    async def attempt() -> bool:
        for _ in range(MAX_FENCED_TRIES):
            tail = await fence.tail(sj.STREAM_EVENTS, subject)
            if tail.done:
                FENCED_EVENTS.labels(outcome="dropped").inc()
                raise PublishAbandoned(event.type)
            headers = json_headers(event.event_id)
            headers[EXPECTED_LAST_SUBJECT_SEQUENCE] = str(tail.seq)
            try:
                await bus.broker.publish(body, subject, headers=headers, stream=sj.STREAM_EVENTS)
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code not in WRONG_LAST_SEQUENCE:
                    raise
                FENCED_EVENTS.labels(outcome="refused").inc()
                continue
            FENCED_EVENTS.labels(outcome="sent").inc()
            return True
        FENCED_EVENTS.labels(outcome="contended").inc()
        log.warning("event_fence_contended", tries=MAX_FENCED_TRIES, type=event.type)
        return False

    return await acked(attempt, bus.publish_retry_s)
