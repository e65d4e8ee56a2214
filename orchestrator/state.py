"""A request's saga state as kept in Redis (one JSON document per request)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.access import Reader
from contracts.enums import Channel, Intent, RequestStatus
from contracts.envelope import TraceContext, utcnow
from contracts.events import AnswerData, ErrorData
from contracts.models import ChannelReport, RetrievedChunk, ToolOutcome
from contracts.queries import QueryMode
from contracts.tenancy import DEFAULT_TENANT


class PendingStep(BaseModel):
    """The command the saga is waiting on; a result that does not match it is stale."""

    model_config = ConfigDict(extra="forbid")

    step: str
    command_ids: dict[str, str] = Field(
        default_factory=dict, description="channel (or step) -> command event_id still awaited"
    )
    deadline_at: float = Field(description="epoch seconds")


class AttemptRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int
    confidence: float | None = None
    verdict: str | None = None
    strategy: str | None = None
    reasons: list[str] = Field(default_factory=list)
    scores: dict[str, float] = Field(default_factory=dict, description="the critic's scores")
    documents: list[str] = Field(
        default_factory=list, description="the attempt's fused documents, best first"
    )
    queries: list[str] = Field(default_factory=list, description="what the channels searched")
    answer: str = Field(
        default="",
        description="the attempt's draft answer; the answer event leaves it out of the final "
        "attempt when it is the event's `content`",
    )


class ChildRecord(BaseModel):
    """A research request's sub-question and what its child request made of it."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    query: str
    status: str = "running"
    answer: AnswerData | None = None
    error: str | None = None


class RequestState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str
    tenant: str = DEFAULT_TENANT
    status: RequestStatus = RequestStatus.SUBMITTED
    query: str
    search_queries: list[str] = Field(
        min_length=1,
        description="what every channel searches this attempt: the question, a rewrite of it, "
        "or a decomposition's follow-up queries",
    )
    session_id: str | None = None
    standalone_query: str | None = Field(
        default=None, description="the follow-up made standalone from its session's turns"
    )
    rewrite_method: str | None = None
    parent_id: str | None = Field(default=None, description="the research request it answers for")
    plan: list[str] = Field(default_factory=list, description="a research request's sub-questions")
    planner: str | None = None
    research_depth: int = Field(default=0, description="research requests above this one")
    children: list[ChildRecord] = Field(default_factory=list)
    namespaces: list[str]
    filter: dict[str, Any] | None = Field(
        default=None, description="the request's metadata filter, canonical (`contracts.filters`)"
    )
    reader: Reader | None = Field(
        default=None,
        description="the tenant's user it reads for and belongs to (`contracts.access`)",
    )
    top_k: int
    channel_top_k: int
    intent_override: Intent | None = None
    mode: QueryMode = "answer"
    trace: TraceContext = Field(default_factory=TraceContext)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    deadline_at: float = Field(description="whole-request deadline, epoch seconds")
    version: int = 0

    attempt: int = 1
    intent: Intent | None = None
    intent_confidence: float | None = None
    intent_method: str | None = None
    weights: dict[Channel, float] = Field(default_factory=dict)
    query_vector: str | None = Field(
        default=None, description="the query's embedding from classify (packed float32)"
    )
    query_vectors: dict[str, str] = Field(
        default_factory=dict,
        description="embeddings a dense channel made for follow-up queries, by text (packed)",
    )

    pending: PendingStep | None = None
    channel_results: dict[Channel, list[RetrievedChunk]] = Field(default_factory=dict)
    claimed_results: dict[str, str] = Field(
        default_factory=dict,
        description="rankings the channels left in the claim store: search key -> claim field",
    )
    channel_reports: dict[Channel, ChannelReport] = Field(default_factory=dict)
    sub_results: list[dict[Channel, list[RetrievedChunk]]] = Field(
        default_factory=list, description="the channels' rankings for search_queries[1:]"
    )
    carried: list[RetrievedChunk] = Field(
        default_factory=list, description="the fused list a follow-up attempt adds to"
    )
    fused: list[RetrievedChunk] = Field(default_factory=list)
    fused_claim: str | None = Field(
        default=None,
        description="where fusion claimed `fused` for the steps that resolve it "
        "(`Fused.contexts_claim`): their commands name it while the list is unchanged",
    )
    effective_weights: dict[Channel, float] = Field(default_factory=dict)
    channel_counts: dict[Channel, int] = Field(default_factory=dict)

    tool_rounds: int = 0
    tool_results: list[ToolOutcome] = Field(default_factory=list)
    draft: str | None = None
    draft_citations: dict[int, str] = Field(default_factory=dict)
    generator: str | None = None

    attempts: list[AttemptRecord] = Field(default_factory=list)
    answer: AnswerData | None = None
    error: ErrorData | None = None
    finished_at: datetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_query_before(cls, data: Any) -> Any:
        """States saved before attempts could search several queries had `search_query`."""
        if isinstance(data, dict) and "search_query" in data:
            data = dict(data)
            data.setdefault("search_queries", [data.pop("search_query")])
        return data

    @property
    def question(self) -> str:
        """What the pipeline answers: the standalone rewrite of a follow-up, else the query."""
        return self.standalone_query or self.query

    def public_view(self) -> dict[str, Any]:
        """What `GET /v1/queries/{id}` shows: no internal bookkeeping."""
        return {
            "request_id": self.request_id,
            "status": self.status.value,
            "query": self.query,
            "session_id": self.session_id,
            "filter": self.filter,
            "user": self.reader.user if self.reader is not None else None,
            "standalone_query": self.standalone_query,
            "mode": self.mode,
            "parent_id": self.parent_id,
            "children": [c.request_id for c in self.children],
            "attempt": self.attempt,
            "intent": self.intent.value if self.intent else None,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "answer": self.answer.model_dump(mode="json") if self.answer else None,
            "error": self.error.model_dump(mode="json") if self.error else None,
            "trace_id": self.trace.trace_id,
        }
