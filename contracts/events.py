"""Events for callers on `rag.events.<request_id>`; the SSE stream relays them as they are."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from contracts.enums import Phase, PhaseStatus, RequestStatus
from contracts.envelope import Envelope
from contracts.limits import MAX_ANSWER_CHARS, MAX_CITATIONS, MAX_MESSAGE_CHARS
from contracts.models import Citation


class PhaseData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phase: Phase
    status: PhaseStatus
    started_at: datetime | None = None
    ended_at: datetime | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="set only where the phase did not end when its event was sent: a "
        "finished phase's event goes out as it ends, so its `occurred_at` is the end",
    )
    duration_ms: float | None = Field(default=None, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)


MAX_TOKEN_CHARS = 2000
"""Text one `token` event carries at most (generation coalesces its text into few events)."""


class TokenData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=MAX_TOKEN_CHARS)
    index: int = Field(ge=0)


class AnswerData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(max_length=2 * MAX_ANSWER_CHARS)
    citations: dict[int, Citation] = Field(default_factory=dict, max_length=MAX_CITATIONS)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ErrorData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(max_length=128)
    message: str = Field(max_length=2 * MAX_MESSAGE_CHARS)
    phase: Phase | None = None


class AnswerEntry(BaseModel):
    """A request's `answer` event, carried in its `done` message (`DoneData.ending`)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["answer"] = "answer"
    event_id: str = Field(min_length=1, max_length=128)
    occurred_at: datetime
    data: AnswerData


class ErrorEntry(BaseModel):
    """A request's `error` event, carried in its `done` message (`DoneData.ending`)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["error"] = "error"
    event_id: str = Field(min_length=1, max_length=128)
    occurred_at: datetime
    data: ErrorData


Ending = Annotated[AnswerEntry | ErrorEntry, Field(discriminator="type")]


class DoneData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: RequestStatus
    ending: Ending | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the event the request ends with, its answer or its error, carried in "
        "the same message: callers receive it as its own event just before the `done`",
    )


class PhaseEvent(Envelope):
    type: Literal["phase"] = "phase"
    data: PhaseData


class PhaseEntry(BaseModel):
    """One phase event inside a `phases` message: what it does not share with the others."""

    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(min_length=1, max_length=128)
    occurred_at: datetime
    data: PhaseData


MAX_PHASES_PER_MESSAGE = 64


class PhasesData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[PhaseEntry] = Field(min_length=2, max_length=MAX_PHASES_PER_MESSAGE)


class PhasesEvent(Envelope):
    """Several phase events of one step's message in one bus message, in the order they
    happened: the phases of a step that end within moments of each other (a search's
    classification, its channels and their fusion) cost one publish, one ack and one store
    instead of one each. They share the envelope's request, tenant, attempt and trace.

    Callers never see this type: the SSE stream relays each entry as the `phase` event it
    stands for (`caller_events`), with the id `<stream sequence>.<part>`. A direct NATS
    subscriber of `rag.events.<tenant>.<request_id>` expands it the same way."""

    type: Literal["phases"] = "phases"
    data: PhasesData

    @classmethod
    def of(cls, events: list[PhaseEvent]) -> PhasesEvent:
        """`events` (two or more, of one request and attempt) as one message."""
        first = events[0]
        return cls(
            **first.correlation(),
            data=PhasesData(
                events=[
                    PhaseEntry(event_id=e.event_id, occurred_at=e.occurred_at, data=e.data)
                    for e in events
                ]
            ),
        )


def caller_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The caller events a stored message stands for, as JSON objects, each with `part` (from
    1) for its place when the message stands for several: a `phases` message's entries, each
    the body its own `phase` event would have had; a `done` that carries its request's ending
    (`DoneData.ending`), that `answer` or `error` event and then the `done` without it; any
    other message as it is. Works on the JSON, as a relay reads it."""
    kind = body.get("type")
    if kind == "done":
        return _ended(body)
    if kind != "phases":
        return [body]
    shared = {k: v for k, v in body.items() if k not in ("event_id", "occurred_at", "data")}
    shared["type"] = "phase"
    entries = (body.get("data") or {}).get("events") or []
    return [
        {
            "event_id": entry.get("event_id"),
            **shared,
            "occurred_at": entry.get("occurred_at"),
            "data": entry.get("data"),
            "part": part,
        }
        for part, entry in enumerate(entries, start=1)
        if isinstance(entry, dict)
    ]


def _ended(body: dict[str, Any]) -> list[dict[str, Any]]:
    data = body.get("data") or {}
    ending = data.get("ending") if isinstance(data, dict) else None
    if not isinstance(ending, dict):
        return [body]
    own = {"type", "event_id", "occurred_at", "data"}
    first = {k: ending.get(k) if k in own else v for k, v in body.items()}
    done = {**body, "data": {k: v for k, v in data.items() if k != "ending"}}
    return [{**first, "part": 1}, {**done, "part": 2}]


class TokenEvent(Envelope):
    type: Literal["token"] = "token"
    data: TokenData


class AnswerEvent(Envelope):
    type: Literal["answer"] = "answer"
    data: AnswerData


class ErrorEvent(Envelope):
    type: Literal["error"] = "error"
    data: ErrorData


class DoneEvent(Envelope):
    """A request's last event. It carries the event the request ends with (its answer or its
    error, `DoneData.ending`), so the two cost one publish, one ack and one store; callers
    receive them as two events (`caller_events`), with the ids `<seq>.1` and `<seq>.2`."""

    type: Literal["done"] = "done"
    data: DoneData

    @classmethod
    def ending_with(cls, last: AnswerEvent | ErrorEvent, status: RequestStatus) -> DoneEvent:
        entry: AnswerEntry | ErrorEntry
        if isinstance(last, AnswerEvent):
            entry = AnswerEntry(
                event_id=last.event_id, occurred_at=last.occurred_at, data=last.data
            )
        else:
            entry = ErrorEntry(event_id=last.event_id, occurred_at=last.occurred_at, data=last.data)
        return cls(**last.correlation(), data=DoneData(status=status, ending=entry))

    def split(self) -> list[AnswerEvent | ErrorEvent | DoneEvent]:
        """The events callers receive for this message, as models (`caller_events` on JSON):
        the ending it carries, then the done without it."""
        ending = self.data.ending
        if ending is None:
            return [self]
        shared = {
            **self.correlation(),
            "event_id": ending.event_id,
            "occurred_at": ending.occurred_at,
        }
        last: AnswerEvent | ErrorEvent = (
            AnswerEvent(**shared, data=ending.data)
            if isinstance(ending, AnswerEntry)
            else ErrorEvent(**shared, data=ending.data)
        )
        return [last, self.model_copy(update={"data": DoneData(status=self.data.status)})]


CallerEvent = Annotated[
    PhaseEvent | PhasesEvent | TokenEvent | AnswerEvent | ErrorEvent | DoneEvent,
    Field(discriminator="type"),
]
caller_event_adapter: TypeAdapter[CallerEvent] = TypeAdapter(CallerEvent)
