"""A step's phase events: `phase` times a step and reports it to the caller, and a message's
events are held to go out together (`PhaseBatch`).

Each phase ends with one event (`completed` or `failed`, with its start and duration), after
an `in_progress` one only for a step that runs longer than `bus.phase_start_after_s`. A
message's steps often end within moments of each other: a search command classifies, searches
four channels side by side and fuses them in a few milliseconds. Each event on its own costs a
publish, its ack, a message stored, and the API's dispatch of it, about 0.4 ms of Python end to
end (`results/bus-phase-events-bound.json`). So while the error policy handles a message, its
phase events are held (`holding_phase_events`) and go out as one `phases` message (or the lone
`phase` event) when:
- any other message of the handler is about to be published (its result, a dead letter, a
  token: `bus.send_held_first`), so no event is overtaken by what follows it;
- a step announces itself (`in_progress`): it has run `phase_start_after_s` and the caller
  should see it now, with whatever was held before it;
- the message's handling ends, however it ends;
- `MAX_PHASES_PER_MESSAGE` are held, or the next event is of another request or attempt.

So an event waits at most about `phase_start_after_s` (a step that runs longer announces
itself, and the announcement takes the held events with it). The SSE stream relays each entry
of a `phases` message as its own `phase` event (`contracts.events.phase_events`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import structlog

from contracts.enums import Phase, PhaseStatus
from contracts.envelope import Envelope, utcnow
from contracts.events import MAX_PHASES_PER_MESSAGE, PhaseData, PhaseEvent, PhasesEvent
from infra.errors import describe_error
from infra.logging import get_logger
from infra.metrics import STEP_SECONDS, UNKNOWN_REQUESTS
from infra.runtime.bus import HELD_EVENTS, Bus, PublishAbandoned
from infra.runtime.done_fence import emit_unless_done
from infra.runtime.step_context import (
    LIVENESS,
    current_deliveries,
    heard_live_before,
    require_live,
    still_live,
)
from infra.telemetry import tracer

log = get_logger(__name__)

ASK_AFTER_HELD_S = 0.1
"""A held event that waited this long asks whether its request is live before it goes out:
its request may have finished meanwhile, and nothing follows a request's `done`."""


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
        # A quicker first delivery sends at once (its request was live a moment ago, unless
        # its message waited since: `_send_while_live`).
        ask_first = run.duration_ms / 1000 >= bus.phase_start_after_s
        await send_while_live(bus, end, ask_first=ask_first)


async def send_while_live(bus: Bus, event: PhaseEvent, *, ask_first: bool = False) -> None:
    """A step's event on its request's subject, or nothing once the request has finished.
    While the error policy handles a message, the event is held to go out with the message's
    others (`PhaseBatch`); an `in_progress` one goes out at once, with what is held."""
    held = HELD_EVENTS.get()
    if not isinstance(held, PhaseBatch) or held.bus is not bus:
        await _send_while_live(bus, event, [event], ask_first=ask_first)
        return
    await held.add(event, ask_first=ask_first)
    if event.data.status is PhaseStatus.IN_PROGRESS:
        await held.flush()


async def _send_while_live(
    bus: Bus, message: PhaseEvent | PhasesEvent, events: list[PhaseEvent], *, ask_first: bool
) -> None:
    """`message` (standing for `events`) on its request's subject, or nothing once the request
    has finished: fenced against the request's done (`done_fence`) when `ask_first`, when the
    message is a redelivery, or when it heard its request live longer ago than a step takes to
    announce itself (it waited behind other work: the chaos run saw a quick generation's events
    land after a done the saga had sent at its deadline meanwhile); and asked before each
    re-send of a publish that has to wait out JetStream (a stream electing a leader). The
    request's `done` may have gone out meanwhile,
    and nothing follows a done: a redelivery's earlier delivery may have finished the request
    (its worker killed after sending the result, before the ack), and a message that found its
    request finished sends nothing more."""
    request_id = message.request_id

    def live() -> Awaitable[bool]:
        return still_live(request_id)

    liveness = LIVENESS.get()
    try:
        if liveness is not None and liveness.found_finished(request_id):
            raise PublishAbandoned(message.type)  # an earlier event of this message found so
        if (
            ask_first
            or current_deliveries() > 1
            or heard_live_before(request_id, bus.phase_start_after_s)
        ):
            await emit_unless_done(bus, message, still_wanted=live)
        else:
            await bus.emit(message, still_wanted=live)
    except PublishAbandoned:
        for event in events:
            _dropped(event)
        # A step that goes on after this one (generation's own critique, say) has asked
        # once at the message's start, when the request was live: it must not send either.
        if liveness is not None:
            liveness.finished(request_id)


def _dropped(event: PhaseEvent) -> None:
    UNKNOWN_REQUESTS.labels(kind="phase_event").inc()
    log.info("phase_event_dropped", reason="request finished", status=event.data.status.value)


class PhaseBatch:
    """The phase events one message holds back, to send together (see the module's doc)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._events: list[PhaseEvent] = []
        self._ask_first = False
        self._held_since = 0.0
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[Any] | None = None

    def waiting(self) -> bool:
        """Whether another publish must wait for this batch: it holds events, or another task
        is sending them (a flush's own publish does not wait for itself)."""
        if self._flusher is not None and self._flusher is asyncio.current_task():
            return False
        return bool(self._events) or self._lock.locked()

    async def add(self, event: PhaseEvent, *, ask_first: bool = False) -> None:
        if self._events and (
            len(self._events) >= MAX_PHASES_PER_MESSAGE
            or event.correlation() != self._events[0].correlation()
        ):
            await self.flush()
        if not self._events:
            self._held_since = time.monotonic()
        self._events.append(event)
        self._ask_first = self._ask_first or ask_first

    async def flush(self) -> None:
        """Send what is held, as one message, after any send under way. A send that fails
        keeps its events, to go out with the next flush (or be sent again on redelivery)."""
        async with self._lock:
            if not self._events:
                return
            events, self._events = self._events, []
            ask_first = self._ask_first or time.monotonic() - self._held_since >= ASK_AFTER_HELD_S
            self._ask_first = False
            message = events[0] if len(events) == 1 else PhasesEvent.of(events)
            self._flusher = asyncio.current_task()
            try:
                await _send_while_live(self.bus, message, events, ask_first=ask_first)
            except BaseException:
                self._events[:0] = events
                self._ask_first = self._ask_first or ask_first
                raise
            finally:
                self._flusher = None

    def drop(self) -> None:
        """Forget what is held (the message's request is not live)."""
        self._events.clear()


@contextmanager
def holding_phase_events(bus: Bus) -> Iterator[PhaseBatch]:
    """While one message is handled, its phase events are held in the batch this yields; the
    caller flushes it when the handler is done (or drops it)."""
    batch = PhaseBatch(bus)
    token = HELD_EVENTS.set(batch)
    try:
        yield batch
    finally:
        HELD_EVENTS.reset(token)


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
