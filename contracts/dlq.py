"""What lands on `rag.dlq.<original subject>`: the message as received, and why."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.envelope import new_event_id, utcnow


class DeadLetter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["dead_letter"] = "dead_letter"
    event_id: str = Field(default_factory=new_event_id)
    original_subject: str
    reason: str = Field(description="poison | exhausted | failed")
    error: str
    deliveries: int = 0
    request_id: str | None = None
    payload: str = Field(description="the original body, decoded as UTF-8 with replacement")
    headers: dict[str, str] = Field(default_factory=dict)
    occurred_at: datetime = Field(default_factory=utcnow)
