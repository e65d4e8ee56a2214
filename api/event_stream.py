"""Reading a subject of a limits stream from JetStream: replay, then follow live.

An ordered consumer is ephemeral, flow-controlled and resets itself on a sequence gap,
so a reader sees every message exactly once and in order without any server-side
state to clean up. The SSE endpoint and the CLI share these iterators.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects as sj
from infra.logging import get_logger

log = get_logger(__name__)

Finished = Callable[[], Awaitable[bool]]
"""Asked while the subject is quiet: True means nothing more will ever come."""

IDLE_CHECK_S = 5.0
FINAL_DRAIN_S = 0.5


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

    Runs until the caller stops iterating, or until `is_finished()` says so during a
    quiet spell (and one short drain brings nothing more).
    """
    config = (
        ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1)
        if after_seq > 0
        else ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True, config=config)
    try:
        draining = False
        while True:
            try:
                msg = await sub.next_msg(timeout=FINAL_DRAIN_S if draining else idle_s)
            except nats.errors.TimeoutError:
                if draining:
                    return
                draining = is_finished is not None and await is_finished()
                continue
            draining = False
            try:
                body = json.loads(msg.data)
            except ValueError:
                log.warning("event_not_json", subject=subject)
                continue
            if isinstance(body, dict):
                yield msg.metadata.sequence.stream, body
    finally:
        await sub.unsubscribe()


async def request_events(
    js: JetStreamContext,
    request_id: str,
    after_seq: int = 0,
    *,
    is_finished: Finished | None = None,
    idle_s: float = IDLE_CHECK_S,
) -> AsyncGenerator[tuple[int, dict[str, Any]]]:
    """A request's caller events, each with `"seq"` added; ends after its `done` event."""
    messages = stream_messages(
        js,
        sj.events_subject(request_id),
        sj.STREAM_EVENTS,
        after_seq,
        is_finished=is_finished,
        idle_s=idle_s,
    )
    async with aclosing(messages):
        async for seq, event in messages:
            event["seq"] = seq
            yield seq, event
            if event.get("type") == "done":
                return


INGEST_TERMINAL = frozenset({"completed", "failed"})


async def ingest_events(
    js: JetStreamContext, job_id: str, after_seq: int = 0
) -> AsyncGenerator[tuple[int, dict[str, Any]]]:
    """An ingest job's progress events; ends after the one that says `completed`/`failed`."""
    messages = stream_messages(
        js, sj.ingest_events_subject(job_id), sj.STREAM_INGEST_EVENTS, after_seq
    )
    async with aclosing(messages):
        async for seq, event in messages:
            yield seq, event
            if (event.get("data") or {}).get("status") in INGEST_TERMINAL:
                return
