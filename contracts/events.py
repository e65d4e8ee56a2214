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


class DoneData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: RequestStatus


class PhaseEvent(Envelope):
    type: Literal["phase"] = "phase"
    data: PhaseData


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
    type: Literal["done"] = "done"
    data: DoneData


CallerEvent = Annotated[
    PhaseEvent | TokenEvent | AnswerEvent | ErrorEvent | DoneEvent, Field(discriminator="type")
]
caller_event_adapter: TypeAdapter[CallerEvent] = TypeAdapter(CallerEvent)
