"""The broker and publishing: our messages go out as JSON bodies with broker-side dedupe.

Every message carries `Nats-Msg-Id` (its `event_id`), so a publish retries until its ack comes
(`acked`) and a re-send of one the stream took is dropped by the stream itself. A publish
waits out a cluster electing its leaders (`until_jetstream_answers`), and the caller events a
handled message holds back go out before anything else it sends (`send_held_first`). What the
messages travel through, the streams and durable consumers, is `infra.runtime.topology`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Protocol, TypeVar

import nats.errors
import nats.js.errors
from faststream.nats import NatsBroker
from nats.js.api import PubAck
from pydantic import BaseModel

from contracts import subjects as sj
from contracts.envelope import Envelope
from contracts.events import CallerEvent
from infra.logging import get_logger
from infra.runtime.subject_tail import DoneFence
from infra.settings import Settings
from infra.telemetry import broker_middlewares

log = get_logger(__name__)

T = TypeVar("T")

MSG_ID_HEADER = "Nats-Msg-Id"
CONTENT_TYPE_HEADER = "content-type"
JSON_CONTENT_TYPE = "application/json"
PUBLISH_RETRY_S = 20.0
"""How long a publish keeps trying by default (`RAGBUS_PUBLISH_RETRY_S` sets the bus's)."""

JETSTREAM_UNAVAILABLE: tuple[type[Exception], ...] = (
    nats.errors.TimeoutError,  # the ack is late
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,  # the stream has no leader: a cluster is electing one
    nats.js.errors.ServiceUnavailableError,
)
"""What a retry can fix: a late answer, or a stream with no leader while a cluster elects one."""


def no_correlation_id() -> str:
    """FastStream's `id_generator`: no `correlation_id` header. Every body carries its
    `event_id` (also its `Nats-Msg-Id`), its `request_id` and its trace, so FastStream's
    uuid4 a publish was 54 bytes of header on every message, and a uuid4 made for nothing."""
    return ""


def create_broker(settings: Settings, name: str = "ragbus") -> NatsBroker:
    """FastStream's per-message access lines go to a stdlib logger at DEBUG: our own
    structlog events already say what happened to each message, with its request_id.
    Without FastStream's dependency injection: every handler takes one argument, the message
    its subscriber's decoder (`topology.json_decoder`) already validated."""
    return NatsBroker(
        settings.nats_servers,
        apply_types=False,
        id_generator=no_correlation_id,
        name=name,
        middlewares=broker_middlewares(),
        graceful_timeout=10.0,
        logger=logging.getLogger("ragbus.broker"),
        log_level=logging.DEBUG,
        user_credentials=settings.nats_credentials,
    )


class PublishAbandoned(Exception):
    """A publish waiting out JetStream gave up because its message is no longer wanted (the
    request whose event it is has finished meanwhile)."""


async def until_jetstream_answers(
    call: Callable[[], Awaitable[T]],
    budget_s: float,
    *,
    first_delay_s: float,
    max_delay_s: float,
    event: str,
    level: int = logging.INFO,
    still_wanted: Callable[[], Awaitable[bool]] | None = None,
) -> T:
    """Run `call`, and again while JetStream cannot answer it (`JETSTREAM_UNAVAILABLE`: a late
    answer, or a stream with no leader while a cluster elects one after losing a node, seconds
    on nats-server 2.9), backing off from `first_delay_s` doubling to `max_delay_s`; once the
    next try would fall past `budget_s`, the last error is raised. Each retry logs `event` at
    `level`. With `still_wanted`, each retry first asks it, and raises `PublishAbandoned` when
    the answer is no. A plain loop: it wraps every publish, where a retry library's machinery
    cost more than the publish itself."""
    deadline = time.monotonic() + budget_s
    delay = first_delay_s
    while True:
        try:
            return await call()
        except JETSTREAM_UNAVAILABLE as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.log(level, event, error=type(exc).__name__, retry_in_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay_s)
            if still_wanted is not None and not await still_wanted():
                raise PublishAbandoned(event) from exc


async def acked(
    send: Callable[[], Awaitable[T]],
    retry_s: float = PUBLISH_RETRY_S,
    still_wanted: Callable[[], Awaitable[bool]] | None = None,
) -> T:
    """Run a JetStream publish until its ack comes, for up to `retry_s` (backing off from
    0.2 s to 2 s). Safe because every message carries `Nats-Msg-Id`: a re-send of one the
    stream took is a no-op. `still_wanted` is asked before each re-send."""
    return await until_jetstream_answers(
        send,
        retry_s,
        first_delay_s=0.2,
        max_delay_s=2.0,
        event="publish_retried",
        still_wanted=still_wanted,
    )


FULL_JSON_STREAMS = frozenset({sj.STREAM_EVENTS, sj.STREAM_INGEST_EVENTS, sj.STREAM_DLQ})
"""Streams whose readers may read the JSON without our models (callers of the event streams,
operators of the dead letters): their messages keep every field."""


def wire_json(message: BaseModel, stream: str) -> str:
    """A message's body for `stream`: the compact form between ragbus's own processes (fields
    at their defaults left out, `Envelope.compact_json`), every field where others read it."""
    if stream in FULL_JSON_STREAMS or not isinstance(message, Envelope):
        return message.model_dump_json()
    return message.compact_json()


def json_headers(event_id: str | None) -> dict[str, str]:
    """`Nats-Msg-Id` for the broker's dedupe, and the content type FastStream decodes by."""
    headers = {CONTENT_TYPE_HEADER: JSON_CONTENT_TYPE}
    if event_id:
        headers[MSG_ID_HEADER] = event_id
    return headers


class HeldEvents(Protocol):
    """Caller events the message being handled holds back, to send together
    (`phase_events.PhaseBatch`)."""

    def waiting(self) -> bool: ...

    async def flush(self) -> None: ...


HELD_EVENTS: ContextVar[HeldEvents | None] = ContextVar("ragbus_held_events", default=None)
"""The held events of the message being handled (set by the error policy for each message)."""


async def send_held_first() -> None:
    """Before any other message of the message being handled goes out: the caller events it
    holds, so that none is overtaken by what follows it (a result the saga answers with its
    done, a token after the phase it belongs to)."""
    held = HELD_EVENTS.get()
    if held is not None and held.waiting():
        await held.flush()


class Bus:
    """Publishes our messages: JSON bodies, `Nats-Msg-Id = event_id`, into the right stream.
    Bodies are serialised once, by pydantic, and handed to the broker as bytes."""

    def __init__(
        self,
        broker: NatsBroker,
        *,
        phase_start_after_s: float = 0.0,
        publish_retry_s: float = PUBLISH_RETRY_S,
    ) -> None:
        self.broker = broker
        self.publish_retry_s = publish_retry_s
        self.phase_start_after_s = phase_start_after_s
        """A step's `in_progress` event waits this long, and is not sent at all for a step
        that ends sooner (`worker_runtime.phase`): its start is implied by its command."""
        self.fence: DoneFence | None = None
        """Given once the broker is connected (`launcher.runtime`): how a step's event that
        asks whether its request is live goes out fenced against the request's done
        (`done_fence.emit_unless_done`)."""

    @classmethod
    def from_settings(cls, broker: NatsBroker, settings: Settings) -> Bus:
        return cls(
            broker,
            phase_start_after_s=settings.phase_start_after_ms / 1000,
            publish_retry_s=settings.publish_retry_s,
        )

    async def publish(
        self,
        message: BaseModel,
        subject: str,
        stream: str,
        still_wanted: Callable[[], Awaitable[bool]] | None = None,
    ) -> PubAck | None:
        """Publish and wait for the stream's ack; `PubAck.duplicate` tells a dropped re-send."""
        event_id = getattr(message, "event_id", None)
        return await self.publish_raw(
            wire_json(message, stream).encode(),
            subject,
            stream,
            str(event_id or "") or None,
            still_wanted,
        )

    async def publish_raw(
        self,
        body: bytes,
        subject: str,
        stream: str,
        event_id: str | None,
        still_wanted: Callable[[], Awaitable[bool]] | None = None,
    ) -> PubAck | None:
        """An already serialised JSON body (the orchestrator's outbox keeps bodies that way).
        `still_wanted` is asked before each re-send (`acked`). Held caller events go first
        (`send_held_first`)."""
        await send_held_first()
        headers = json_headers(event_id)
        ack = await acked(
            lambda: self.broker.publish(body, subject, headers=headers, stream=stream),
            self.publish_retry_s,
            still_wanted,
        )
        return ack if isinstance(ack, PubAck) else None

    async def emit(
        self, event: CallerEvent, still_wanted: Callable[[], Awaitable[bool]] | None = None
    ) -> None:
        """A caller event on the request's own subject. A worker's event passes `still_wanted`
        (is its request live?): a publish that waits out a leader election must not land after
        the request's `done`, which may have gone out meanwhile."""
        await self.publish(
            event,
            sj.events_subject(event.tenant, event.request_id),
            sj.STREAM_EVENTS,
            still_wanted,
        )
