"""What every step worker shares: the ack / retry / dead-letter policy, and where a step's result
goes (`ResultPublisher`); and what the channels' workers (search, memory) share: a search
result's event id (`result_event_id`) and how much of its query a channel's phase event shows
(`SHOWN_QUERY_CHARS`). A step's phase events are `phase_events`; what a handler knows of its
message (deliveries, its request's liveness) is `step_context`.

The policy is a FastStream router middleware with manual acks, so one place decides:
success -> ack; transient failure with deliveries left -> nak with delay; anything
else (malformed body, a bug, retries exhausted) -> copy to `rag.dlq.<subject>` with
the reason, tell the orchestrator the step failed, and ack so the consumer moves on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from faststream import AckPolicy, BaseMiddleware
from faststream.message import StreamMessage
from faststream.nats import JStream, NatsRouter
from faststream.nats.message import NatsMessage
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.commands import SearchCommand
from contracts.enums import Channel, Step, StepStatus
from contracts.envelope import Envelope
from contracts.results import StepResult
from infra.errors import PoisonMessage, describe_error, is_transient
from infra.logging import get_logger
from infra.metrics import MESSAGES, UNKNOWN_REQUESTS
from infra.runtime.bus import Bus, acked, json_headers, send_held_first
from infra.runtime.dead_letters import dead_letter, report_step_failure, request_id_of
from infra.runtime.phase_events import PhaseBatch, PhaseRun, holding_phase_events
from infra.runtime.resources import Resources
from infra.runtime.step_context import RequestNotLive, message_context
from infra.settings import Settings

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


async def _flush_failed_step(held: PhaseBatch) -> None:
    """A failed step's held events (its `failed` phase says why) before its failure is
    handled; when they cannot go out either, they are dropped: the failure goes on."""
    try:
        await held.flush()
    except Exception as exc:
        held.drop()
        log.warning("phase_events_not_sent", error=describe_error(exc))


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

    async def _request_ended(body: str) -> bool:
        """Whether the command's request is known to have ended (False when it cannot be
        told: no liveness to ask, no request id, or Redis not answering)."""
        request_id = request_id_of(body)
        if is_live is None or request_id is None:
            return False
        try:
            return not await is_live(request_id)
        except Exception:
            return False

    class StepErrorPolicy(BaseMiddleware):
        async def consume_scope(self, call_next: Any, msg: StreamMessage[Any]) -> Any:
            subject = _subject(msg)
            deliveries = delivery_count(msg)
            structlog.contextvars.clear_contextvars()
            heartbeat = Heartbeat(msg, settings.ack_wait_s / 2)
            with (
                message_context(is_live, deliveries),
                holding_phase_events(bus) as held,
            ):
                try:
                    result = await call_next(msg)
                    await held.flush()
                except RequestNotLive as exc:
                    heartbeat.stop()
                    held.drop()
                    UNKNOWN_REQUESTS.labels(kind="command").inc()
                    MESSAGES.labels(subject=subject, outcome="dropped").inc()
                    log.warning("command_for_unknown_request", subject=subject, request_id=str(exc))
                    await msg.ack()
                    return None
                except Exception as exc:
                    heartbeat.stop()
                    await _flush_failed_step(held)
                    await self._on_failure(msg, subject, deliveries, exc)
                    return None
                finally:
                    heartbeat.stop()
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
            body = _body_text(msg)
            a_step = subject.startswith(sj.CMD_PREFIX + ".")  # of a question, not a file's job
            if a_step and not isinstance(exc, ValidationError) and await _request_ended(body):
                # nothing waits for the step of a request that has ended (a command
                # redelivered after its request's done, whose claims went with it): dropped,
                # as a command found unlive before it starts, never an operator's page
                UNKNOWN_REQUESTS.labels(kind="failed_after_end").inc()
                MESSAGES.labels(subject=subject, outcome="dropped").inc()
                log.warning("step_failed_after_request_ended", subject=subject, error=error)
                await msg.ack()
                return
            MESSAGES.labels(subject=subject, outcome=reason).inc()
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


SHOWN_QUERY_CHARS = 200
"""How much of the searched query a channel's phase event shows."""


def result_event_id(cmd: SearchCommand) -> str:
    """Derived from the command, so a redelivered command's second answer is dropped by the
    broker's duplicate window instead of reaching the orchestrator twice."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"ragbus/result/{cmd.event_id}").hex


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
        await send_held_first()  # the step's phase events before the result the saga answers
        body = result.compact_json().encode()
        headers = json_headers(result.event_id)
        await acked(lambda: self._publisher.publish(body, headers=headers))
