"""MCP's door: ragbus as an MCP server over streamable HTTP at `/mcp` on the API (and over
stdio through `ragbus mcp`, a bridge to this endpoint: `cli.mcp`), on the official SDK's
low-level `Server`.

- Every HTTP request to `/mcp` is authenticated before the MCP SDK sees it, as every `/v1`
  route is (`api.auth.caller_of`: the bearer key, the mode, the wrong keys counted): 401 with
  `WWW-Authenticate`, or 429 with `Retry-After`, as HTTP answers, which MCP clients read as
  HTTP auth; the caller rides in the ASGI scope to the tools (`CALLER`). Every request: a key
  revoked between two calls is refused at the next.
- Stateless: each POST is one self-contained exchange, with no MCP session kept in the
  process, so any API process behind a load balancer serves any call, and a restart loses
  nothing. Responses are SSE rather than plain JSON, so that a call's progress notifications
  (`ask`'s and `search`'s phases) travel ahead of its result on the same response.
- Tools: `api.mcp_tools`. Resources: a document as `ragbus://documents/{namespace}/{id}` (the
  id percent-encoded): its original file, as text for a text file and as a blob otherwise, up
  to `MAX_RESOURCE_BYTES` (`GET /v1/documents/{id}` serves any size); a document sent as text
  (the stores keep its passages, not the text as sent) reads as its catalogue entry.
  `resources/list` pages through the caller's catalogue (`api.catalogue`). Another tenant's
  document answers exactly as a missing one: every name is the caller's own namespace.

The SDK's session manager runs inside the API's lifespan (`McpDoor.running`, which `api.app`
enters), one per lifespan.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, unquote

import mcp_types as types
from fastapi import FastAPI, HTTPException
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.auth import Caller, caller_of
from api.catalogue import readable_ids, require_readable
from api.documents import get_files
from api.mcp_call import Call, Outcome, ToolRefused, refusal, run_tool
from api.mcp_tools import TOOLS
from api.routes import take_submission
from api.schemas import _namespace
from contracts.tenancy import caller_namespace, store_namespace
from infra.logging import get_logger
from infra.runtime.files import FileUnavailable
from infra.runtime.redis_client import RETRY_AFTER_S, UNAVAILABLE_ERRORS
from infra.settings import Settings
from infra.tenancy.quotas import Quotas

log = get_logger(__name__)

PATH = "/mcp"
CALLER = "ragbus.mcp_caller"
"""Where the endpoint leaves the authenticated caller in the ASGI scope, for the tools."""
DOCUMENT_URI = "ragbus://documents/"
DOCUMENT_TEMPLATE = DOCUMENT_URI + "{namespace}/{document_id}"
MAX_RESOURCE_BYTES = 4 * 1024 * 1024
"""A document's original read as a resource at most; a larger one is named, with its URL."""
PAGE_SIZE = 100
"""Documents a `resources/list` page lists."""
TEXT_TYPES = ("text/", "application/json", "application/xml")

INSTRUCTIONS = (
    "ragbus answers questions from the documents indexed in it, citing them as [n]. Use `ask` "
    "for an answer, `search` for the matching passages alone, `namespaces` to see where "
    "documents are kept, `ingest` to add documents (then `job_status` until it completes). "
    "A document is the resource ragbus://documents/{namespace}/{document_id}."
)


def document_uri(namespace: str, document_id: str) -> str:
    return f"{DOCUMENT_URI}{namespace}/{quote(document_id, safe='')}"


def _schema(model: type[Any]) -> dict[str, Any]:
    """A model's JSON Schema with its `$defs` inlined: some clients resolve no references."""
    schema: dict[str, Any] = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                merged = {
                    **defs[ref.removeprefix("#/$defs/")],
                    **{k: v for k, v in node.items() if k != "$ref"},
                }
                return inline(merged)
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined


class McpDoor:
    """The MCP server and its HTTP endpoint (an ASGI app routed at `PATH`)."""

    def __init__(self, version: str = "") -> None:
        self.server: Server[Any] = Server(
            "ragbus",
            version=version,
            title="ragbus",
            description="Event-driven agentic RAG over NATS JetStream.",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
        )
        self._tools = [
            types.Tool(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                input_schema=_schema(tool.arguments),
                output_schema=_schema(tool.result),
                annotations=types.ToolAnnotations(
                    title=tool.title, read_only_hint=tool.read_only, open_world_hint=False
                ),
            )
            for tool in TOOLS.values()
        ]
        self._manager: StreamableHTTPSessionManager | None = None

    def mount(self, app: FastAPI) -> None:
        """Route `PATH` (every method) to the endpoint; a plain route, so the OpenAPI document
        does not list it."""
        app.router.routes.append(Route(PATH, self, include_in_schema=False))

    @asynccontextmanager
    async def running(self, settings: Settings) -> AsyncIterator[None]:
        """The SDK's session manager for one lifespan of the API. Bodies are bounded by the
        API's own limit for JSON (`api.limits.BodyLimit`, RAGBUS_MAX_JSON_BYTES), files sent to
        `ingest` included."""
        manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            json_response=False,
            max_request_body_size=settings.max_json_bytes,
        )
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager
        if manager is None:
            await _error(503, "the MCP server is not running (the API is starting or stopping)")(
                scope, receive, send
            )
            return
        try:
            caller = await caller_of(Request(scope, receive))
        except HTTPException as exc:
            await _error(exc.status_code, str(exc.detail), exc.headers)(scope, receive, send)
            return
        except UNAVAILABLE_ERRORS as exc:
            log.warning("redis_unavailable", path=PATH, error=str(exc))
            headers = {"Retry-After": str(RETRY_AFTER_S)}
            message = f"the state store (Redis) is unavailable: {exc}"
            await _error(503, message, headers)(scope, receive, send)
            return
        scope[CALLER] = caller
        await manager.handle_request(scope, receive, send)

    # -- tools ---------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"no tool {params.name!r}: {', '.join(TOOLS)}")
        request, caller = _caller(ctx)

        async def progress(done: float, message: str) -> None:
            await ctx.session.report_progress(done, None, message)

        try:
            outcome: Outcome = await run_tool(
                tool, Call(caller, request, progress), params.arguments or {}
            )
        except ToolRefused as exc:
            log.info("mcp_tool_refused", tool=tool.name, tenant=caller.tenant, reason=str(exc))
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(exc))], is_error=True
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.text)],
            structured_content=outcome.structured.model_dump(mode="json"),
        )

    # -- resources -----------------------------------------------------------------------

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="document",
                    title="A document",
                    uri_template=DOCUMENT_TEMPLATE,
                    description="A document by its namespace and id (percent-encoded): its "
                    f"original file (text, or a blob; up to {MAX_RESOURCE_BYTES:,} bytes), or, "
                    "for a document sent as text, its catalogue entry.",
                )
            ]
        )

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        """The caller's documents, by namespace and id, a page at a time (the cursor: how
        many came before)."""
        request, caller = _caller(ctx)
        quotas = Quotas(request.app.state.redis)
        start = _offset(params.cursor if params else None)
        listed: list[types.Resource] = []
        seen = 0
        for space in sorted(await quotas.namespaces(caller.tenant)):
            namespace = caller_namespace(caller.tenant, space)
            documents = await quotas.documents(caller.tenant, space, limit=2**31)
            readable = await readable_ids(
                request.app.state.redis, caller, space, [d.document_id for d in documents]
            )
            for doc in documents:
                if doc.document_id not in readable:  # a user's: only what it may read
                    continue
                seen += 1
                if start < seen <= start + PAGE_SIZE:
                    listed.append(
                        types.Resource(
                            uri=document_uri(namespace, doc.document_id),
                            name=f"{namespace}/{doc.document_id}",
                            title=doc.document_id,
                            description=f"document {doc.document_id!r} in namespace {namespace!r}",
                            size=doc.bytes,
                        )
                    )
        after = start + len(listed)
        next_cursor = str(after) if after < seen else None
        return types.ListResourcesResult(resources=listed, next_cursor=next_cursor)

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        request, caller = _caller(ctx)
        uri = str(params.uri)
        namespace, document_id = _parse_document_uri(uri)
        state = request.app.state
        space = store_namespace(caller.tenant, namespace)
        try:
            await take_submission(Quotas(state.redis), caller)  # as `GET /v1/documents/{id}`
        except HTTPException as exc:
            raise MCPError(types.INVALID_REQUEST, refusal(exc), {"uri": uri}) from None
        try:
            await require_readable(state.redis, caller, space, document_id, namespace)
        except HTTPException:  # a user's, of a document it may not read: as a missing one
            raise _not_found(
                uri, f"no document {document_id!r} in namespace {namespace!r}"
            ) from None
        files = await get_files(request, state.js, state.settings)
        original = await files.open_original(space, document_id)
        if original is not None:
            if original.size > MAX_RESOURCE_BYTES:
                return _described(
                    uri,
                    namespace,
                    document_id,
                    original.size,
                    note=f"its original {original.filename} ({original.media_type}) is "
                    f"{original.size:,} bytes, over the {MAX_RESOURCE_BYTES:,} a resource "
                    f"carries here: GET /v1/documents/{quote(document_id, safe='')}"
                    f"?namespace={namespace} downloads it",
                )
            try:
                data = b"".join([chunk async for chunk in original.chunks])
            except FileUnavailable as exc:  # replaced or deleted while it was read
                raise MCPError(
                    types.INTERNAL_ERROR, f"{exc}: read it again", {"uri": uri}
                ) from None
            meta = {"filename": original.filename, "sha256": original.sha256}
            if original.media_type.startswith(TEXT_TYPES):
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
                else:
                    return types.ReadResourceResult(
                        contents=[
                            types.TextResourceContents(
                                uri=uri, text=text, mime_type=original.media_type, _meta=meta
                            )
                        ]
                    )
            return types.ReadResourceResult(
                contents=[
                    types.BlobResourceContents(
                        uri=uri,
                        blob=base64.b64encode(data).decode(),
                        mime_type=original.media_type,
                        _meta=meta,
                    )
                ]
            )
        kept = await Quotas(state.redis).kept_bytes(caller.tenant, space, document_id)
        if kept:
            return _described(
                uri,
                namespace,
                document_id,
                kept,
                note="sent as text: ragbus keeps its passages (the `search` tool finds them), "
                "not the text as it was sent, and it has no original file",
            )
        raise _not_found(uri, f"no document {document_id!r} in namespace {namespace!r}")


def _caller(ctx: ServerRequestContext[Any]) -> tuple[Request, Caller]:
    request = ctx.request
    caller = request.scope.get(CALLER) if isinstance(request, Request) else None
    if not isinstance(request, Request) or not isinstance(caller, Caller):  # never through /mcp
        raise MCPError(types.INTERNAL_ERROR, "no authenticated HTTP request carried this call")
    return request, caller


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    if not cursor.isdigit():
        raise MCPError(types.INVALID_PARAMS, f"not a cursor this server gave: {cursor[:64]!r}")
    return int(cursor)


def _not_found(uri: str, message: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message, {"uri": uri})


def _parse_document_uri(uri: str) -> tuple[str, str]:
    """`ragbus://documents/{namespace}/{document_id}` -> (namespace, document id); anything
    else, a namespace that is not one a caller can name, or no id, is not found."""
    if not uri.startswith(DOCUMENT_URI):
        raise _not_found(uri, f"no resource {uri[:200]!r}: documents are {DOCUMENT_TEMPLATE}")
    namespace, _, encoded = uri.removeprefix(DOCUMENT_URI).partition("/")
    document_id = unquote(encoded)
    try:
        _namespace(namespace)
    except ValueError:
        raise _not_found(uri, f"no namespace {namespace[:80]!r}") from None
    if not document_id or len(document_id) > 256 or any(c.isspace() for c in document_id):
        raise _not_found(uri, f"no document {document_id[:80]!r} in namespace {namespace!r}")
    return namespace, document_id


def _described(
    uri: str, namespace: str, document_id: str, size: int, *, note: str
) -> types.ReadResourceResult:
    entry = {"namespace": namespace, "document_id": document_id, "bytes": size, "note": note}
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(
                uri=uri, text=json.dumps(entry, indent=2), mime_type="application/json"
            )
        ]
    )


def _error(
    status_code: int, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The API's error shape (`api.app._error`) for a request refused before MCP sees it."""
    codes = {401: "unauthorized", 429: "too_many_requests", 503: "unavailable"}
    body = {"error": {"code": codes.get(status_code, f"http_{status_code}"), "message": message}}
    return JSONResponse(body, status_code=status_code, headers=headers)


__all__ = ["CALLER", "PATH", "McpDoor", "document_uri"]
