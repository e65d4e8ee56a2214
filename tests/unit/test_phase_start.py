"""A step's `in_progress` event is sent only once the step has run `phase_start_after_s`: a
fast step sends one event, its `completed` (which carries its start); a slow one sends both,
the start first."""

from __future__ import annotations

import asyncio

import pytest
from faststream.nats import NatsBroker

from contracts.commands import ClassifyCommand
from contracts.enums import Phase
from contracts.events import CallerEvent, PhaseEvent
from infra.runtime.bus import Bus
from infra.runtime.worker_runtime import phase


class RecordingBus(Bus):
    def __init__(self, after_s: float, emit_delay_s: float = 0.0) -> None:
        super().__init__(NatsBroker(), phase_start_after_s=after_s)
        self.sent: list[PhaseEvent] = []
        self.emit_delay_s = emit_delay_s

    async def emit(self, event: CallerEvent) -> None:
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
    assert done.data.started_at is not None and done.data.ended_at is not None
    assert done.data.duration_ms is not None and done.data.duration_ms >= 10


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
