"""What every step worker shares: the ack / retry / dead-letter policy and phase events.

The policy is a FastStream router middleware with manual acks, so one place decides:
success -> ack; transient failure with deliveries left -> nak with delay; anything
else (malformed body, a bug, retries exhausted) -> copy to `rag.dlq.<subject>` with
the reason, tell the orchestrator the step failed, and ack so the consumer moves on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import structlog
from faststream import AckPolicy, BaseMiddleware
from faststream.message import StreamMessage
from faststream.nats import JStream, NatsRouter
from faststream.nats.message import NatsMessage
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.enums import Channel, Phase, PhaseStatus, Step, StepStatus
from contracts.envelope import Envelope, utcnow
from contracts.events import PhaseData, PhaseEvent
from contracts.results import StepResult
from infra.errors import PoisonMessage, is_transient
from infra.logging import get_logger
from infra.metrics import MESSAGES, STEP_SECONDS, UNKNOWN_REQUESTS
from infra.runtime.bus import Bus, PublishAbandoned, acked, json_headers
from infra.runtime.dead_letters import dead_letter, report_step_failure
from infra.runtime.resources import Resources
from infra.settings import Settings
from infra.telemetry import tracer

log = get_logger(__name__)

DeadLetterHook = Callable[[Bus, str, str, str], Awaitable[object]]
"""Called with (bus, subject, body, error) once a message is dead-lettered."""


def delivery_count(msg: StreamMessage[Any]) -> int:
    """How many times JetStream has delivered this message (1 outside JetStream)."""
    try:
        return int(msg.raw_message.metadata.num_delivered)
    except Exception:
        return 1


def _body_text(msg: StreamMessage[Any]) -> str:
    body = msg.body
    if isinstance(body, bytes | bytearray):
        return bytes(body).decode("utf-8", errors="replace")
    return str(body)


def _subject(msg: StreamMessage[Any]) -> str:
    raw = getattr(msg, "raw_message", None)
    return str(getattr(raw, "subject", "") or getattr(msg, "path", {}).get("subject", "") or "")


def describe_error(exc: BaseException) -> str:
    """An exception as one line for an error event or a dead letter."""
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in err['loc']) or '<body>'}: {err['msg']}"
            for err in exc.errors()[:5]
        ]
        return "invalid message: " + "; ".join(parts)
    return f"{type(exc).__name__}: {exc}"


async def _nack(msg: StreamMessage[Any], delay: float) -> None:
    """Ask JetStream for redelivery after `delay` (plain nack outside JetStream)."""
    if isinstance(msg, NatsMessage):
        await msg.nack(delay=delay)
    else:
        await msg.nack()


class Heartbeat:
    """Tells JetStream every `every_s` that a message is still being worked on, so a long
    step is not redelivered to another replica; a dead process stops sending this, and
    redelivery follows. A timer rather than a task: nearly every message is done long before
    its first beat, and a timer is cancelled without a turn of the loop."""

    def __init__(self, msg: StreamMessage[Any], every_s: float) -> None:
        self._msg = msg
        self._every_s = max(every_s, 0.2)
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(self._every_s, self._beat)
        self._sending: asyncio.Task[None] | None = None

    def _beat(self) -> None:
        self._sending = asyncio.create_task(self._send())

    async def _send(self) -> None:
        try:
            await self._msg.in_progress()  # type: ignore[attr-defined]
        except Exception:
            return  # the message or the connection is gone: nothing left to keep alive
        self._timer = self._loop.call_later(self._every_s, self._beat)

    def stop(self) -> None:
        self._timer.cancel()
        if self._sending is not None:
            self._sending.cancel()


class RequestNotLive(Exception):
    """The command's request does not exist or has finished: drop the command unrun."""


class _Liveness:
    """One message's view of whether its request is live. `once` asks Redis once however
    many phases the message runs (a search command runs one per channel, side by side: they
    share the one answer); `now` asks again, for an event a long step is about to send."""

    def __init__(self, is_live: Callable[[str], Awaitable[bool]]) -> None:
        self._is_live = is_live
        self._asked: dict[str, asyncio.Future[bool]] = {}

    def once(self, request_id: str) -> Awaitable[bool]:
        if request_id not in self._asked:
            self._asked[request_id] = asyncio.ensure_future(self._is_live(request_id))
        return self._asked[request_id]

    async def now(self, request_id: str) -> bool:
        return await self._is_live(request_id)

    def found_finished(self, request_id: str) -> bool:
        """Whether this message has already found its request finished."""
        asked = self._asked.get(request_id)
        return (
            asked is not None and asked.done() and not asked.cancelled()
            and asked.exception() is None and not asked.result()
        )  # fmt: skip

    def finished(self, request_id: str) -> None:
        """The request was found finished: every later `once` for this message says so, so
        its next phase does not start (nothing of it may land after the request's done)."""
        ended: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ended.set_result(False)
        self._asked[request_id] = ended


_LIVENESS: ContextVar[_Liveness | None] = ContextVar("ragbus_liveness", default=None)
"""How the message being handled asks whether its request is live (set by the error policy)."""


_DELIVERIES: ContextVar[int] = ContextVar("ragbus_deliveries", default=1)
"""How many times JetStream has delivered the message being handled (set by the policy)."""


def current_deliveries() -> int:
    """The delivery count of the message being handled: handlers take only their decoded
    message (no dependency injection on the hot path), so the policy hands this over."""
    return _DELIVERIES.get()


async def require_live(request_id: str) -> None:
    liveness = _LIVENESS.get()
    if liveness is not None and not await liveness.once(request_id):
        raise RequestNotLive(request_id)


async def still_live(request_id: str) -> bool:
    """Asked afresh before a long step sends an event: its request may have finished (timed
    out, cancelled) while it ran, and nothing may follow a request's `done`."""
    liveness = _LIVENESS.get()
    return liveness is None or await liveness.now(request_id)


def error_policy(
    bus: Bus,
    settings: Settings,
    *,
    on_dead_letter: DeadLetterHook | None,
    is_live: Callable[[str], Awaitable[bool]] | None = None,
) -> type[BaseMiddleware]:
    """Build the router middleware. `on_dead_letter(bus, subject, body, error)` tells whoever waits
    on a dead-lettered message that it failed for good (`report_step_failure` for a step's
    command); None where nothing waits.
    With `is_live`, a command whose request does not exist or has finished is acknowledged and
    dropped once it has validated, before its step starts (`phase` asks), and counted in
    `ragbus_unknown_requests_total`."""

    class StepErrorPolicy(BaseMiddleware):
        async def consume_scope(self, call_next: Any, msg: StreamMessage[Any]) -> Any:
            subject = _subject(msg)
            deliveries = delivery_count(msg)
            structlog.contextvars.clear_contextvars()
            heartbeat = Heartbeat(msg, settings.ack_wait_s / 2)
            liveness = _LIVENESS.set(_Liveness(is_live) if is_live else None)
            delivered = _DELIVERIES.set(deliveries)
            try:
                result = await call_next(msg)
            except RequestNotLive as exc:
                heartbeat.stop()
                UNKNOWN_REQUESTS.labels(kind="command").inc()
                MESSAGES.labels(subject=subject, outcome="dropped").inc()
                log.warning("command_for_unknown_request", subject=subject, request_id=str(exc))
                await msg.ack()
                return None
            except Exception as exc:
                heartbeat.stop()
                await self._on_failure(msg, subject, deliveries, exc)
                return None
            finally:
                heartbeat.stop()
                _LIVENESS.reset(liveness)
                _DELIVERIES.reset(delivered)
                structlog.contextvars.clear_contextvars()
            await msg.ack()
            MESSAGES.labels(subject=subject, outcome="ok").inc()
            return result

        async def _on_failure(
            self, msg: StreamMessage[Any], subject: str, deliveries: int, exc: Exception
        ) -> None:
            error = describe_error(exc)
            if is_transient(exc) and deliveries < settings.max_deliver:
                log.warning("step_retry", subject=subject, deliveries=deliveries, error=error)
                MESSAGES.labels(subject=subject, outcome="retry").inc()
                await _nack(msg, settings.retry_delay_s * deliveries)
                return
            if isinstance(exc, ValidationError | PoisonMessage):
                reason = "poison"
            elif is_transient(exc):
                reason = "exhausted"
            else:
                reason = "failed"
                log.exception("step_failed", subject=subject, error=error)
            MESSAGES.labels(subject=subject, outcome=reason).inc()
            body = _body_text(msg)
            headers = {k: str(v) for k, v in (msg.headers or {}).items()}
            try:
                await dead_letter(
                    bus,
                    subject,
                    body,
                    headers,
                    reason=reason,
                    error=error,
                    deliveries=deliveries,
                )
                if on_dead_letter is not None:
                    await on_dead_letter(bus, subject, body, error)
            except (
                Exception
            ) as publish_exc:  # the broker itself is failing: let JetStream redeliver
                log.error("dead_letter_failed", subject=subject, error=str(publish_exc))
                await _nack(msg, settings.retry_delay_s)
                return
            await msg.ack()

    return StepErrorPolicy


@dataclass
class PhaseRun:
    metadata: dict[str, Any] = field(default_factory=dict)
    duration_ms: float = 0.0


@asynccontextmanager
async def phase(
    bus: Bus, envelope: Envelope, name: Phase, **metadata: Any
) -> AsyncIterator[PhaseRun]:
    """Run the body and emit `completed` or `failed` with the measured time, and `in_progress`
    first for a step that runs longer than `bus.phase_start_after_s`. A step of a request that
    is not live does not start (`RequestNotLive`)."""
    await require_live(envelope.request_id)
    structlog.contextvars.bind_contextvars(
        request_id=envelope.request_id, trace_id=envelope.trace.trace_id, phase=name.value
    )
    with tracer().start_as_current_span(
        name.value,
        attributes={
            "ragbus.request_id": envelope.request_id,
            "ragbus.attempt": envelope.attempt,
            "ragbus.phase": name.value,
        },
    ) as span:
        async with _phase_events(bus, envelope, name, metadata) as run:
            yield run
        span.set_attribute("ragbus.duration_ms", round(run.duration_ms, 2))


@asynccontextmanager
async def _phase_events(
    bus: Bus, envelope: Envelope, name: Phase, metadata: dict[str, Any]
) -> AsyncIterator[PhaseRun]:
    """`in_progress` once the step has run `bus.phase_start_after_s` (at once when 0; never
    for a step that ends sooner), then `completed` or `failed` with its start, end and
    duration. The start event, when sent, is on the subject before the end event. A step that
    runs that long sends each event only if its request is still live when it does."""
    run = PhaseRun(metadata=dict(metadata))
    started_at = utcnow()
    t0 = time.perf_counter()
    start = PhaseEvent(
        **envelope.correlation(),
        data=PhaseData(
            phase=name,
            status=PhaseStatus.IN_PROGRESS,
            started_at=started_at,
            metadata=dict(metadata),
        ),
    )
    announced = _Announcement(bus, start)
    await announced.schedule(bus.phase_start_after_s)
    status = PhaseStatus.COMPLETED
    try:
        yield run
    except Exception as exc:
        status = PhaseStatus.FAILED
        run.metadata["error"] = describe_error(exc)
        raise
    finally:
        # to the microsecond: the float's other ten digits are noise, and bytes on every event
        run.duration_ms = round((time.perf_counter() - t0) * 1000, 3)
        STEP_SECONDS.labels(phase=name.value).observe(run.duration_ms / 1000)
        log.info("phase_" + status.value, duration_ms=round(run.duration_ms, 2))
        await announced.settle()
        end = PhaseEvent(  # sent as it ends: its occurred_at is the end (`PhaseData`)
            **envelope.correlation(),
            data=PhaseData(
                phase=name,
                status=status,
                started_at=started_at,
                duration_ms=run.duration_ms,
                metadata=run.metadata,
            ),
        )
        # A step that ran long enough to announce itself asks again whether its request is
        # live: it may have timed out or been cancelled meanwhile, and nothing follows a done.
        # A quicker first delivery sends at once (its request was live a moment ago).
        ask_first = run.duration_ms / 1000 >= bus.phase_start_after_s
        await send_while_live(bus, end, ask_first=ask_first)


async def send_while_live(bus: Bus, event: PhaseEvent, *, ask_first: bool = False) -> None:
    """A step's event on its request's subject, or nothing once the request has finished:
    asked first when `ask_first` or when the message is a redelivery, and before each
    re-send of a publish that has to wait out JetStream (a stream electing a leader). The
    request's `done` may have gone out meanwhile, and nothing follows a done: a redelivery's
    earlier delivery may have finished the request (its worker killed after sending the
    result, before the ack), and a message that found its request finished sends nothing
    more."""

    def live() -> Awaitable[bool]:
        return still_live(event.request_id)

    liveness = _LIVENESS.get()
    try:
        if liveness is not None and liveness.found_finished(event.request_id):
            raise PublishAbandoned(event.type)  # an earlier event of this message found so
        if (ask_first or current_deliveries() > 1) and not await live():
            raise PublishAbandoned(event.type)
        await bus.emit(event, still_wanted=live)
    except PublishAbandoned:
        _dropped(event)
        # A step that goes on after this one (generation's own critique, say) has asked
        # once at the message's start, when the request was live: it must not send either.
        if liveness is not None:
            liveness.finished(event.request_id)


def _dropped(event: PhaseEvent) -> None:
    UNKNOWN_REQUESTS.labels(kind="phase_event").inc()
    log.info("phase_event_dropped", reason="request finished", status=event.data.status.value)


class _Announcement:
    """A step's `in_progress` event: sent now, later on a timer, or never."""

    def __init__(self, bus: Bus, event: PhaseEvent) -> None:
        self._bus = bus
        self._event = event
        self._timer: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None

    async def schedule(self, after_s: float) -> None:
        if after_s <= 0:
            await send_while_live(self._bus, self._event)
            return
        self._timer = asyncio.get_running_loop().call_later(after_s, self._send)

    def _send(self) -> None:
        """The timer's start event: only while the request is still live."""
        self._sending = asyncio.create_task(send_while_live(self._bus, self._event, ask_first=True))

    async def settle(self) -> None:
        """Before the end event: cancel the timer, or let a start already on its way land."""
        if self._timer is not None:
            self._timer.cancel()
        if self._sending is not None:
            try:
                await self._sending
            except Exception as exc:  # the end event still goes out; the start was a courtesy
                log.warning("phase_start_not_sent", error=str(exc))


def step_result_fields(cmd: Envelope, run: PhaseRun) -> dict[str, Any]:
    """Correlation fields every result copies from its command."""
    return {
        **cmd.correlation(),
        "command_id": cmd.event_id,
        "duration_ms": run.duration_ms,
        "status": StepStatus.OK,
    }


def step_router(
    resources: Resources, *, on_dead_letter: DeadLetterHook | None = report_step_failure
) -> NatsRouter:
    """A worker kind's router: manual acks, and the error policy above on every subscriber.
    A dead-lettered command is reported to the saga as its step's failure unless
    `on_dead_letter` says otherwise."""
    return NatsRouter(
        middlewares=[
            error_policy(
                resources.bus,
                resources.settings,
                on_dead_letter=on_dead_letter,
                is_live=resources.is_live,
            )
        ],
        ack_policy=AckPolicy.MANUAL,
    )


class ResultPublisher:
    """Where a step reports: declared on the router (so AsyncAPI documents the result's
    schema), published with `Nats-Msg-Id` and a retried ack like every other message."""

    def __init__(
        self,
        router: NatsRouter,
        step: Step,
        schema: type[StepResult],
        channel: Channel | None = None,
    ) -> None:
        subject = sj.res_subject(step, channel)
        self._publisher = router.publisher(
            subject,
            stream=JStream(sj.STREAM_RES, declare=False),
            schema=schema,
            title=f"{subject}:result",
        )

    async def publish(self, result: StepResult) -> None:
        body = result.compact_json().encode()
        headers = json_headers(result.event_id)
        await acked(lambda: self._publisher.publish(body, headers=headers))
