"""What the API publishes when a caller submits a question."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contracts.enums import Intent
from contracts.envelope import Envelope

MAX_QUERY_CHARS = 4000
MAX_TOP_K = 100
QueryMode = Literal["answer", "retrieve"]
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"


class QuerySubmitted(Envelope):
    type: Literal["query.submitted"] = "query.submitted"
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    session_id: str | None = Field(default=None, max_length=128)
    namespaces: list[str] = Field(default_factory=lambda: ["default"], min_length=1, max_length=16)
    intent: Intent | None = None
    top_k: int = Field(default=8, ge=1, le=MAX_TOP_K)
    mode: QueryMode = Field(
        default="answer",
        description="`answer`: the whole agentic loop; `retrieve`: stop after fusion and return "
        "every channel's ranking and the fused one (search APIs, evaluation).",
    )
