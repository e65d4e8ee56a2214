"""Results workers send back on `rag.res.*`.

`StepFailure` is what the dead-letter path publishes when a step cannot be done at
all, so the orchestrator never waits for a deadline it could have known about.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from contracts.enums import Channel, Intent, StepStatus
from contracts.envelope import Envelope
from contracts.limits import (
    MAX_ANSWER_CHARS,
    MAX_CHUNKS,
    MAX_CITATIONS,
    MAX_ID_CHARS,
    MAX_LIST_ITEMS,
    MAX_MESSAGE_CHARS,
    MAX_SNIPPET_CHARS,
    MAX_SUB_QUERIES,
    MAX_TOOL_CALLS,
)
from contracts.models import ErrorInfo, PackedVector, RetrievedChunk, ToolCall, ToolOutcome
from contracts.queries import MAX_QUERY_CHARS


class StepResult(Envelope):
    """Fields every result shares; concrete results below fix `type`."""

    type: str
    command_id: str = Field(max_length=MAX_ID_CHARS)
    step: str = Field(max_length=32)
    channel: Channel | None = None
    status: StepStatus = StepStatus.OK
    error: ErrorInfo | None = None
    duration_ms: float = Field(default=0.0, ge=0)


class Classified(BaseModel):
    """A question's intent, how sure, by which method, and the channels' weights it gives."""

    model_config = ConfigDict(extra="forbid")

    intent: Intent
    confidence: float = Field(ge=0.0, le=1.0)
    method: str = Field(max_length=64)
    weights: dict[Channel, float]


class ClassifyResult(StepResult, Classified):
    model_config = ConfigDict(extra="forbid")

    type: Literal["res.classify"] = "res.classify"
    step: Literal["classify"] = "classify"
    query_vector: PackedVector | None = None
    standalone_query: str | None = Field(
        default=None,
        max_length=MAX_QUERY_CHARS,
        description="a follow-up made standalone from its session (unset: asked as it is)",
    )
    rewrite_method: str | None = Field(default=None, max_length=16)


CHANNEL_TIMED_OUT = "channel_timed_out"
"""`ErrorInfo.code` of a channel its search worker dropped at the command's deadline
(`SearchCommand.deadline_at`): reported `timed_out`, as a channel the saga's deadline drops."""


class ChannelOutcome(BaseModel):
    """One further channel's answer to a command that searched several (`SearchCommand.also`):
    its ranking (inline or claimed, as for the result's own channel), or why it failed."""

    model_config = ConfigDict(extra="forbid")

    channel: Channel
    status: StepStatus = StepStatus.OK
    error: ErrorInfo | None = None
    chunks: list[RetrievedChunk] = Field(default_factory=list, max_length=MAX_CHUNKS)
    ranking_claim: str | None = Field(default=None, max_length=128)
    count: int = Field(default=0, ge=0)
    duration_ms: float = Field(default=0.0, ge=0)


class SearchResult(StepResult):
    model_config = ConfigDict(extra="forbid")

    type: Literal["res.search"] = "res.search"
    step: Literal["search"] = "search"
    chunks: list[RetrievedChunk] = Field(default_factory=list, max_length=MAX_CHUNKS)
    query_vector: PackedVector | None = Field(
        default=None,
        description="the embedding a dense channel made for a query classify did not encode "
        "(a follow-up), so later steps need not encode it again",
    )
    ranking_claim: str | None = Field(
        default=None,
        max_length=128,
        description="the claim store's field that holds the ranking (`chunks` is empty then)",
    )
    count: int = Field(default=0, ge=0, description="the ranking's length")
    also: list[ChannelOutcome] = Field(
        default_factory=list,
        max_length=len(Channel) - 1,
        description="the command's further channels (`SearchCommand.also`), one each",
    )
    fused: Fused | None = Field(
        default=None,
        description="the channels' rankings fused, when the command asked (`SearchCommand."
        "fuse`) and fusion succeeded; unset, the rankings are as without it, for the fuse step",
    )
    classified: Classified | None = Field(
        default=None,
        description="the question's classification, when the command asked for it first "
        "(`SearchCommand.classify`); channels its weights skip are not answered for",
    )


class Fused(BaseModel):
    """The fused list of an attempt: what `FuseResult` reports, and what a search worker
    that fused its own channels reports with them (`SearchResult.fused`)."""

    model_config = ConfigDict(extra="forbid")

    chunks: list[RetrievedChunk] = Field(default_factory=list, max_length=MAX_CHUNKS)
    effective_weights: dict[Channel, float] = Field(default_factory=dict)
    channel_counts: dict[Channel, int] = Field(default_factory=dict)
    contexts_claim: str | None = Field(
        default=None,
        max_length=MAX_ID_CHARS,
        description="where the list waits in the request's claim store as the steps that "
        "resolve it read it: their commands carry this instead of the list",
    )


class FuseResult(StepResult, Fused):
    model_config = ConfigDict(extra="forbid")

    type: Literal["res.fuse"] = "res.fuse"
    step: Literal["fuse"] = "fuse"


class GenerateResult(StepResult):
    model_config = ConfigDict(extra="forbid")

    type: Literal["res.generate"] = "res.generate"
    step: Literal["generate"] = "generate"
    answer: str = Field(default="", max_length=MAX_ANSWER_CHARS)
    citations: dict[int, Annotated[str, Field(max_length=MAX_ID_CHARS)]] = Field(
        default_factory=dict, max_length=MAX_CITATIONS, description="n -> chunk_id"
    )
    tool_calls: list[ToolCall] = Field(default_factory=list, max_length=MAX_TOOL_CALLS)
    generator: str = Field(default="extractive", max_length=64)
    openings: dict[
        Annotated[str, Field(max_length=MAX_ID_CHARS)],
        Annotated[str, Field(max_length=MAX_SNIPPET_CHARS)],
    ] = Field(
        default_factory=dict,
        max_length=MAX_CITATIONS,
        description="chunk_id -> opening, for each cited passage the fused list carried "
        "without one (past its first `FUSED_OPENINGS`): the citation's snippet",
    )
    critique: Critique | None = Field(
        default=None,
        description="the critic's verdict on this answer, when the command asked the worker "
        "to critique it (`GenerateCommand.critique_attempts_left`) and it could in time",
    )


class Critique(BaseModel):
    """The critic's verdict on an answer: what `CriticResult` reports, and what a generating
    worker that critiqued its own answer reports with it (`GenerateResult.critique`)."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["accept", "retry", "low_confidence"] = Field(
        description="low_confidence: the attempts are spent and the answer is weak"
    )
    confidence: float = Field(ge=0.0, le=1.0)
    scores: dict[str, float] = Field(default_factory=dict, max_length=MAX_LIST_ITEMS)
    strategy: Literal["broaden", "rebalance", "rewrite", "decompose"] | None = None
    rewritten_query: str | None = Field(default=None, max_length=MAX_QUERY_CHARS)
    sub_queries: list[Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]] = Field(
        default_factory=list, description="a decomposition's follow-up queries", max_length=8
    )
    reasons: list[Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]] = Field(
        default_factory=list, max_length=MAX_LIST_ITEMS
    )


class CriticResult(StepResult, Critique):
    model_config = ConfigDict(extra="forbid")

    type: Literal["res.critic"] = "res.critic"
    step: Literal["critic"] = "critic"


class ToolResult(StepResult):
    model_config = ConfigDict(extra="forbid")

    type: Literal["res.tool"] = "res.tool"
    step: Literal["tool"] = "tool"
    outcomes: list[ToolOutcome] = Field(default_factory=list, max_length=MAX_TOOL_CALLS * 4)


class PlanResult(StepResult):
    model_config = ConfigDict(extra="forbid")

    type: Literal["res.plan"] = "res.plan"
    step: Literal["plan"] = "plan"
    sub_questions: list[Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]] = Field(
        default_factory=list, max_length=MAX_SUB_QUERIES
    )
    planner: str = Field(default="rules", max_length=32)
    broad: list[bool] = Field(
        default_factory=list,
        max_length=MAX_SUB_QUERIES,
        description="per sub-question: whether it has parts of its own (facets, several "
        "named things), so that it could be researched in turn where depth allows",
    )


class StepFailure(StepResult):
    """A step that failed for good (its command was dead-lettered)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["res.failed"] = "res.failed"
    status: StepStatus = StepStatus.FAILED


AnyResult = Annotated[
    ClassifyResult
    | SearchResult
    | FuseResult
    | GenerateResult
    | CriticResult
    | ToolResult
    | PlanResult
    | StepFailure,
    Field(discriminator="type"),
]
any_result_adapter: TypeAdapter[AnyResult] = TypeAdapter(AnyResult)
