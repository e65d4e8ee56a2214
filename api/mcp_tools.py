"""MCP's tools, each what a `/v1` route does, said in MCP's terms (`api.mcp_door` serves them):

- `ask`: one request on the bus (`api.asking.Door`: the quota, the record, the saga, the trace,
  the events), its phases sent as progress notifications while it runs; its answer with `[n]`
  citations, or a tool error with the reason it failed;
- `search`: the same, in `mode: "retrieve"` (the saga stops after fusion): the fused passages,
  best first, from the request's record;
- `ingest`: text documents as `POST /v1/documents` takes JSON (`api.documents.accept_batch`),
  or files sent as base64 as it takes them as multipart (`api.uploads.read_file_batch` checks
  them, `api.documents.accept_files` queues them); its job;
- `job_status`: `GET /v1/ingest/{job_id}` (`api.jobs.get_job`), the caller's jobs only;
- `namespaces`: `GET /v1/namespaces` (`api.catalogue.list_namespaces`).

Each acts for the caller of the HTTP request that carried it (`Call`). A refusal (the
`HTTPException` the route would answer: 404, 409, 413, 415, 422, 429 with when to retry, 503)
is a tool error (`ToolRefused`), whose message the model reads, never a protocol error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import FormData, Headers, UploadFile
from starlette.requests import Request

from api.asking import Door
from api.auth import Caller
from api.catalogue import list_namespaces
from api.documents import accept_batch, accept_files, get_files
from api.idempotency import Idempotency
from api.jobs import get_job
from api.limits import check_spool_room
from api.routes import take_submission
from api.schemas import (
    MAX_DOCUMENTS_PER_CALL,
    MAX_FILES_PER_CALL,
    DocumentsRequest,
    DocumentUpload,
    IngestAccepted,
    JobView,
    Namespace,
    Namespaces,
    QueryRequest,
)
from api.uploads import FileOverLimit, read_file_batch
from contracts.envelope import REQUEST_ID_PATTERN
from contracts.queries import MAX_QUERY_CHARS, MAX_TOP_K, SESSION_ID_PATTERN
from contracts.tenancy import caller_namespace
from infra.logging import get_logger
from infra.runtime.redis_client import UNAVAILABLE_ERRORS
from infra.tenancy.quotas import Quotas

log = get_logger(__name__)

SPOOL_BYTES = 1024 * 1024
"""A file sent to `ingest` is kept in memory up to this, then on disk, as an upload's part."""


class ToolRefused(Exception):
    """What a tool could not do, in words for the model: the call's result is a tool error."""


Progress = Callable[[float, str], Awaitable[None]]
"""Report progress: the count so far and what happened (a no-op when the client gave no
progress token)."""


@dataclass(frozen=True)
class Call:
    """One tool call: who asked, through which HTTP request (its app is the API, whose
    lifespan opened the connections), and where its progress goes."""

    caller: Caller
    request: Request
    progress: Progress

    @property
    def state(self) -> Any:
        return self.request.app.state

    @property
    def door(self) -> Door:
        return Door.of(self.state)

    @property
    def quotas(self) -> Quotas:
        return Quotas(self.state.redis)

    def idempotency(self) -> Idempotency:
        return Idempotency(
            self.state.redis, self.state.settings.idempotency_ttl_s, self.caller.tenant
        )


# -- the tools' arguments and results ------------------------------------------------------

_STRICT = ConfigDict(extra="forbid")

NamespaceList = list[Namespace] | None
NAMESPACES = Field(
    default=None,
    min_length=1,
    max_length=16,
    description="The namespaces to search (`namespaces` lists them); unset: `default`.",
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


class JobArgs(BaseModel):
    model_config = _STRICT

    job_id: str = Field(pattern=REQUEST_ID_PATTERN, description="The id `ingest` answered.")


class NoArgs(BaseModel):
    model_config = _STRICT


@dataclass(frozen=True)
class Outcome:
    """A tool's result: the text the model reads, and the structured content."""

    text: str
    structured: BaseModel


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    arguments: type[BaseModel]
    result: type[BaseModel]
    run: Callable[[Call, Any], Awaitable[Outcome]]
    read_only: bool


# -- ask and search ----------------------------------------------------------------------


def _query(**fields: Any) -> QueryRequest:
    try:
        return QueryRequest.model_validate(fields)
    except ValidationError as exc:
        raise ToolRefused(invalid(exc)) from None


async def _run(call: Call, body: QueryRequest) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """Submit the question as `POST /v1/queries` does, and follow its events to its `done`,
    each phase reported as progress: its id, its status, its answer (or {}), its error (or {})."""
    submitted, _ = await call.door.ask(call.caller, body)
    request_id = submitted.request_id
    answer: dict[str, Any] = {}
    error: dict[str, Any] = {}
    status = "unknown"
    phases = 0
    await call.progress(0, f"request {request_id} submitted")
    async with aclosing(call.door.events(call.caller, request_id)) as events:
        async for event in events:
            kind, data = event.get("type"), event.get("data") or {}
            if kind == "phase":
                phases += 1
                await call.progress(phases, phase_line(data))
            elif kind == "answer":
                answer = data
            elif kind == "error":
                error = data
            elif kind == "done":
                status = str(data.get("status", status))
    await call.progress(phases + 1, f"request {request_id} {status}")
    return request_id, status, answer, error


_UNSAID = frozenset({"query", "channel"})
"""A phase's metadata that progress leaves out: the question again, the phase's own name."""


def phase_line(data: dict[str, Any]) -> str:
    """`generation completed in 557 ms (generator=extractive)`: a phase as progress says it."""
    line = f"{data.get('phase', 'phase')} {data.get('status', '')}".strip()
    duration = data.get("duration_ms")
    if isinstance(duration, int | float):
        line += f" in {duration:.0f} ms"
    facts = [
        f"{key}={value}"
        for key, value in (data.get("metadata") or {}).items()
        if key not in _UNSAID
        and isinstance(value, str | int | float)
        and not isinstance(value, bool)
        and len(str(value)) <= 60
    ][:3]
    return f"{line} ({' '.join(facts)})" if facts else line


def _failed(request_id: str, status: str, error: dict[str, Any]) -> ToolRefused:
    reason = error.get("message") or "no reason given"
    code = error.get("code")
    return ToolRefused(
        f"request {request_id} ended {status}: {f'{code}: ' if code else ''}{reason}"
    )


async def ask(call: Call, args: AskArgs) -> Outcome:
    body = _query(query=args.question, namespaces=args.namespaces, session_id=args.session_id)
    request_id, status, answer, error = await _run(call, body)
    if status != "completed":
        raise _failed(request_id, status, error)
    citations = [
        CitationOut(
            n=int(n),
            title=str(cited.get("title") or ""),
            document_id=str(cited.get("document_id") or ""),
            source=str(cited.get("source") or ""),
            page=cited.get("page"),
            page_label=str(cited.get("page_label") or ""),
            section=str(cited.get("section") or ""),
            namespace=str(cited.get("namespace") or ""),
        )
        for n, cited in sorted(
            (answer.get("citations") or {}).items(), key=lambda item: int(item[0])
        )
    ]
    content = str(answer.get("content") or "")
    result = AskResult(request_id=request_id, status=status, answer=content, citations=citations)
    return Outcome(_answer_text(content, citations, answer.get("metadata") or {}), result)


def _answer_text(content: str, citations: list[CitationOut], metadata: dict[str, Any]) -> str:
    lines = [content or "(no answer)"]
    if citations:
        lines += ["", "Sources:"]
        for cited in citations:
            where = cited.title or cited.document_id
            if cited.page is not None:
                where += f", page {cited.page_label or cited.page}"
            lines.append(f"[{cited.n}] {where} ({cited.document_id})")
    note = metadata.get("note")
    if isinstance(note, str) and note:
        lines += ["", note]
    return "\n".join(lines)


async def search(call: Call, args: SearchArgs) -> Outcome:
    body = _query(query=args.query, namespaces=args.namespaces, top_k=args.top_k, mode="retrieve")
    request_id, status, _, error = await _run(call, body)
    if status != "completed":
        raise _failed(request_id, status, error)
    state = await call.door.state(call.caller, request_id)  # the fused list, best first
    passages = [
        Passage(
            rank=rank,
            chunk_id=chunk.chunk_id,
            document_id=chunk.document_id,
            title=chunk.title,
            source=chunk.source,
            namespace=caller_namespace(call.caller.tenant, chunk.namespace),
            page=chunk.page,
            score=round(chunk.score, 6),
            channels=chunk.channels,
        )
        for rank, chunk in enumerate(state.fused, start=1)
    ]
    lines = [f"{len(passages)} passages for {args.query!r} (request {request_id}):"]
    lines += [
        f"{p.rank}. {p.title or p.document_id} ({p.namespace}/{p.document_id}"
        f"{f', page {p.page}' if p.page is not None else ''}) score {p.score:.4f}"
        for p in passages
    ]
    return Outcome(
        "\n".join(lines), SearchResult(request_id=request_id, status=status, passages=passages)
    )


# -- documents and jobs -------------------------------------------------------------------


def _text_id(document: TextDocument) -> str:
    return document.document_id or "text-" + hashlib.sha256(document.text.encode()).hexdigest()[:24]


async def ingest(call: Call, args: IngestArgs) -> Outcome:
    if (args.documents is None) == (args.files is None):
        raise ToolRefused(
            "422: give `documents` (text) or `files` (base64), one of the two, in one call"
        )
    if args.documents is not None:
        accepted = await _ingest_texts(call, args.documents, args.namespace)
    else:
        assert args.files is not None
        accepted = await _ingest_files(call, args.files, args.namespace, args.metadata)
    text = (
        f"ingest job {accepted.job_id}: {accepted.accepted} documents queued"
        f"{f', {accepted.duplicates} unchanged' if accepted.duplicates else ''}; "
        "follow it with job_status"
    )
    return Outcome(text, accepted)


async def _ingest_texts(
    call: Call, documents: list[TextDocument], namespace: str
) -> IngestAccepted:
    """As `POST /v1/documents` with a JSON body."""
    state = call.state
    try:
        body = DocumentsRequest(
            documents=[
                DocumentUpload(
                    id=_text_id(doc),
                    title=doc.title,
                    text=doc.text,
                    metadata=doc.metadata or {},
                    namespace=namespace,
                )
                for doc in documents
            ]
        )
    except ValidationError as exc:
        raise ToolRefused(invalid(exc)) from None
    accepted, _ = await accept_batch(
        call.caller,
        body,
        bus=state.bus,
        redis=state.redis,
        max_payload=state.nc.max_payload,
        settings=state.settings,
        quotas=call.quotas,
        idempotency=call.idempotency(),
        idempotency_key=None,
    )
    return accepted


async def _ingest_files(
    call: Call, files: list[FileDocument], namespace: str, metadata: dict[str, Any] | None
) -> IngestAccepted:
    """As `POST /v1/documents` with a multipart body: the same quota and disk checks, each
    file as a form's file part, checked by the upload route's own `read_file_batch`, queued
    by its `accept_files`."""
    state, settings = call.state, call.state.settings
    await take_submission(call.quotas, call.caller)
    decoded: list[tuple[str, bytes]] = []
    for n, upload in enumerate(files):
        try:
            content = base64.b64decode(upload.content_base64, validate=True)
        except (binascii.Error, ValueError):
            raise ToolRefused(
                f"422: files.{n}.content_base64: {upload.filename} is not base64"
            ) from None
        if len(content) > settings.max_file_bytes:
            raise ToolRefused(f"413: {FileOverLimit(upload.filename, settings.max_file_bytes)}")
        decoded.append((upload.filename, content))
    total = sum(len(content) for _, content in decoded)
    check_spool_room(
        Headers({"content-length": str(total)}),
        settings.max_request_bytes,
        settings.upload_min_free_mb,
    )
    fields: list[tuple[str, str | UploadFile]] = [("namespace", namespace)]
    if metadata is not None:
        fields.append(("metadata", json.dumps(metadata)))
    for filename, content in decoded:
        # closed with the form, as an upload's spooled parts are
        spooled = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        spooled.write(content)
        spooled.seek(0)
        part = UploadFile(cast(BinaryIO, spooled), size=len(content), filename=filename)
        fields.append(("files", part))
    form = FormData(fields)
    try:
        batch = await read_file_batch(form)
        store = await get_files(call.request, state.js, settings)
        accepted, _ = await accept_files(
            call.caller,
            batch,
            bus=state.bus,
            redis=state.redis,
            files=store,
            settings=settings,
            quotas=call.quotas,
            idempotency=call.idempotency(),
            idempotency_key=None,
        )
    finally:
        await form.close()
    return accepted


async def job_status(call: Call, args: JobArgs) -> Outcome:
    job = await get_job(args.job_id, call.caller, call.state.redis)
    expected = f" of {job.expected}" if job.expected is not None else ""
    text = (
        f"ingest job {job.job_id}: {job.status}, {job.documents_done}{expected} documents "
        f"done ({job.documents_failed} failed, {job.documents_unchanged} unchanged), "
        f"{job.chunks} chunks"
    )
    if job.errors:
        text += "; " + "; ".join(f"{doc}: {why}" for doc, why in sorted(job.errors.items()))
    return Outcome(text, job)


async def namespaces(call: Call, _: NoArgs) -> Outcome:
    listed = await list_namespaces(call.caller, call.quotas)
    text = (
        ", ".join(f"{n.namespace} ({n.documents} documents)" for n in listed.namespaces)
        or "no namespaces yet: `ingest` makes one"
    )
    return Outcome(text, listed)


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "ask",
            "Ask ragbus",
            "Answer a question from the indexed documents, citing them as [n]. Runs the whole "
            "pipeline (classification, four search channels, fusion, generation, critic); its "
            "phases arrive as progress notifications. Pass `session_id` for follow-ups.",
            AskArgs,
            AskResult,
            ask,
            read_only=False,
        ),
        Tool(
            "search",
            "Search the documents",
            "Find the passages that best match a query (the search channels fused, no answer "
            "written): each with its document, title, namespace, page where known, and score.",
            SearchArgs,
            SearchResult,
            search,
            read_only=True,
        ),
        Tool(
            "ingest",
            "Add documents",
            "Index text documents, or files sent as base64 (PDF, Word, PowerPoint, HTML, scans, "
            "Markdown, text), into a namespace, as one ingest job: answers its job id at once; "
            "`job_status` tells when it is done.",
            IngestArgs,
            IngestAccepted,
            ingest,
            read_only=False,
        ),
        Tool(
            "job_status",
            "An ingest job's progress",
            "An ingest job's status (running, completed, failed) and counts, with the reason "
            "for each document that failed.",
            JobArgs,
            JobView,
            job_status,
            read_only=True,
        ),
        Tool(
            "namespaces",
            "List namespaces",
            "The caller's namespaces and how many documents each keeps.",
            NoArgs,
            Namespaces,
            namespaces,
            read_only=True,
        ),
    )
}


# -- refusals in words ---------------------------------------------------------------------

_STATUS_WORDS = {
    400: "bad request",
    401: "unauthorized",
    404: "not found",
    409: "conflict",
    413: "too large",
    415: "unsupported file",
    422: "invalid",
    429: "too many requests",
    503: "unavailable",
    507: "insufficient storage",
}


def refusal(exc: HTTPException) -> str:
    """A route's refusal as a tool error's message: its status, its reason, and for a 429 (or
    a 503) when to try again."""
    message = f"{exc.status_code} {_STATUS_WORDS.get(exc.status_code, 'error')}: {exc.detail}"
    retry = (exc.headers or {}).get("Retry-After")
    if retry:
        message += f" (retry after {retry} s)"
    return message


def _where(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "arguments"


def invalid(exc: ValidationError | RequestValidationError) -> str:
    """422 with each field and what is wrong with it, as the API's validation errors say it."""
    described = [
        f"{_where(e.get('loc', ()))}: {str(e.get('msg', 'invalid')).removeprefix('Value error, ')}"
        for e in exc.errors()
    ]
    return "422 invalid: " + "; ".join(described)


async def run_tool(tool: Tool, call: Call, arguments: dict[str, Any]) -> Outcome:
    """Validate the arguments and run the tool; `ToolRefused` with the reason for anything the
    caller can act on (its arguments, a route's refusal, Redis out of reach)."""
    try:
        args = tool.arguments.model_validate(arguments)
    except ValidationError as exc:
        raise ToolRefused(invalid(exc)) from None
    try:
        return await tool.run(call, args)
    except HTTPException as exc:
        raise ToolRefused(refusal(exc)) from None
    except RequestValidationError as exc:
        raise ToolRefused(invalid(exc)) from None
    except UNAVAILABLE_ERRORS as exc:
        log.warning("redis_unavailable", tool=tool.name, error=str(exc))
        raise ToolRefused(
            f"503 unavailable: the state store (Redis) is unavailable ({exc}); try again shortly"
        ) from None
