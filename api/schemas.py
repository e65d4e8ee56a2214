"""HTTP request and response bodies: what the OpenAPI page at /docs documents.

Wire schemas stay in `contracts`; these models are only the API's public surface, so
the limits mirror `QuerySubmitted` and validation fails here, before anything is stored
or published.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from contracts.access import DocumentAccess
from contracts.enums import Intent, RequestStatus
from contracts.events import AnswerData, ErrorData
from contracts.filters import MetadataFilter
from contracts.ingest import MAX_METADATA_CHARS, DocumentIn, JobCounts
from contracts.queries import (
    MAX_CALLER_NAMESPACE_CHARS,
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    NAMESPACE_PATTERN,
    SESSION_ID_PATTERN,
    QueryMode,
)
from contracts.tenancy import TENANT_PATTERN
from infra.tenancy.registry import Limits

MAX_DOCUMENTS_PER_CALL = 1000

_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)


def _namespace(name: str) -> str:
    if len(name) > MAX_CALLER_NAMESPACE_CHARS or not _NAMESPACE_RE.fullmatch(name):
        raise ValueError(
            f"invalid namespace {name!r}: use 1-63 lowercase letters, digits, '_' or '-',"
            " starting with a letter or digit, and no '__'"
        )
    return name


Namespace = Annotated[
    str,
    AfterValidator(_namespace),
    Field(
        json_schema_extra={
            "pattern": NAMESPACE_PATTERN,
            "minLength": 1,
            "maxLength": MAX_CALLER_NAMESPACE_CHARS,
        }
    ),
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
    session_id: str | None = Field(
        default=None,
        pattern=SESSION_ID_PATTERN,
        description="A conversation: the question is made standalone from the session's earlier "
        "turns, becomes a turn itself (`GET /v1/sessions/{id}`), and the memory channel recalls "
        "what the session remembered. Letters, digits, '.', '_', ':' or '-'; 1-128.",
    )
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
    filter: MetadataFilter | None = Field(
        default=None,
        description="Only passages of documents whose metadata passes this filter: "
        '`{"field": value}`, `{"field": {"$in": [...]}}`, `{"year": {"$gte": 2020}}`, dates '
        '(`{"published": {"$lt": "2024-01-01"}}`), `$ne`, `$nin`, `$exists`, `$and`, `$or`, '
        "`$not` (docs/usage.md, Filters).",
        json_schema_extra={"examples": [{"year": {"$gte": 2020}, "kind": {"$in": ["report"]}}]},
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
    trace_id: str | None = Field(
        default=None, description="The request's OpenTelemetry trace id (32 hex digits)."
    )
    mode: QueryMode = "answer"
    session_id: str | None = Field(default=None, description="The conversation it belongs to.")
    filter: dict[str, Any] | None = Field(
        default=None, description="Its metadata filter, as ragbus spells it (one canonical form)."
    )
    user: str | None = Field(
        default=None,
        description="The tenant's user it was asked as (it reads what that user may); null: "
        "the tenant's key.",
    )
    standalone_query: str | None = Field(
        default=None, description="The follow-up made standalone from its session's turns."
    )
    parent_id: str | None = Field(
        default=None, description="The research request this one answers a sub-question of."
    )
    children: list[str] = Field(
        default_factory=list, description="A research request's child requests, in plan order."
    )


class RecentRequest(BaseModel):
    request_id: str
    query: str
    status: RequestStatus
    created_at: datetime


class RecentRequests(BaseModel):
    requests: list[RecentRequest] = Field(description="Newest first.")


class WhoAmI(BaseModel):
    tenant: str
    auth_mode: Literal["none", "token", "tenants"]
    user: str | None = Field(
        default=None, description="the tenant's user whose key was sent; null: the tenant's key"
    )
    groups: list[str] = Field(default_factory=list, description="the user's groups")


class NamespaceCount(BaseModel):
    namespace: str
    documents: int


class Namespaces(BaseModel):
    namespaces: list[NamespaceCount]


class DocumentEntry(BaseModel):
    id: str
    bytes: int = Field(description="Its text's size, as counted against the tenant's limit.")
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="Its metadata as indexed (the caller's, and what a parsed file says of "
        "itself under `file`); none until it is indexed.",
    )
    access: DocumentAccess | None = Field(
        default=None,
        description="The groups and users it names as its readers; null: the whole tenant "
        "(or not indexed yet).",
    )


class DocumentList(BaseModel):
    namespace: str
    documents: list[DocumentEntry] = Field(description="By id; at most `limit`.")


class DocumentUpload(DocumentIn):
    """A document as a caller sends it: in one of the caller's namespaces. Its text is the
    document; a file is sent as a file (`multipart/form-data`), so `file`, the reference to a
    stored original that only the parse workers set, is not the caller's to give."""

    namespace: Namespace = "default"
    file: SkipJsonSchema[None] = None


class DocumentsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentUpload] = Field(min_length=1, max_length=MAX_DOCUMENTS_PER_CALL)

    @field_validator("documents")
    @classmethod
    def _one_version_each(cls, documents: list[DocumentUpload]) -> list[DocumentUpload]:
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


MAX_FILES_PER_CALL = 100
"""Files one multipart `POST /v1/documents` may carry."""

DOCUMENT_FILES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["files"],
    "additionalProperties": False,
    "properties": {
        "files": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_FILES_PER_CALL,
            "items": {"type": "string", "format": "binary"},
            "description": "The files, one part each (PDF, Word .docx, PowerPoint .pptx, HTML, "
            "PNG/JPEG/TIFF scans, Markdown, text), each at most RAGBUS_MAX_FILE_BYTES. A "
            "file's document id is its file name, white space made `_` and folders `__`; its "
            "title is the one the file gives.",
        },
        "namespace": {
            "type": "string",
            "default": "default",
            "pattern": NAMESPACE_PATTERN,
            "maxLength": MAX_CALLER_NAMESPACE_CHARS,
            "description": "Where every file of the batch is indexed.",
        },
        "metadata": {
            "type": "object",
            "description": "A JSON object every file's document carries (with `source`, the "
            f"file name, and `media_type` added); up to {MAX_METADATA_CHARS:,} characters.",
        },
    },
}
"""`POST /v1/documents` as `multipart/form-data`, as the OpenAPI document describes it."""
DOCUMENT_FILES_ENCODING: dict[str, Any] = {"metadata": {"contentType": "application/json"}}
"""The form's `metadata` part is JSON."""


class FileBatchPrint(BaseModel):
    """What a multipart batch's `Idempotency-Key` stands for: the same files (by content) in
    the same namespace with the same metadata."""

    namespace: str
    metadata: dict[str, Any]
    files: list[tuple[str, str]] = Field(description="(document id, sha256) of each file")
    access: DocumentAccess | None = None


class IngestAccepted(BaseModel):
    job_id: str
    accepted: int = Field(description="Documents the broker took for this job.")
    duplicates: int = Field(description="Re-sent copies the broker dropped.")
    status_url: str
    events_url: str | None = Field(
        default=None, description="Its progress as server-sent events (absent on old receipts)."
    )


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


class TenantCreate(BaseModel):
    """`POST /v1/admin/tenants`."""

    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(
        pattern=TENANT_PATTERN, description="1-32 lowercase letters, digits or inner '-'."
    )
    limits: Limits = Field(default_factory=Limits, description="Unset ones: RAGBUS_QUOTA_*.")
