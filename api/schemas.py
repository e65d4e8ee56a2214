"""HTTP request and response bodies: what the OpenAPI page at /docs documents.

Wire schemas stay in `contracts`; these models are only the API's public surface, so
the limits mirror `QuerySubmitted` and validation fails here, before anything is stored
or published.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from contracts.enums import Intent, RequestStatus
from contracts.events import AnswerData, ErrorData
from contracts.ingest import DocumentIn, JobCounts
from contracts.queries import MAX_QUERY_CHARS, MAX_TOP_K, NAMESPACE_PATTERN, QueryMode

MAX_DOCUMENTS_PER_CALL = 1000

_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)


def _namespace(name: str) -> str:
    if not _NAMESPACE_RE.fullmatch(name):
        raise ValueError(
            f"invalid namespace {name!r}: use 1-63 lowercase letters, digits, '_' or '-',"
            " starting with a letter or digit"
        )
    return name


Namespace = Annotated[
    str, AfterValidator(_namespace), Field(json_schema_extra={"pattern": NAMESPACE_PATTERN})
]
"""Checked by `_namespace` (for its message), and published with the same pattern."""


class QueryRequest(BaseModel):
    """A question, as `POST /v1/queries` and `POST /v1/chat` take it."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"query": "Who designed the Gatun Locks?", "namespaces": ["default"]}]
        },
    )

    query: str = Field(
        max_length=MAX_QUERY_CHARS,
        description="The question, 1-4000 characters, not all white space.",
        # checked by `_not_blank` (for its message), published as the schema's own words
        json_schema_extra={"minLength": 1, "pattern": r"\S"},
    )
    session_id: str | None = Field(default=None, max_length=128)
    namespaces: list[Namespace] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="Namespaces to search; unset means `default`.",
    )
    intent: Intent | None = Field(default=None, description="Skip classification and use this.")
    top_k: int | None = Field(
        default=None, ge=1, le=MAX_TOP_K, description="Chunks given to generation."
    )
    mode: QueryMode = Field(
        default="answer",
        description="`retrieve` stops after fusion and returns every channel's ranking.",
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        stripped = value.strip()
        if not stripped:
            raise ValueError("must not be empty or whitespace only")
        return stripped


class QueryAccepted(BaseModel):
    request_id: str
    status_url: str
    events_url: str


class QueryView(BaseModel):
    """`RequestState.public_view()`, typed for the docs."""

    request_id: str
    status: RequestStatus
    query: str
    attempt: int
    intent: Intent | None = None
    created_at: datetime
    updated_at: datetime
    answer: AnswerData | None = None
    error: ErrorData | None = None


class DocumentsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentIn] = Field(min_length=1, max_length=MAX_DOCUMENTS_PER_CALL)

    @field_validator("documents")
    @classmethod
    def _one_version_each(cls, documents: list[DocumentIn]) -> list[DocumentIn]:
        """Two versions of one document in one batch: which should win? Refused, not guessed."""
        first: dict[tuple[str, str], int] = {}
        for n, doc in enumerate(documents):
            key = (doc.namespace, doc.id)
            if key in first and documents[first[key]].content_hash() != doc.content_hash():
                raise ValueError(
                    f"document {doc.id!r} (namespace {doc.namespace!r}) appears twice with "
                    f"different content, at {first[key]} and {n}: send one version"
                )
            first.setdefault(key, n)
        return documents


class IngestAccepted(BaseModel):
    job_id: str
    accepted: int = Field(description="Documents the broker took for this job.")
    duplicates: int = Field(description="Re-sent copies the broker dropped.")
    status_url: str


class JobView(JobCounts):
    """An ingest job's progress as the ingest workers record it."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    errors: dict[str, str] = Field(
        default_factory=dict, description="document id -> why it could not be indexed"
    )


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    checks: dict[str, str] = Field(description="check name -> `ok` or why it failed")


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    """The one shape every 4xx/5xx this API produces itself has."""

    error: ErrorDetail
