"""The arguments and results of ragbus's MCP tools (`api.mcp_tools`): pydantic models whose
JSON Schemas the tools publish as their input and output schemas (`api.mcp_door`), with the
same bounds as the `/v1` routes they stand for."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import MAX_DOCUMENTS_PER_CALL, MAX_FILES_PER_CALL, Namespace
from contracts.access import DocumentAccess
from contracts.envelope import REQUEST_ID_PATTERN
from contracts.queries import MAX_QUERY_CHARS, MAX_TOP_K, SESSION_ID_PATTERN

_STRICT = ConfigDict(extra="forbid")

NamespaceList = list[Namespace] | None
NAMESPACES = Field(
    default=None,
    min_length=1,
    max_length=16,
    description="The namespaces to search (`namespaces` lists them); unset: `default`.",
)


FILTER_HELP = (
    "Only passages of documents whose metadata passes this filter: "
    '{"field": value}, {"field": {"$in": [...]}}, {"year": {"$gte": 2020}}, dates as ISO 8601 '
    '({"published": {"$lt": "2024-01-01"}}), $ne, $nin, $exists, $and, $or, $not. A file\'s own '
    "properties are under file (file.type, file.author, file.created, file.pages)."
)


class AskArgs(BaseModel):
    model_config = _STRICT

    question: str = Field(
        min_length=1, max_length=MAX_QUERY_CHARS, description="The question, in plain words."
    )
    namespaces: NamespaceList = NAMESPACES
    session_id: str | None = Field(
        default=None,
        pattern=SESSION_ID_PATTERN,
        description="A conversation: a follow-up is understood from the session's earlier "
        "questions, and what it taught is recalled. Reuse one id for one conversation.",
    )
    filter: dict[str, Any] | None = Field(default=None, description=FILTER_HELP)


class CitationOut(BaseModel):
    n: int = Field(description="The number the answer cites it by, `[n]`.")
    title: str
    document_id: str
    source: str
    page: int | None = Field(description="The page of a parsed file, from 1.")
    page_label: str = Field(description="The page's own label, where the file gives one.")
    section: str
    namespace: str = Field(
        description="The namespace holding a page's file (its resource: "
        "ragbus://documents/{namespace}/{document_id}); empty where not known."
    )


class AskResult(BaseModel):
    request_id: str
    status: str = Field(description="`completed`, or how the request ended.")
    answer: str = Field(description="The answer, citing its sources as `[n]`.")
    citations: list[CitationOut]


class SearchArgs(BaseModel):
    model_config = _STRICT

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to find.")
    namespaces: NamespaceList = NAMESPACES
    top_k: int | None = Field(
        default=None, ge=1, le=MAX_TOP_K, description="Passages wanted at most."
    )
    filter: dict[str, Any] | None = Field(default=None, description=FILTER_HELP)


class Passage(BaseModel):
    rank: int = Field(description="From 1, best first.")
    chunk_id: str
    document_id: str
    title: str
    source: str
    namespace: str
    page: int | None = Field(description="Its page, where the search knows it.")
    score: float = Field(description="The fused score (higher is better).")
    channels: dict[str, int] = Field(description="channel -> the rank it found the passage at")


class SearchResult(BaseModel):
    request_id: str
    status: str
    passages: list[Passage]


class TextDocument(BaseModel):
    model_config = _STRICT

    text: str = Field(min_length=1, description="The document's text (Markdown or plain).")
    title: str = Field(default="", max_length=1000)
    document_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Its id in the namespace (no white space); sending an id again replaces "
        "that document. Unset: one made from the text, so the same text is stored once.",
    )
    metadata: dict[str, Any] | None = Field(default=None, description="Free-form JSON object.")


class FileDocument(BaseModel):
    model_config = _STRICT

    filename: str = Field(
        min_length=1,
        max_length=512,
        description="Its name: the document id (white space made `_`) and a hint of its kind.",
    )
    content_base64: str = Field(min_length=1, description="The file's bytes, base64.")


class IngestArgs(BaseModel):
    model_config = _STRICT

    documents: list[TextDocument] | None = Field(
        default=None, min_length=1, max_length=MAX_DOCUMENTS_PER_CALL
    )
    files: list[FileDocument] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_FILES_PER_CALL,
        description="Files to parse (PDF, Word .docx, PowerPoint .pptx, HTML, PNG/JPEG/TIFF "
        "scans, Markdown, text), each within the server's file size limit.",
    )
    namespace: Namespace = "default"
    metadata: dict[str, Any] | None = Field(
        default=None, description="For files: a JSON object every file's document carries."
    )
    access: DocumentAccess | None = Field(
        default=None,
        description="Who of the tenant may read every document of this call: "
        '{"groups": [...], "users": [...]}; unset: the whole tenant.',
    )


class JobArgs(BaseModel):
    model_config = _STRICT

    job_id: str = Field(pattern=REQUEST_ID_PATTERN, description="The id `ingest` answered.")


class NoArgs(BaseModel):
    model_config = _STRICT
