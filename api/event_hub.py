"""One JetStream consumer of every caller event, shared by all the event streams an API process
serves.

A reader of its own (`api.event_stream.stream_messages`) costs an ephemeral ordered consumer per
request: a JetStream API call to create it before the first event, the server's consumer with its
heartbeats and flow control for the request's life, and its removal after. Measured on this
machine (`FINDINGS`-style, 500 requests of 10 events each): 1.2 ms of nats-server CPU and 1.3 ms
of client CPU a request, against 0.08 and 0.2 ms for the same events through one consumer.

So the API process keeps one ordered consumer on the events stream (`EventHub`), from the
stream's end when it starts, and hands each message to the readers of its subject. A reader
(`EventHub.messages`) registers for its subject, then replays what the hub passed before it
registered: one `next_by_subj` read of the stream, and the rest from the hub's memory of recent
subjects (message by message from the stream when that memory does not reach back far enough),
then follows what the hub hands it. Every message carries its stream
sequence, so what arrives twice (read from the stream and handed over) is dropped by sequence,
and the order is the stream's.

Nothing relies on the shared consumer alone: a reader that hears nothing for a while asks, as
the per-request reader does, whether its request is finished and whether the stream holds more
for its subject than it has passed on, and reads it from the stream if so; and the hub, when it
has dispatched nothing for a while, compares its position with the stream's last sequence and
subscribes again from where it stopped (a consumer lost with a nats-server node).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterator
from contextlib import aclosing
from typing import Any

import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, RawStreamMsg

from api.event_stream import (
    FINAL_DRAIN_S,
    IDLE_CHECK_S,
    Finished,
    after_quiet,
    answered,
    json_body,
    stream_messages,
)
from contracts import subjects as sj
from infra.logging import get_logger

log = get_logger(__name__)

WATCH_S = 5.0
"""How long the hub may dispatch nothing before it checks that its consumer still follows."""
RECENT_SUBJECTS = 512
"""Subjects whose latest messages the hub keeps in memory (the oldest forgotten first): a
reader that registers soon after its request began replays from memory, not message by message
from the stream (about ten seconds of requests at 50 a second)."""
RECENT_PER_SUBJECT = 256
"""A subject with more messages than this is forgotten (a reader then reads the stream)."""

Delivery = tuple[int, bytes]


class EventHub:
    """`async with EventHub(js) as hub:` follows `stream` (every subject under `subjects`) and
    hands each message to the readers of its subject (`messages`)."""

    def __init__(
        self,
        js: JetStreamContext,
        stream: str = sj.STREAM_EVENTS,
        subjects: str = f"{sj.EVENTS_PREFIX}.>",
        *,
        watch_s: float = WATCH_S,
    ) -> None:
        self._js = js
        self.stream = stream
        self._subjects = subjects
        self._watch_s = watch_s
        self._readers: dict[str, set[asyncio.Queue[Delivery]]] = {}
        self._recent: OrderedDict[str, list[Delivery]] = OrderedDict()
        """Each recent subject's messages since the hub first dispatched one of it: append
        only, so a list that starts at or before a message holds every later one."""
        self.position = 0
        """The stream sequence of the last message dispatched: every message up to it has been
        handed to the readers registered when it came, and every later one will be."""
        self._dispatched = 0
        self._sub: JetStreamContext.PushSubscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._followed = asyncio.Event()

    async def __aenter__(self) -> EventHub:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._unsubscribe()

    @property
    def following(self) -> bool:
        """Whether the hub follows the stream yet (an API may start before the streams are
        declared, or while JetStream cannot answer); until then each reader reads the stream
        with a consumer of its own (`stream_messages`)."""
        return self._sub is not None

    async def wait_following(self) -> None:
        """Until the hub follows the stream (tests, and anyone who would rather wait)."""
        await self._followed.wait()

    async def _run(self) -> None:
        while self._sub is None:
            try:
                info = await answered(lambda: self._js.stream_info(self.stream))
                self.position = int(info.state.last_seq or 0)
                await self._subscribe()
            except Exception as exc:  # no stream yet, or JetStream away: try again soon
                log.info("event_hub_waiting", error=type(exc).__name__)
                await asyncio.sleep(self._watch_s)
        await self._watchdog()

    async def _subscribe(self) -> None:
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.position + 1
        )
        self._sub = await answered(
            lambda: self._js.subscribe(
                self._subjects,
                stream=self.stream,
                ordered_consumer=True,
                config=config,
                cb=self._dispatch,
            )
        )
        self._followed.set()

    async def _unsubscribe(self) -> None:
        self._followed.clear()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _dispatch(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        self.position = seq
        self._dispatched += 1
        delivery = (seq, msg.data)
        recent = self._recent.get(msg.subject)
        if recent is None:
            recent = self._recent[msg.subject] = []
            if len(self._recent) > RECENT_SUBJECTS:
                self._recent.popitem(last=False)
        if len(recent) < RECENT_PER_SUBJECT:
            recent.append(delivery)
        else:
            del self._recent[msg.subject]
        for queue in self._readers.get(msg.subject, ()):
            queue.put_nowait(delivery)

    async def _watchdog(self) -> None:
        """Subscribe again from `position` when nothing came for `watch_s` while the stream
        moved on: an ordered consumer that nats-py could not make again (its node gone while
        the cluster elected a leader) delivers nothing more."""
        seen = self._dispatched
        while True:
            await asyncio.sleep(self._watch_s)
            if self._dispatched != seen:
                seen = self._dispatched
                continue
            try:
                info = await answered(lambda: self._js.stream_info(self.stream))
                if int(info.state.last_seq or 0) > self.position and self._dispatched == seen:
                    log.warning("event_hub_behind", position=self.position)
                    await self._unsubscribe()
                    await self._subscribe()
            except Exception as exc:  # JetStream away for long: try again next time
                log.warning("event_hub_check_failed", error=str(exc))

    @contextlib.contextmanager
    def _registered(self, subject: str) -> Iterator[asyncio.Queue[Delivery]]:
        queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._readers.setdefault(subject, set()).add(queue)
        try:
            yield queue
        finally:
            readers = self._readers.get(subject)
            if readers is not None:
                readers.discard(queue)
                if not readers:
                    del self._readers[subject]

    async def _stored(
        self, subject: str, after_seq: int, up_to: int | None = None
    ) -> AsyncIterator[Delivery]:
        """The stream's messages on `subject` after `after_seq` (up to `up_to`), one
        `next_by_subj` read each; or, once a read finds a message that the hub's memory of the
        subject (`_recent`) starts at or before, the rest up to `up_to` from that memory."""
        seq = after_seq
        while True:
            try:
                raw = await answered(functools.partial(self._next, subject, seq + 1))
            except nats.js.errors.NotFoundError:
                return
            if raw.seq is None or (up_to is not None and raw.seq > up_to):
                return
            seq = raw.seq
            yield seq, raw.data or b""
            held = self._recent.get(subject)
            if up_to is not None and held and held[0][0] <= seq:
                for delivery in list(held):
                    if seq < delivery[0] <= up_to:
                        yield delivery
                return

    def _next(self, subject: str, from_seq: int) -> Awaitable[RawStreamMsg]:
        return self._js.get_msg(self.stream, from_seq, subject=subject, next=True)

    async def messages(
        self,
        subject: str,
        after_seq: int = 0,
        *,
        is_finished: Finished | None = None,
        idle_s: float = IDLE_CHECK_S,
    ) -> AsyncGenerator[tuple[int, dict[str, Any]]]:
        """`api.event_stream.stream_messages`, served by the hub: `(stream sequence, JSON
        body)` for `subject` after `after_seq`, until the caller stops or `is_finished()` says
        so in a quiet spell and the stream holds nothing more for the subject."""
        if not self.following:
            alone = stream_messages(
                self._js, subject, self.stream, after_seq, is_finished=is_finished, idle_s=idle_s
            )
            async with aclosing(alone):
                async for item in alone:
                    yield item
            return
        with self._registered(subject) as queue:
            delivered, draining = after_seq, False
            # Registered at `position`: what came before, the stream holds and the hub will not
            # hand over again; what comes after, the hub will.
            async for seq, data in self._stored(subject, delivered, up_to=self.position):
                delivered = seq
                if (body := json_body(data, subject)) is not None:
                    yield seq, body
            while True:
                try:
                    if queue.empty():
                        # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` wraps the
                        # get in a task of its own, for every event a reader waits for
                        async with asyncio.timeout(FINAL_DRAIN_S if draining else idle_s):
                            seq, data = await queue.get()
                    else:
                        seq, data = queue.get_nowait()
                except TimeoutError:
                    quiet = await after_quiet(
                        self._js, self.stream, subject, delivered, draining, is_finished
                    )
                    if quiet == "end":
                        return
                    draining = quiet == "drain"
                    if quiet == "catch_up":
                        async for seq, data in self._stored(subject, delivered):
                            delivered = seq
                            if (body := json_body(data, subject)) is not None:
                                yield seq, body
                    continue
                if seq <= delivered:  # read from the stream already
                    continue
                draining = False
                delivered = seq
                if (body := json_body(data, subject)) is not None:
                    yield seq, body
