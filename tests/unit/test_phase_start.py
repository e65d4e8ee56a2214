"""A step's `in_progress` event is sent only once the step has run `phase_start_after_s`: a
fast step sends one event, its `completed` (which carries its start); a slow one sends both,
the start first. A slow step asks again, before each event it sends, whether its request is
still live: nothing follows a request's done."""

from __future__ import annotations

import asyncio

import pytest
from faststream.nats import NatsBroker

from contracts.commands import ClassifyCommand
from contracts.enums import Phase, PhaseStatus
from contracts.events import CallerEvent, PhaseData, PhaseEvent
from infra.runtime import phase_events
from infra.runtime.bus import Bus
from infra.runtime.done_fence import DoneFence, SubjectTail
from infra.runtime.phase_events import phase
from infra.runtime.step_context import RequestNotLive, message_context, require_live


class RecordingBus(Bus):
    def __init__(self, after_s: float, emit_delay_s: float = 0.0) -> None:
        super().__init__(NatsBroker(), phase_start_after_s=after_s)
        self.sent: list[PhaseEvent] = []
        self.emit_delay_s = emit_delay_s

    async def emit(self, event: CallerEvent, still_wanted: object = None) -> None:
        await asyncio.sleep(self.emit_delay_s)
        assert isinstance(event, PhaseEvent)
        self.sent.append(event)

    def statuses(self) -> list[str]:
        return [event.data.status.value for event in self.sent]


CMD = ClassifyCommand(request_id="req-phase", query="what is vitamin d?")


async def run_step(bus: Bus, seconds: float) -> None:
    async with phase(bus, CMD, Phase.INTENT_CLASSIFICATION):
        await asyncio.sleep(seconds)


async def test_with_no_delay_every_step_announces_its_start() -> None:
    bus = RecordingBus(after_s=0.0)
    await run_step(bus, 0.0)
    assert bus.statuses() == ["in_progress", "completed"]


async def test_a_fast_step_sends_only_its_end_which_carries_its_start() -> None:
    bus = RecordingBus(after_s=0.5)
    await run_step(bus, 0.01)
    assert bus.statuses() == ["completed"]
    (done,) = bus.sent
    # sent as it ends: the event's own time is the end, so the phase carries no second stamp
    assert done.data.started_at is not None and done.data.ended_at is None
    assert done.data.duration_ms is not None and done.data.duration_ms >= 10
    assert (done.occurred_at - done.data.started_at).total_seconds() * 1000 >= 10


async def test_a_slow_step_announces_its_start_before_its_end() -> None:
    # The start's publish is slow too: the end still waits for it, so the order holds.
    bus = RecordingBus(after_s=0.02, emit_delay_s=0.05)
    await run_step(bus, 0.03)
    assert bus.statuses() == ["in_progress", "completed"]
    start, end = bus.sent
    assert start.data.started_at == end.data.started_at


async def test_a_step_that_fails_fast_sends_only_its_failure() -> None:
    bus = RecordingBus(after_s=0.5)
    with pytest.raises(RuntimeError):
        async with phase(bus, CMD, Phase.INTENT_CLASSIFICATION):
            raise RuntimeError("the model is gone")
    assert bus.statuses() == ["failed"]
    assert "the model is gone" in str(bus.sent[0].data.metadata["error"])


class Request:
    """A request's liveness as the orchestrator's deadline set would answer it."""

    def __init__(self) -> None:
        self.live = True
        self.asked = 0

    async def is_live(self, request_id: str) -> bool:
        self.asked += 1
        return self.live


async def run_step_while(
    request: Request, bus: Bus, seconds: float, *, finish: bool, deliveries: int = 1
) -> None:
    """Run a step under a message's liveness; the request finishes midway when `finish`."""
    with message_context(request.is_live, deliveries):
        async with phase(bus, CMD, Phase.CRITIC):
            await asyncio.sleep(seconds / 2)
            request.live = not finish
            await asyncio.sleep(seconds / 2)


async def test_a_slow_step_of_a_request_that_finished_meanwhile_sends_nothing_more() -> None:
    # The request timed out (its done is on the subject) 50 ms into the step, before the
    # step's start was due at 60 ms: nothing may follow the done.
    request, bus = Request(), RecordingBus(after_s=0.06)
    await run_step_while(request, bus, 0.1, finish=True)
    assert bus.statuses() == []
    # at the start and before the timer's start event; the end knows it without a third read
    assert request.asked == 2


async def test_a_slow_step_of_a_live_request_asks_again_and_sends_both() -> None:
    request, bus = Request(), RecordingBus(after_s=0.02)
    await run_step_while(request, bus, 0.1, finish=False)
    assert bus.statuses() == ["in_progress", "completed"]


async def test_a_fast_step_asks_only_once() -> None:
    # A quick step's request was live a moment ago: its end goes out without another read.
    request, bus = Request(), RecordingBus(after_s=0.5)
    await run_step_while(request, bus, 0.01, finish=True)
    assert bus.statuses() == ["completed"]
    assert request.asked == 1


async def test_a_redelivered_step_asks_again_however_fast() -> None:
    # The delivery before it finished the request (its worker died after sending the result,
    # before the ack): a quick step of the redelivery must not send after the done. Seen once
    # in make soak's chaos run (a critic phase event after its request's done).
    request, bus = Request(), RecordingBus(after_s=0.5)
    await run_step_while(request, bus, 0.01, finish=True, deliveries=2)
    assert bus.statuses() == []
    assert request.asked == 2


async def test_once_an_event_is_dropped_the_message_starts_no_further_phase() -> None:
    # Seen on a cluster: generation's event waited out an election until its request had
    # finished and was dropped; the same message then ran its own critique, whose start asked
    # the message's first answer (live) and whose quick end went out after the done.
    request = Request()
    with message_context(request.is_live):
        await require_live(CMD.request_id)  # the message's start: live
        request.live = False
        ended = PhaseEvent(
            **CMD.correlation(),
            data=PhaseData(phase=Phase.GENERATION, status=PhaseStatus.COMPLETED),
        )
        bus = RecordingBus(after_s=0.5)
        await phase_events.send_while_live(bus, ended, ask_first=True)
        with pytest.raises(RequestNotLive):
            async with phase(bus, CMD, Phase.CRITIC):
                pass
        assert bus.statuses() == []


async def test_once_an_event_is_dropped_the_message_sends_no_other_event() -> None:
    # Seen on a cluster: a redelivered search command's classification ended after its
    # request's done and was dropped; the skipped channels' events that follow it in the same
    # message, sent without asking, went out after the done.
    request = Request()
    with message_context(request.is_live):
        await require_live(CMD.request_id)
        request.live = False
        bus = RecordingBus(after_s=0.5)

        def event(name: Phase, status: PhaseStatus) -> PhaseEvent:
            return PhaseEvent(**CMD.correlation(), data=PhaseData(phase=name, status=status))

        ended = event(Phase.INTENT_CLASSIFICATION, PhaseStatus.COMPLETED)
        await phase_events.send_while_live(bus, ended, ask_first=True)
        asked = request.asked
        skipped = event(Phase.GRAPH_GLOBAL_SEARCH, PhaseStatus.SKIPPED)
        await phase_events.send_while_live(bus, skipped)
        assert bus.statuses() == [] and request.asked == asked  # known: no second read


class DoneOnTheSubject(DoneFence):
    """The request's subject ends with its done, whatever Redis said a moment before."""

    def __init__(self) -> None:
        self.read: list[str] = []

    async def tail(self, stream: str, subject: str) -> SubjectTail:
        self.read.append(subject)
        return SubjectTail(41, done=True)


async def test_an_event_that_asks_is_decided_by_the_fence_not_by_redis() -> None:
    # Redis said live (the saga had not yet committed), then the done landed before the
    # publish: the check-then-publish race. With a fence the subject's tail decides.
    request, bus = Request(), RecordingBus(after_s=0.5)
    bus.fence = fence = DoneOnTheSubject()
    await run_step_while(request, bus, 0.01, finish=False, deliveries=2)
    assert bus.statuses() == []
    assert fence.read == [f"rag.events.default.{CMD.request_id}"]


async def test_a_quick_step_of_a_message_that_waited_asks_again() -> None:
    # The make soak chaos run (2026-11-30): a generate command asked at its start (live), then
    # waited in its busy process past the saga's deadline, which answered from the passages
    # and sent the done; its quick generation's events, sent without asking, landed after it.
    request, bus = Request(), RecordingBus(after_s=0.05)
    with message_context(request.is_live):
        await require_live(CMD.request_id)  # the message's start: live
        await asyncio.sleep(0.08)  # waiting, not in a phase
        request.live = False  # the saga's deadline ended the request
        async with phase(bus, CMD, Phase.GENERATION):
            pass  # quick
    assert bus.statuses() == []
    assert request.asked == 2


async def test_a_quick_step_soon_after_its_message_asked_does_not_ask_again() -> None:
    request, bus = Request(), RecordingBus(after_s=0.5)
    with message_context(request.is_live):
        await require_live(CMD.request_id)
        async with phase(bus, CMD, Phase.GENERATION):
            pass
    assert bus.statuses() == ["completed"]
    assert request.asked == 1


async def test_an_event_sent_outside_a_phase_by_a_message_that_waited_asks_again() -> None:
    # A channel's `skipped` event goes out by `send_while_live`, not at a phase's end: the
    # same rule holds for it.
    request, bus = Request(), RecordingBus(after_s=0.05)
    with message_context(request.is_live):
        await require_live(CMD.request_id)
        await asyncio.sleep(0.08)
        request.live = False
        skipped = PhaseEvent(
            **CMD.correlation(),
            data=PhaseData(phase=Phase.GRAPH_GLOBAL_SEARCH, status=PhaseStatus.SKIPPED),
        )
        await phase_events.send_while_live(bus, skipped)
    assert bus.statuses() == []
    assert request.asked == 2
