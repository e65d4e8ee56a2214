"""Conversations: the turns of a session, and the command that records one.

Requests with the same `session_id` (per tenant) form a conversation. The API records a turn
when it accepts a question; the orchestrator, when the request ends, sends `RememberTurn` to
the memory worker, which completes the turn (standalone question, answer, citations) and, for
an accepted answer or a fact the user stated, adds it to the scope's semantic memory.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag

from contracts.access import Reader, unset
from contracts.envelope import Envelope
from contracts.limits import MAX_PAGE_LABEL_CHARS
from contracts.queries import MAX_QUERY_CHARS, SESSION_ID_PATTERN

SessionId = Annotated[str, StringConstraints(pattern=SESSION_ID_PATTERN)]

MAX_TURN_ANSWER_CHARS: Final = 4000
"""How much of an answer a turn keeps (the request's own state keeps all of it)."""
MAX_TURN_CITATIONS: Final = 20
MEMORY_PREFIX: Final = "memory:"
"""The document id of every memory chunk starts so: an answer cites it as memory."""

RewriteMethod = Literal["none", "rules", "llm"]
"""How a follow-up became standalone: kept as it was, by the rules, or by the model."""


class TurnCitation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=1)
    title: str = Field(default="", max_length=500)
    document_id: str = Field(default="", max_length=512)
    source: str = Field(default="", max_length=1000)
    page: int | None = Field(default=None, ge=1, description="the cited page (or slide), if any")
    page_label: str = Field(default="", max_length=MAX_PAGE_LABEL_CHARS, description='"p. 3"')
    section: str = Field(default="", max_length=500, description="the heading path cited")
    kind: Literal["document", "memory"] = "document"


class SessionTurn(BaseModel):
    """One question of a conversation and what became of it."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(max_length=64)
    query: str = Field(max_length=MAX_QUERY_CHARS, description="the question as it was asked")
    standalone_query: str | None = Field(
        default=None,
        max_length=MAX_QUERY_CHARS,
        description="the question made standalone from the turns before it (None: not yet "
        "known, the request is still running)",
    )
    rewrite_method: RewriteMethod | None = None
    answer: str | None = Field(default=None, max_length=MAX_TURN_ANSWER_CHARS)
    status: str = Field(default="submitted", max_length=32)
    citations: list[TurnCitation] = Field(default_factory=list, max_length=MAX_TURN_CITATIONS)
    submitted_at: float = Field(description="epoch seconds: the conversation's order")
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def context_text(self) -> str:
        """The question as later turns should read it: standalone when known."""
        return self.standalone_query or self.query


class RememberTurn(Envelope):
    """A session's request ended: record its turn and, if it taught something, remember it.
    On `rag.cmd.memory`, from the orchestrator's outbox (so a turn is never lost between the
    terminal commit and the memory worker)."""

    type: Literal["cmd.remember"] = "cmd.remember"
    session_id: SessionId
    reader: Reader | None = Field(
        default=None,
        exclude_if=unset,
        description="the tenant's user it is for (`contracts.access`): its session and "
        "memories are that user's own (`session_space`)",
    )
    turn: SessionTurn
    accepted: bool = Field(
        default=False,
        description="the answer completed and the critic did not flag it: worth recalling",
    )


class ForgetMemory(Envelope):
    """The API forgot a scope (`DELETE /v1/sessions/{id}`) or one memory: the memory worker
    removes the vectors. On `rag.cmd.memory`; `request_id` is the deletion's own id."""

    type: Literal["cmd.forget"] = "cmd.forget"
    scope: str = Field(min_length=1, max_length=300)
    memory_id: str | None = Field(
        default=None, max_length=64, description="one memory; unset = the whole scope"
    )


def _memory_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "cmd.forget" if kind == "cmd.forget" else "cmd.remember"


MemoryMessage = Annotated[
    Annotated[RememberTurn, Tag("cmd.remember")] | Annotated[ForgetMemory, Tag("cmd.forget")],
    Discriminator(_memory_kind),
]
"""What the memory worker's `rag.cmd.memory` consumer takes."""
