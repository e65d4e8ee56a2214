"""What the API publishes when a caller submits a question."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from contracts.access import Reader, unset
from contracts.enums import Intent
from contracts.envelope import Envelope
from contracts.events import AnswerData
from contracts.filters import MetadataFilter

MAX_QUERY_CHARS = 4000
MAX_TOP_K = 100
MAX_RESEARCH_DEPTH = 3
QueryMode = Literal["answer", "retrieve", "research"]
NAMESPACE_PATTERN = r"^[a-z0-9](?:[a-z0-9-]|_[a-z0-9-])*_?$"
"""A namespace as callers name it (at most `MAX_CALLER_NAMESPACE_CHARS`): lowercase letters,
digits, `-` and `_`, never `__`, which separates a tenant from its namespace in the stores."""
MAX_CALLER_NAMESPACE_CHARS = 63
STORE_NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,96}$"
"""A namespace as the stores and the bus know it (`contracts.tenancy.store_namespace`)."""
SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
"""A session id as callers choose it: letters, digits, `.`, `_`, `:` and `-`, at most 128
characters (no braces, spaces or wildcards: it becomes part of Redis keys and store names)."""


class QueryCancelled(Envelope):
    """A caller asked to stop a request (`DELETE /v1/queries/{id}`): on `rag.query.cancel`."""

    type: Literal["query.cancel"] = "query.cancel"
    reason: str = Field(default="cancelled by the caller", max_length=500)


class QuerySubmitted(Envelope):
    type: Literal["query.submitted"] = "query.submitted"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    session_id: str | None = Field(default=None, pattern=SESSION_ID_PATTERN)
    namespaces: list[Annotated[str, Field(pattern=STORE_NAMESPACE_PATTERN)]] = Field(
        default_factory=lambda: ["default"], min_length=1, max_length=16
    )
    intent: Intent | None = None
    top_k: int = Field(default=8, ge=1, le=MAX_TOP_K)
    filter: MetadataFilter | None = Field(
        default=None,
        description="only passages of documents whose metadata passes this filter "
        "(`contracts.filters`), in every channel and every research child",
    )
    reader: Reader | None = Field(
        default=None,
        exclude_if=unset,
        description="the tenant's user the question reads for (`contracts.access`): only "
        "documents that user may read, in every channel and every research child; set by the "
        "door from the caller's key, never by a caller (none: the tenant's key, everything)",
    )
    mode: QueryMode = Field(
        default="answer",
        description="`answer`: the whole agentic loop; `retrieve`: stop after fusion and return "
        "every channel's ranking and the fused one (search APIs, evaluation); `research`: plan "
        "sub-questions, answer each as a child request, and write a cited report.",
    )
    parent_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="the research request this one answers a sub-question of (set by the "
        "orchestrator, never by a caller)",
    )
    research_depth: int = Field(
        default=0,
        ge=0,
        le=MAX_RESEARCH_DEPTH,
        description="how many research requests this one is under (0: asked by a caller)",
    )


class ChildFinished(Envelope):
    """A research request's child ended (on `rag.query.child`; `request_id` is the parent's)."""

    type: Literal["query.child"] = "query.child"
    child_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    status: str = Field(max_length=32)
    answer: AnswerData | None = None
    error: str | None = Field(default=None, max_length=2000)


def _query_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("query.cancel", "query.child") else "query.submitted"


QueryMessage = Annotated[
    Annotated[QuerySubmitted, Tag("query.submitted")]
    | Annotated[QueryCancelled, Tag("query.cancel")]
    | Annotated[ChildFinished, Tag("query.child")],
    Discriminator(_query_kind),
]
"""What the orchestrator's `rag.query.>` consumer takes. Anything but a cancellation is
validated as a submission, so a malformed one is refused with what is wrong with it."""
