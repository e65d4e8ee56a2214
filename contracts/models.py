"""Value objects that appear inside several messages."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from contracts.enums import Channel

MAX_DIM = 4096
MAX_SENTENCES = 512

PackedVector = Annotated[
    str,
    Field(
        max_length=4 * MAX_DIM * 4 // 3 + 4,
        description="a vector packed for the wire: little-endian float32, base64",
    ),
]


class ChunkVectors(BaseModel):
    """A chunk's vectors as ingestion made and stored them, packed for the wire.

    `dense` is the chunk's own embedding (what dense retrieval compares); `sentences` holds one
    embedding per span of `spans`, the character offsets of the chunk's sentences in its
    `text`, as ingestion split it. Both are little-endian float16 rows of `dim` columns, base64:
    a generator or critic compares against them without running an encoder.
    """

    model_config = ConfigDict(extra="forbid")

    dim: int = Field(ge=1, le=MAX_DIM)
    dense: str = Field(max_length=2 * MAX_DIM * 4 // 3 + 4)
    spans: list[tuple[int, int]] = Field(default_factory=list, max_length=MAX_SENTENCES)
    sentences: str = Field(default="", max_length=2 * MAX_DIM * MAX_SENTENCES * 4 // 3 + 4)


class RetrievedChunk(BaseModel):
    """A chunk as a search channel or the fusion step ranks it.

    Channels return references (no `text`): fusion only needs ids and ranks. The fused list is
    hydrated from the store with the text and the stored `vectors` that generation and the
    critic read.
    """

    model_config = ConfigDict(extra="forbid")

    chunk_id: str
    document_id: str
    title: str = ""
    source: str = ""
    namespace: str = "default"
    text: str = ""
    vectors: ChunkVectors | None = None
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
