"""Commands the orchestrator sends to workers on `rag.cmd.*`.

Every command names the attempt it belongs to; a worker echoes `command_id` and
`attempt` in its result so the orchestrator can tell a late answer from a current one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.access import Reader, unset
from contracts.enums import DOCUMENT_CHANNELS, Channel, Intent
from contracts.envelope import Envelope
from contracts.filters import MetadataFilter
from contracts.limits import (
    MAX_ANSWER_CHARS,
    MAX_CHUNKS,
    MAX_CITATIONS,
    MAX_ID_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_SUB_QUERIES,
    MAX_TOOL_CALLS,
)
from contracts.models import PackedVector, RetrievedChunk, ToolCall, ToolOutcome
from contracts.queries import MAX_QUERY_CHARS, SESSION_ID_PATTERN

Chunks = Annotated[list[RetrievedChunk], Field(max_length=MAX_CHUNKS)]


class ClaimedContexts(BaseModel):
    """The passages of a command to a step that resolves their claims: the list itself, or,
    when it is the fused list as fusion claimed it, that claim (`contexts_claim`), which the
    step reads with the passages: 60 bytes instead of 200 a passage."""

    contexts: Chunks = Field(default_factory=list)
    contexts_claim: str | None = Field(
        default=None,
        max_length=MAX_ID_CHARS,
        pattern=r"^contexts:[0-9a-f]{1,64}$",
        description="the claim field under which the contexts wait in the request's claim "
        "store (`contracts.models.contexts_claim`); `contexts` is empty then",
    )

    @model_validator(mode="after")
    def _one_or_the_other(self) -> ClaimedContexts:
        if self.contexts_claim is not None and self.contexts:
            raise ValueError("contexts and contexts_claim are exclusive")
        return self


class ClassifyCommand(Envelope):
    type: Literal["cmd.classify"] = "cmd.classify"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    reader: Reader | None = Field(
        default=None,
        exclude_if=unset,
        description="the tenant's user it is for (`contracts.access`): its session is that "
        "user's own (`session_space`)",
    )
    intent_override: Intent | None = None
    session_id: str | None = Field(
        default=None,
        pattern=SESSION_ID_PATTERN,
        description="the conversation the question belongs to: it is made standalone from "
        "the session's earlier turns before it is classified",
    )
    submitted_at: float | None = Field(
        default=None, description="epoch seconds: the turns before this one are the earlier"
    )


class FusionParameters(BaseModel):
    """How an attempt's rankings are fused: the fuse step's (`FuseCommand`) and a fusing search
    command's (`FuseSpec`)."""

    weights: dict[Channel, float]
    top_k: int = Field(ge=1, le=200)
    rrf_k: int = Field(default=60, ge=1)
    fusion: Literal["convex", "rrf"] = Field(
        default="convex",
        description="convex: each channel's min-max normalised scores, weighted; rrf: "
        "weighted reciprocal ranks (with rrf_k)",
    )


class FuseSpec(FusionParameters):
    """How a search command's worker fuses the rankings it made (`SearchCommand.fuse`): the
    fuse step's parameters, for an attempt whose channels are all in that one command."""

    model_config = ConfigDict(extra="forbid")

    question: str | None = Field(
        default=None,
        max_length=MAX_QUERY_CHARS,
        description="what a reranker orders by, where it is not the searched query",
    )


SKIPPED_BY_WEIGHT = "weight 0 for this intent"
"""Why a channel `weighed` leaves out was skipped: its report's and its phase event's reason,
whether the saga or a classifying search worker skipped it."""


def weighed(weights: Mapping[Channel, float], channels: Iterable[Channel]) -> list[Channel]:
    """The channels an intent's weights search: those weighed above 0 (the others are
    skipped, with a phase event that says so)."""
    return [c for c in channels if weights.get(c, 0.0) > 0.0]


class ClassifySpec(BaseModel):
    """Set on an attempt's one search command when its worker classifies the question first
    (`RAGBUS_CLASSIFY_WITH_SEARCH`): the classify step's work, in the hop that searches. The
    worker searches the channels the intent weighs above 0 (`weighed`), skipping the others,
    and fuses with the intent's weights; a tool question is not searched at all (the tool
    step answers it). The result carries the classification (`SearchResult.classified`)."""

    model_config = ConfigDict(extra="forbid")

    intent_override: Intent | None = None


class SearchCommand(Envelope):
    type: Literal["cmd.search"] = "cmd.search"
    channel: Channel
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    namespaces: list[Annotated[str, Field(max_length=MAX_NAMESPACE_CHARS)]] = Field(
        min_length=1, max_length=16
    )
    top_k: int = Field(ge=1, le=200)
    query_vector: PackedVector | None = Field(
        default=None, description="the query's embedding from classify, reused by dense search"
    )
    session_id: str | None = Field(
        default=None, pattern=SESSION_ID_PATTERN, description="the memory channel's scope"
    )
    filter: MetadataFilter | None = Field(
        default=None,
        description="the request's metadata filter (`contracts.filters`): every channel "
        "answers only with chunks of documents that pass it",
    )
    reader: Reader | None = Field(
        default=None,
        exclude_if=unset,
        description="the tenant's user the request reads for (`contracts.access`): only chunks of "
        "documents that user may read, ANDed with `filter",
    )
    claim_ranking: bool = Field(
        default=False,
        description="leave the ranking in the request's claim store and answer with its "
        "field (`SearchResult.ranking_claim`) instead of the chunks",
    )
    also: list[Channel] = Field(
        default_factory=list,
        max_length=len(Channel) - 1,
        description="further document channels the same worker searches for this query, "
        "each answered in `SearchResult.also`: one command, one result and one saga "
        "transition for all of them",
    )
    fuse: FuseSpec | None = Field(
        default=None,
        description="set when these channels are all the attempt searches: the worker fuses "
        "their rankings and hydrates the list as the fuse step would, and answers with it "
        "(`SearchResult.fused`): one hop and one saga transition fewer",
    )
    classify: ClassifySpec | None = Field(
        default=None,
        description="set on a request's first search when its worker classifies the question "
        "first (`ClassifySpec`): no classify command, no classify result",
    )
    deadline_at: datetime | None = Field(
        default=None,
        description="when the channels a command of several (or one that classifies) searches "
        "must have answered: the worker drops one that has not (`CHANNEL_TIMED_OUT`) and "
        "answers, fused, with the others, so one wedged channel does not hold the rest. The "
        "saga's own step deadline, a fuse step's time later where the worker fuses, stays "
        "the backstop for a worker that does not answer at all",
    )

    @model_validator(mode="after")
    def _distinct_document_channels(self) -> SearchCommand:
        channels = [self.channel, *self.also]
        if (self.also or self.fuse) and not DOCUMENT_CHANNELS.issuperset(channels):
            raise ValueError("only document channels search together")
        if len(set(channels)) != len(channels):
            raise ValueError("a channel is named twice")
        if self.classify is not None and self.fuse is None:
            raise ValueError("a search that classifies also fuses: it is the attempt's only one")
        return self

    @property
    def channels(self) -> list[Channel]:
        """Every channel the command asks for, its own first."""
        return [self.channel, *self.also]


def search_key(channel: Channel, index: int) -> str:
    """Names one search of an attempt: the channel, `#index` for a further query (the saga's
    pending commands and `FuseCommand.claimed_results` use it)."""
    return channel.value if index == 0 else f"{channel.value}#{index}"


def parse_search_key(key: str) -> tuple[Channel, int]:
    name, _, index = key.partition("#")
    return Channel(name), int(index or 0)


class FuseCommand(Envelope, FusionParameters):
    type: Literal["cmd.fuse"] = "cmd.fuse"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    results: dict[Channel, Chunks] = Field(
        description="the channels' rankings for the attempt's (first) query"
    )
    sub_results: list[dict[Channel, Chunks]] = Field(
        default_factory=list,
        max_length=MAX_SUB_QUERIES,
        description="the channels' rankings for each further query of a decomposed attempt",
    )
    carried: Chunks = Field(
        default_factory=list,
        description="the previous attempt's fused list, which a follow-up search adds to",
    )
    claimed_results: dict[str, str] = Field(
        default_factory=dict,
        max_length=(MAX_SUB_QUERIES + 1) * 8,
        description="rankings waiting in the request's claim store: `<channel>` (first "
        "query) or `<channel>#<i>` (further query i) -> claim field",
    )
    hydrate: bool = Field(
        default=True,
        description="fetch the fused chunks' text and stored vectors (off when only the "
        "rankings are wanted)",
    )
    namespaces: list[Annotated[str, Field(max_length=MAX_NAMESPACE_CHARS)]] = Field(
        default_factory=list,
        max_length=16,
        description="the request's namespaces: where a filtered request's bridge may look",
    )
    filter: MetadataFilter | None = Field(
        default=None,
        description="the request's metadata filter: the bridge adds only chunks of documents "
        "that pass it",
    )
    reader: Reader | None = Field(
        default=None,
        exclude_if=unset,
        description="the tenant's user the request reads for (`contracts.access`): the "
        "bridge adds only chunks of documents that user may read",
    )


class GenerateCommand(Envelope, ClaimedContexts):
    type: Literal["cmd.generate"] = "cmd.generate"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    intent: Intent
    tool_results: list[ToolOutcome] = Field(default_factory=list, max_length=MAX_TOOL_CALLS * 4)
    tool_rounds_left: int = Field(default=0, ge=0, le=16)
    follow_ups: list[Annotated[str, Field(max_length=MAX_QUERY_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_SUB_QUERIES,
        description="a decomposed attempt's follow-up queries: what else the answer should say",
    )
    query_vectors: dict[str, PackedVector] = Field(
        default_factory=dict,
        description="embeddings of the query and the follow-ups, by text, as the request made "
        "them: generation compares them with the contexts' stored sentence vectors",
        max_length=16,
    )
    critique_attempts_left: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="set: the worker critiques its final answer itself, as the critic step "
        "would with these attempts left, and reports the verdict with the answer (one hop "
        "fewer); unset: the critic gets a command of its own",
    )


class CriticCommand(Envelope, ClaimedContexts):
    type: Literal["cmd.critic"] = "cmd.critic"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    intent: Intent
    answer: str = Field(max_length=MAX_ANSWER_CHARS)
    citations: dict[int, Annotated[str, Field(max_length=MAX_ID_CHARS)]] = Field(
        max_length=MAX_CITATIONS, description="citation number -> chunk_id"
    )
    tool_results: list[ToolOutcome] = Field(default_factory=list, max_length=MAX_TOOL_CALLS * 4)
    attempts_left: int = Field(ge=0, le=100)
    query_vector: PackedVector | None = Field(
        default=None, description="the query's embedding: the critic encodes no query itself"
    )


class ToolCommand(Envelope):
    type: Literal["cmd.tool"] = "cmd.tool"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    filter: MetadataFilter | None = Field(
        default=None,
        description="the request's metadata filter: the `search` tool finds only passages "
        "of documents that pass it",
    )
    reader: Reader | None = Field(
        default=None,
        exclude_if=unset,
        description="the tenant's user the request reads for (`contracts.access`): the "
        "`search` tool finds only passages of documents that user may read",
    )
    calls: list[ToolCall] = Field(
        default_factory=list,
        max_length=MAX_TOOL_CALLS,
        description="explicit calls from generation; empty means plan from the query",
    )


class PlanCommand(Envelope, ClaimedContexts):
    """Plan a research request: the sub-questions its children will answer, from what a
    first retrieval found (`contexts`: bridges come from it)."""

    type: Literal["cmd.plan"] = "cmd.plan"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    max_questions: int = Field(ge=1, le=MAX_SUB_QUERIES)
