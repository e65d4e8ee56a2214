"""Closed vocabularies shared by every service: intents, channels, steps, phases, states."""

from __future__ import annotations

from enum import StrEnum


class Intent(StrEnum):
    """C-LARA's five, plus `summary` (global questions) and `tool` (calculation / code)."""

    FACTUAL = "factual"
    PROCEDURAL = "procedural"
    COMPARISON = "comparison"
    RECOMMENDATION = "recommendation"
    NAVIGATION = "navigation"
    SUMMARY = "summary"
    TOOL = "tool"


class Channel(StrEnum):
    VECTOR = "vector"
    SPARSE = "sparse"
    GRAPH_LOCAL = "graph_local"
    GRAPH_GLOBAL = "graph_global"
    MEMORY = "memory"
    """What the conversation's scope remembers (`workers.memory`), not the documents."""

    @property
    def reads_query_vector(self) -> bool:
        """Whether the channel searches by the query's embedding (the others never read it,
        so their commands go without its 2 KB)."""
        return self in (Channel.VECTOR, Channel.GRAPH_GLOBAL, Channel.MEMORY)


class Step(StrEnum):
    """A unit of work a worker kind does; its command and result subjects derive from it."""

    CLASSIFY = "classify"
    SEARCH = "search"
    FUSE = "fuse"
    GENERATE = "generate"
    CRITIC = "critic"
    TOOL = "tool"
    MEMORY = "memory"
    """Record a finished turn, remember it, forget a scope: nothing waits on its result."""
    PLAN = "plan"
    """Plan a research request's sub-questions (the critic worker kind)."""


class Phase(StrEnum):
    QUERY_REWRITE = "query_rewrite"
    INTENT_CLASSIFICATION = "intent_classification"
    VECTOR_SEARCH = "vector_search"
    SPARSE_SEARCH = "sparse_search"
    GRAPH_LOCAL_SEARCH = "graph_local_search"
    GRAPH_GLOBAL_SEARCH = "graph_global_search"
    MEMORY_SEARCH = "memory_search"
    FUSION = "fusion"
    GENERATION = "generation"
    TOOL_EXECUTION = "tool_execution"
    CRITIC = "critic"
    RETRY = "retry"
    RESEARCH_PLAN = "research_plan"
    RESEARCH_STEP = "research_step"
    RESEARCH_SYNTHESIS = "research_synthesis"


DOCUMENT_CHANNELS: frozenset[Channel] = frozenset(set(Channel) - {Channel.MEMORY})
"""The channels that search the documents (memory searches what a conversation taught)."""

CHANNEL_PHASE: dict[Channel, Phase] = {
    Channel.VECTOR: Phase.VECTOR_SEARCH,
    Channel.SPARSE: Phase.SPARSE_SEARCH,
    Channel.GRAPH_LOCAL: Phase.GRAPH_LOCAL_SEARCH,
    Channel.GRAPH_GLOBAL: Phase.GRAPH_GLOBAL_SEARCH,
    Channel.MEMORY: Phase.MEMORY_SEARCH,
}


class PhaseStatus(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"


class RequestStatus(StrEnum):
    SUBMITTED = "submitted"
    CLASSIFYING = "classifying"
    SEARCHING = "searching"
    FUSING = "fusing"
    GENERATING = "generating"
    TOOLING = "tooling"
    CRITIQUING = "critiquing"
    RETRYING = "retrying"
    PLANNING = "planning"
    RESEARCHING = "researching"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {
        RequestStatus.COMPLETED,
        RequestStatus.FAILED,
        RequestStatus.TIMED_OUT,
        RequestStatus.CANCELLED,
    }
)


class StepStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
