"""Commands the orchestrator sends to workers on `rag.cmd.*`.

Every command names the attempt it belongs to; a worker echoes `command_id` and
`attempt` in its result so the orchestrator can tell a late answer from a current one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contracts.enums import Channel, Intent
from contracts.envelope import Envelope
from contracts.models import PackedVector, RetrievedChunk, ToolCall, ToolOutcome
from contracts.queries import MAX_QUERY_CHARS


class ClassifyCommand(Envelope):
    type: Literal["cmd.classify"] = "cmd.classify"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    intent_override: Intent | None = None


class SearchCommand(Envelope):
    type: Literal["cmd.search"] = "cmd.search"
    channel: Channel
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    namespaces: list[str] = Field(min_length=1)
    top_k: int = Field(ge=1, le=200)
    query_vector: PackedVector | None = Field(
        default=None, description="the query's embedding from classify, reused by dense search"
    )


class FuseCommand(Envelope):
    type: Literal["cmd.fuse"] = "cmd.fuse"
    query: str
    weights: dict[Channel, float]
    results: dict[Channel, list[RetrievedChunk]] = Field(
        description="the channels' rankings for the attempt's (first) query"
    )
    top_k: int = Field(ge=1, le=200)
    rrf_k: int = Field(default=60, ge=1)
    sub_results: list[dict[Channel, list[RetrievedChunk]]] = Field(
        default_factory=list,
        description="the channels' rankings for each further query of a decomposed attempt",
    )
    carried: list[RetrievedChunk] = Field(
        default_factory=list,
        description="the previous attempt's fused list, which a follow-up search adds to",
    )
    hydrate: bool = Field(
        default=True,
        description="fetch the fused chunks' text and stored vectors (off when only the "
        "rankings are wanted)",
    )


class GenerateCommand(Envelope):
    type: Literal["cmd.generate"] = "cmd.generate"
    query: str
    intent: Intent
    contexts: list[RetrievedChunk]
    tool_results: list[ToolOutcome] = Field(default_factory=list)
    tool_rounds_left: int = Field(default=0, ge=0)
    follow_ups: list[str] = Field(
        default_factory=list,
        description="a decomposed attempt's follow-up queries: what else the answer should say",
    )
    query_vectors: dict[str, PackedVector] = Field(
        default_factory=dict,
        description="embeddings of the query and the follow-ups, by text, as the request made "
        "them: generation compares them with the contexts' stored sentence vectors",
        max_length=16,
    )


class CriticCommand(Envelope):
    type: Literal["cmd.critic"] = "cmd.critic"
    query: str
    intent: Intent
    answer: str
    citations: dict[int, str] = Field(description="citation number -> chunk_id")
    contexts: list[RetrievedChunk]
    tool_results: list[ToolOutcome] = Field(default_factory=list)
    attempts_left: int = Field(ge=0)
    query_vector: PackedVector | None = Field(
        default=None, description="the query's embedding: the critic encodes no query itself"
    )


class ToolCommand(Envelope):
    type: Literal["cmd.tool"] = "cmd.tool"
    query: str
    calls: list[ToolCall] = Field(
        default_factory=list,
        description="explicit calls from generation; empty means plan from the query",
    )
