"""Value objects that appear inside several messages."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contracts.enums import Channel


class RetrievedChunk(BaseModel):
    """A chunk as a search channel or the fusion step ranks it."""

    model_config = ConfigDict(extra="forbid")

    chunk_id: str
    document_id: str
    title: str = ""
    source: str = ""
    namespace: str = "default"
    text: str
    score: float = 0.0
    rank: int = Field(default=0, ge=0)
    channels: dict[str, int] = Field(
        default_factory=dict, description="channel name -> 1-based rank in that channel"
    )


class Citation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunk_id: str
    document_id: str
    title: str = ""
    source: str = ""
    score: float = 0.0


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call_id: str
    name: str
    ok: bool
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="the call's arguments, echoed so a generator can replay the tool turn",
    )
    output: str = ""
    error: str | None = None
    duration_ms: float = 0.0


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    retryable: bool = False


class ChannelReport(BaseModel):
    """What the orchestrator knows about one channel's part in one attempt."""

    model_config = ConfigDict(extra="forbid")

    channel: Channel
    status: str = Field(description="completed | failed | skipped | timed_out")
    count: int = 0
    duration_ms: float | None = None
    reason: str | None = None
