"""MCP's tools, each what a `/v1` route does, said in MCP's terms (`api.mcp_door` serves them):

- `ask`: one request on the bus (`api.asking.Door`: the quota, the record, the saga, the trace,
  the events), its phases sent as progress notifications while it runs; its answer with `[n]`
  citations, or a tool error with the reason it failed;
- `search`: the same, in `mode: "retrieve"` (the saga stops after fusion): the fused passages,
  best first, from the request's record;
- `ingest`: text documents or files as `POST /v1/documents` takes them (`api.mcp_ingest`);
  its job;
- `job_status`: `GET /v1/ingest/{job_id}` (`api.jobs.get_job`), the caller's jobs only;
- `namespaces`: `GET /v1/namespaces` (`api.catalogue.list_namespaces`).

Each acts for the caller of the HTTP request that carried it (`api.mcp_call.Call`). A refusal
(the `HTTPException` the route would answer: 404, 409, 413, 415, 422, 429 with when to retry,
503) is a tool error (`ToolRefused`), whose message the model reads, never a protocol error.
Their arguments and results are `api.mcp_schemas`.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

from pydantic import ValidationError

from api.catalogue import list_namespaces
from api.jobs import get_job
from api.mcp_call import Call, Outcome, Tool, ToolRefused, invalid
from api.mcp_ingest import ingest
from api.mcp_schemas import (
    AskArgs,
    AskResult,
    CitationOut,
    IngestArgs,
    JobArgs,
    NoArgs,
    Passage,
    SearchArgs,
    SearchResult,
)
from api.schemas import (
    IngestAccepted,
    JobView,
    Namespaces,
    QueryRequest,
)
from contracts.tenancy import caller_namespace
from infra.logging import get_logger

log = get_logger(__name__)


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
    followed = call.door.follow(call.caller, request_id)
    phases = 0
    await call.progress(0, f"request {request_id} submitted")
    async with aclosing(followed.each()) as events:
        async for event in events:
            if event.get("type") == "phase":
                phases += 1
                await call.progress(phases, phase_line(event.get("data") or {}))
    status = followed.status or "unknown"
    await call.progress(phases + 1, f"request {request_id} {status}")
    answer = followed.answer.model_dump(mode="json") if followed.answer is not None else {}
    error = followed.error.model_dump(mode="json") if followed.error is not None else {}
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
    body = _query(
        query=args.question,
        namespaces=args.namespaces,
        session_id=args.session_id,
        filter=args.filter,
    )
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
    body = _query(
        query=args.query,
        namespaces=args.namespaces,
        top_k=args.top_k,
        filter=args.filter,
        mode="retrieve",
    )
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


# -- jobs and namespaces ------------------------------------------------------------------


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
