"""Value objects that appear inside several messages."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contracts.enums import Channel
from contracts.limits import (
    MAX_CHUNK_CHARS,
    MAX_ID_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_PAGE_LABEL_CHARS,
    MAX_SNIPPET_CHARS,
    MAX_SOURCE_CHARS,
    MAX_TITLE_CHARS,
    MAX_TOOL_ARGUMENTS_CHARS,
    MAX_TOOL_OUTPUT_CHARS,
)

MAX_DIM = 4096
MAX_SENTENCES = 512

VECTOR_CLAIM = "claim:"
"""A `PackedVector` that starts so is a claim check (base64 has no colon): the step that
needs the vector reads it from the request's claim store, under the field that follows."""

PackedVector = Annotated[
    str,
    Field(
        max_length=4 * MAX_DIM * 4 // 3 + 4,
        description="a query vector: packed (little-endian float32, base64), or a claim "
        "check, `claim:<field>`: the vector waits in the request's claim store",
    ),
]


PAGE_DOC = "the page (or slide) of the parsed file that holds the passage; none for text"
LABEL_DOC = 'how a person names that page: "p. 3", "slide 2"'
SECTION_DOC = "the heading path that holds the passage"


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
    critic read, and claimed (`infra.runtime.claims`): on the bus it carries openings, and
    in the commands of the steps that resolve it, not even those.
    """

    model_config = ConfigDict(extra="forbid")

    chunk_id: str = Field(max_length=MAX_ID_CHARS)
    document_id: str = Field(max_length=MAX_ID_CHARS)
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    source: str = Field(default="", max_length=MAX_SOURCE_CHARS)
    namespace: str = Field(default="default", max_length=MAX_NAMESPACE_CHARS)
    text: str = Field(default="", max_length=MAX_CHUNK_CHARS)
    page: int | None = Field(default=None, ge=1, description=PAGE_DOC)
    page_label: str = Field(default="", max_length=MAX_PAGE_LABEL_CHARS, description=LABEL_DOC)
    section: str = Field(default="", max_length=MAX_TITLE_CHARS, description=SECTION_DOC)
    vectors: ChunkVectors | None = None
    score: float = 0.0
    rank: int = Field(default=0, ge=0)
    channels: dict[str, int] = Field(
        default_factory=dict,
        max_length=16,
        description="channel name -> 1-based rank in that channel",
    )
    completion: bool = Field(
        default=False,
        description="in a channel's list, after its own ranking: the channel's score for a chunk "
        "another channel found and it did not rank (`RAGBUS_SCORE_COMPLETION`); only score "
        "fusion reads it",
    )
    feedback: bool = Field(
        default=False,
        description="in a channel's list, after its own ranking: found by the channel's second "
        "search, with the query its first hits expanded (`RAGBUS_SEARCH_FEEDBACK`); score fusion "
        "reads these in place of the channel's own ranking, which stays what the channel reports",
    )
    claimed: bool = Field(
        default=False,
        description="the whole passage (text and vectors) waits in the request's claim store; "
        "`text` here is its opening (in a fusion result), or empty (in a command to a step "
        "that resolves the claim)",
    )


def listed(chunks: Sequence[RetrievedChunk]) -> list[RetrievedChunk]:
    """A channel's own ranking, without its completions (`RetrievedChunk.completion`) and its
    feedback search's list (`RetrievedChunk.feedback`)."""
    return [chunk for chunk in chunks if not (chunk.completion or chunk.feedback)]


def scored(chunks: Sequence[RetrievedChunk]) -> list[RetrievedChunk]:
    """What score fusion reads of a channel's list: its feedback search's list and
    completions where it has one (`RetrievedChunk.feedback`), else the whole list."""
    fed = [chunk for chunk in chunks if chunk.feedback]
    return fed if fed else list(chunks)


class Citation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunk_id: str = Field(max_length=MAX_ID_CHARS)
    document_id: str = Field(max_length=MAX_ID_CHARS)
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    source: str = Field(default="", max_length=MAX_SOURCE_CHARS)
    page: int | None = Field(default=None, ge=1, description=PAGE_DOC)
    page_label: str = Field(default="", max_length=MAX_PAGE_LABEL_CHARS, description=LABEL_DOC)
    section: str = Field(default="", max_length=MAX_TITLE_CHARS, description=SECTION_DOC)
    namespace: str = Field(
        default="",
        max_length=MAX_NAMESPACE_CHARS,
        description="the namespace that holds the document, as the caller names it: set where "
        "the passage has a page, so its original file can be fetched "
        "(`GET /v1/documents/{document_id}?namespace=…`)",
    )
    score: float = 0.0
    snippet: str = Field(
        default="",
        max_length=MAX_SNIPPET_CHARS,
        description="The start of the cited passage, as the stores keep it.",
    )
    channels: dict[str, int] = Field(
        default_factory=dict,
        max_length=16,
        description="channel name -> 1-based rank at which that channel found the passage",
    )
    kind: Literal["document", "memory"] = Field(
        default="document",
        description="`memory`: something the conversation's scope remembered (an earlier "
        "answer, a fact the user stated), not a document",
    )


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _bounded(cls, arguments: dict[str, Any]) -> dict[str, Any]:
        return _bounded_arguments(arguments)


class ToolOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(max_length=MAX_ID_CHARS)
    name: str = Field(max_length=64)
    ok: bool
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="the call's arguments, echoed so a generator can replay the tool turn",
    )
    output: str = Field(default="", max_length=MAX_TOOL_OUTPUT_CHARS)
    error: str | None = Field(default=None, max_length=MAX_MESSAGE_CHARS)
    duration_ms: float = 0.0

    @field_validator("arguments")
    @classmethod
    def _bounded(cls, arguments: dict[str, Any]) -> dict[str, Any]:
        return _bounded_arguments(arguments)


def _bounded_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(arguments, default=str)) > MAX_TOOL_ARGUMENTS_CHARS:
        raise ValueError(f"tool arguments over {MAX_TOOL_ARGUMENTS_CHARS} characters of JSON")
    return arguments


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(max_length=128)
    message: str = Field(max_length=MAX_MESSAGE_CHARS)
    retryable: bool = False


class ChannelReport(BaseModel):
    """What the orchestrator knows about one channel's part in one attempt."""

    model_config = ConfigDict(extra="forbid")

    channel: Channel
    status: str = Field(max_length=32, description="completed | failed | skipped | timed_out")
    count: int = 0
    duration_ms: float | None = None
    reason: str | None = Field(default=None, max_length=MAX_MESSAGE_CHARS)


CONTEXTS_CLAIM = "contexts:"
"""The claim field of a fused list as the steps that resolve it read it (`contexts_claim`)."""


def contexts_claim(chunk_ids: Iterable[str]) -> str:
    """The claim field of a fused list, named by its chunk ids in their order: a list that
    changed since fusion claimed it names another field, and its command carries it whole."""
    digest = hashlib.blake2b("\n".join(chunk_ids).encode(), digest_size=12).hexdigest()
    return CONTEXTS_CLAIM + digest


def to_resolve(chunks: Iterable[RetrievedChunk]) -> list[RetrievedChunk]:
    """Passages for a step that resolves their claims first (generate, critic, plan): a
    claimed chunk goes without its opening, which that step replaces with the whole passage
    anyway, and without its channels' ranks, which only the answer's citations show."""
    return [c.model_copy(update={"text": "", "channels": {}}) if c.claimed else c for c in chunks]
