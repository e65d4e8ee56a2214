"""A message's phase events are held and go out together (`phase_events.PhaseBatch`): one
`phases` message for several, the lone `phase` event for one; at once with an `in_progress`;
before any other message of the handler; kept when their publish fails; dropped, with every
later one, once their request has finished. The relay's side: a `phases` message expands into
the phase events it stands for, and `Last-Event-ID` resumes between them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from faststream.nats import NatsBroker

from api.sse import ResumePoint, event_id, resume_after
from contracts.commands import ClassifyCommand
from contracts.enums import Phase, PhaseStatus, RequestStatus
from contracts.events import (
    AnswerData,
    AnswerEvent,
    CallerEvent,
    DoneData,
    DoneEvent,
    ErrorData,
    ErrorEvent,
    PhaseData,
    PhaseEvent,
    PhasesEvent,
    caller_events,
)
from infra.runtime import phase_events as pe
from infra.runtime.bus import Bus
from infra.runtime.step_context import message_context

CMD = ClassifyCommand(request_id="req-batch", query="what is vitamin d?")


class RecordingBus(Bus):
    """Records what it would publish: caller events, and any other message by subject."""

    def __init__(self, fail: int = 0) -> None:
        super().__init__(NatsBroker(), phase_start_after_s=60.0)
        self.sent: list[Any] = []
        self.fail = fail

    async def emit(self, event: CallerEvent, still_wanted: object = None) -> None:
        if self.fail:
            self.fail -= 1
            raise TimeoutError("no ack")
        self.sent.append(event)

    async def publish_raw(self, body: bytes, subject: str, *args: Any, **kwargs: Any) -> None:
        from infra.runtime.bus import send_held_first

        await send_held_first()
        self.sent.append(subject)


def ended(name: Phase, status: PhaseStatus = PhaseStatus.COMPLETED) -> PhaseEvent:
    return PhaseEvent(**CMD.correlation(), data=PhaseData(phase=name, status=status))


def shapes(sent: list[Any]) -> list[Any]:
    """What went out: a lone phase as its phase, a batch as the list of its phases."""
    out: list[Any] = []
    for item in sent:
        if isinstance(item, PhasesEvent):
            out.append([e.data.phase.value for e in item.data.events])
        elif isinstance(item, PhaseEvent):
            out.append(item.data.phase.value)
        else:
            out.append(item)
    return out


async def test_events_are_held_until_the_flush_and_go_out_as_one_message() -> None:
    bus = RecordingBus()
    first, second = ended(Phase.VECTOR_SEARCH), ended(Phase.SPARSE_SEARCH)
    with pe.holding_phase_events(bus) as held:
        await pe.send_while_live(bus, first)
        await pe.send_while_live(bus, second)
        assert bus.sent == []
        await held.flush()
        await pe.send_while_live(bus, ended(Phase.FUSION))
        await held.flush()
    assert shapes(bus.sent) == [["vector_search", "sparse_search"], "fusion"]
    batch = bus.sent[0]
    assert [e.event_id for e in batch.data.events] == [first.event_id, second.event_id]
    assert [e.occurred_at for e in batch.data.events] == [first.occurred_at, second.occurred_at]
    assert batch.request_id == CMD.request_id


async def test_an_announcement_goes_out_at_once_with_what_was_held() -> None:
    bus = RecordingBus()
    with pe.holding_phase_events(bus) as held:
        await pe.send_while_live(bus, ended(Phase.INTENT_CLASSIFICATION))
        await pe.send_while_live(bus, ended(Phase.GENERATION, PhaseStatus.IN_PROGRESS))
        assert shapes(bus.sent) == [["intent_classification", "generation"]]
        await held.flush()
    assert len(bus.sent) == 1


async def test_any_other_message_of_the_handler_waits_for_the_held_events() -> None:
    bus = RecordingBus()
    with pe.holding_phase_events(bus):
        await pe.send_while_live(bus, ended(Phase.VECTOR_SEARCH))
        await pe.send_while_live(bus, ended(Phase.FUSION))
        await bus.publish_raw(b"{}", "rag.res.search.vector", "RAG_RES", None)
    assert shapes(bus.sent) == [["vector_search", "fusion"], "rag.res.search.vector"]


async def test_a_failed_publish_keeps_its_events_for_the_next_flush() -> None:
    bus = RecordingBus(fail=1)
    with pe.holding_phase_events(bus) as held:
        await pe.send_while_live(bus, ended(Phase.VECTOR_SEARCH))
        with pytest.raises(TimeoutError):
            await held.flush()
        await pe.send_while_live(bus, ended(Phase.FUSION))
        await held.flush()
    assert shapes(bus.sent) == [["vector_search", "fusion"]]


async def test_events_of_a_finished_request_are_dropped_with_every_later_one() -> None:
    live = {"answer": True, "asked": 0}

    async def is_live(request_id: str) -> bool:
        live["asked"] += 1
        return bool(live["answer"])

    bus = RecordingBus()
    with message_context(is_live, deliveries=2), pe.holding_phase_events(bus) as held:
        await pe.send_while_live(bus, ended(Phase.VECTOR_SEARCH))
        live["answer"] = False  # the request finished while the step ran
        await held.flush()  # a redelivery asks first
        await pe.send_while_live(bus, ended(Phase.FUSION))
        await held.flush()
    assert bus.sent == [] and live["asked"] == 1


async def test_events_held_long_ask_whether_their_request_is_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    async def is_live(request_id: str) -> bool:
        asked.append(request_id)
        return True

    monkeypatch.setattr(pe, "ASK_AFTER_HELD_S", 0.02)
    bus = RecordingBus()
    with message_context(is_live), pe.holding_phase_events(bus) as held:
        await pe.send_while_live(bus, ended(Phase.VECTOR_SEARCH))
        await held.flush()  # sent at once: its request was live a moment ago
        assert asked == []
        await pe.send_while_live(bus, ended(Phase.FUSION))
        await asyncio.sleep(0.03)
        await held.flush()
    assert asked == [CMD.request_id] and len(bus.sent) == 2


async def test_a_batch_holds_one_request_and_attempt() -> None:
    bus = RecordingBus()
    other = PhaseEvent(
        **{**CMD.correlation(), "attempt": 2},
        data=PhaseData(phase=Phase.VECTOR_SEARCH, status=PhaseStatus.COMPLETED),
    )
    with pe.holding_phase_events(bus) as held:
        await pe.send_while_live(bus, ended(Phase.VECTOR_SEARCH))
        await pe.send_while_live(bus, other)
        await held.flush()
    assert [getattr(e, "attempt", None) for e in bus.sent] == [1, 2]


async def test_without_a_batch_an_event_goes_out_at_once() -> None:
    bus = RecordingBus()
    await pe.send_while_live(bus, ended(Phase.CRITIC))
    assert shapes(bus.sent) == ["critic"]


def test_a_phases_message_expands_into_the_phase_events_it_stands_for() -> None:
    events = [ended(Phase.VECTOR_SEARCH), ended(Phase.SPARSE_SEARCH)]
    body = PhasesEvent.of(events).model_dump(mode="json")
    expanded = caller_events(body)
    for part, (event, alone) in enumerate(zip(expanded, events, strict=True), start=1):
        assert event.pop("part") == part
        assert event == alone.model_dump(mode="json")  # as it would have gone out alone
    lone = ended(Phase.FUSION).model_dump(mode="json")
    assert caller_events(lone) == [lone]


@pytest.mark.parametrize("ending", ["answer", "error"])
def test_a_done_carries_the_event_it_ends_with_and_expands_into_both(ending: str) -> None:
    """The saga's closing pair is one message: callers get the `answer` (or `error`) as it
    would have gone out alone, then the `done` as it always was."""
    last: AnswerEvent | ErrorEvent = (
        AnswerEvent(request_id="r1", attempt=2, data=AnswerData(content="It is [1]."))
        if ending == "answer"
        else ErrorEvent(request_id="r1", attempt=2, data=ErrorData(code="cancelled", message="x"))
    )
    status = RequestStatus.COMPLETED if ending == "answer" else RequestStatus.CANCELLED
    done = DoneEvent.ending_with(last, status)
    expanded = caller_events(json.loads(done.model_dump_json()))
    assert [event.pop("part") for event in expanded] == [1, 2]
    assert expanded[0] == json.loads(last.model_dump_json())
    alone = DoneEvent(**done.correlation(), data=DoneData(status=status))
    assert expanded[1] == {
        **json.loads(alone.model_dump_json()),
        "event_id": done.event_id,
        "occurred_at": expanded[1]["occurred_at"],
    }
    assert "ending" not in expanded[1]["data"]
    assert caller_events(json.loads(alone.model_dump_json())) == [
        json.loads(alone.model_dump_json())
    ]  # a done that carries nothing is itself


def test_an_event_id_names_its_part_and_resumes_there() -> None:
    assert event_id(7, {"type": "done"}) == "7"
    assert event_id(7, {"type": "phase", "part": 2}) == "7.2"
    assert resume_after("7.2") == ResumePoint(7, 2)
    assert resume_after("7") == ResumePoint(7, 0)
    assert resume_after(None) == resume_after("null") == resume_after("") == ResumePoint()
