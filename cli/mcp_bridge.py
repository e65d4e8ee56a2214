"""`ragbus mcp`'s bridge: an MCP server on stdio that forwards every call to the API's MCP
endpoint (`/mcp`, `api.mcp_door`) with the official SDK's client, so there is one
implementation of the tools and resources, the API's, and every question through stdio is a
request of the API's caller like any other (its key, its tenant, its quota).

Forwarded: `tools/list`, `tools/call` (the API's progress notifications passed on to the
stdio client when it gave a progress token), `resources/list`, `resources/templates/list` and
`resources/read`; an error the API's server answers comes back as that error.

The connection to the API is made at start and again whenever it was lost (the endpoint is
stateless: nothing is lost with it), in a task of its own that owns the client's task groups.
An API that does not answer, or refuses the key, fails the call with one sentence naming the
URL and what fixes it; it never ends the stdio server. Logs go to stderr: stdout is the
protocol's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio
import httpx2
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from infra.logging import get_logger
from infra.runtime.services import redacted

log = get_logger(__name__)

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)

MCP_PATH = "/mcp"
KEY_HINT = "pass the key with --token or RAGBUS_API_TOKEN (in `tenants` mode, the tenant's API key)"
HTTP_REFUSAL = "Server returned an error response"
"""What the SDK's client says of an HTTP error answer that is no JSON-RPC error."""
LOST = (httpx2.HTTPError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)
"""A connection to the API lost."""
API_HINT = "is `ragbus up` running? Point at another API with --api or RAGBUS_API_URL"


def endpoint(api: str) -> str:
    """The MCP endpoint of the API at `api` (given as the API's base URL, or as the endpoint)."""
    base = api.rstrip("/")
    return base if base.endswith(MCP_PATH) else base + MCP_PATH


class Upstream:
    """The SDK's client of the API's endpoint, connected when first needed and again after the
    connection was lost."""

    def __init__(self, url: str, token: str | None, tasks: TaskGroup) -> None:
        self.url = url
        self.shown = redacted(url)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.tasks = tasks
        self._lock = anyio.Lock()
        self._client: Client | None = None
        self._stop: anyio.Event | None = None
        self.refused: str | None = None
        """The last HTTP refusal of the endpoint (401, 429, 503…), in words: the SDK's client
        reports it only as `Server returned an error response`."""

    async def _note_refusal(self, response: httpx2.Response) -> None:
        if response.status_code < 400 or response.status_code == 404:
            return
        if not response.headers.get("content-type", "").startswith("application/json"):
            self.refused = f"HTTP {response.status_code}"
            return
        try:
            body = json.loads(await response.aread())
            message = body["error"]["message"]
        except (ValueError, KeyError, TypeError):
            return  # a JSON-RPC error: the SDK reports it as it is
        retry = response.headers.get("retry-after")
        self.refused = f"{response.status_code}: {message}" + (
            f" (retry after {retry} s)" if retry else ""
        )

    async def client(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._stop = anyio.Event()
                try:
                    self._client = await self.tasks.start(self._own, self._stop)
                except Exception as exc:
                    error = _found(exc, MCPError)
                    raise (
                        self.unreachable(exc) if error is None else self.explained(error)
                    ) from None
                log.info("mcp_bridge_connected", url=self.shown)
            return self._client

    async def _own(self, stop: anyio.Event, *, task_status: TaskStatus[Client]) -> None:
        """Hold one connection: enter the client here, where its task groups live, until it is
        dropped; a connection that fails is logged, never raised into the server."""
        started = False
        try:
            http = create_mcp_http_client(headers=self.headers)
            http.event_hooks["response"].append(self._note_refusal)
            async with (
                http,
                Client(streamable_http_client(self.url, http_client=http), cache=None) as client,
            ):
                task_status.started(client)
                started = True
                await stop.wait()
        except Exception as exc:
            if not started:
                raise
            log.warning("mcp_bridge_connection_lost", url=self.shown, error=repr(exc))
        finally:
            if self._stop is stop:
                self._client, self._stop = None, None

    def drop(self) -> None:
        """Close the connection; the next call makes a new one."""
        if self._stop is not None:
            self._stop.set()
        self._client, self._stop = None, None

    def explained(self, exc: MCPError) -> MCPError:
        """An error of the API's server as it is; a refusal at the HTTP level in words."""
        if (
            exc.code == types.INTERNAL_ERROR
            and exc.error.message == "Server returned an error response"
        ):
            refused = self.refused or "an error"
            hint = f": {KEY_HINT}" if refused.startswith(("401", "403")) else ""
            return MCPError(
                types.INTERNAL_ERROR, f"the ragbus API at {self.shown} answered {refused}{hint}"
            )
        if exc.code == types.METHOD_NOT_FOUND and exc.error.message == "Not Found":
            return MCPError(
                types.INTERNAL_ERROR,
                f"what answers at {self.shown} is not ragbus's MCP endpoint (404): point --api "
                "at the ragbus API",
            )
        return exc

    def unreachable(self, exc: BaseException) -> MCPError:
        cause = _found(exc, httpx2.HTTPError) or _found(exc, OSError) or exc
        what = "the connection was lost" if isinstance(cause, MCPError) else type(cause).__name__
        return MCPError(
            types.INTERNAL_ERROR, f"no ragbus API answers at {self.shown} ({what}; {API_HINT})"
        )

    async def call(self, send: Callable[[Client], Awaitable[T]]) -> T:
        client = await self.client()
        try:
            return await send(client)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self.drop()
                raise self.unreachable(exc) from None
            raise self.explained(exc) from None
        except (
            httpx2.HTTPError,
            OSError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ) as exc:
            self.drop()
            raise self.unreachable(exc) from None


def _found(exc: BaseException, kind: type[E]) -> E | None:
    """The first `kind` in an exception or the groups it is in (a task group's failure)."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for member in exc.exceptions:
            if (found := _found(member, kind)) is not None:
                return found
    return None


def bridge(upstream: Upstream, instructions: str | None = None) -> Server[Upstream]:
    """The stdio server, forwarding to `upstream`."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Server[Upstream]) -> AsyncIterator[Upstream]:
        yield upstream

    async def list_tools(
        ctx: ServerRequestContext[Upstream], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        cursor = params.cursor if params else None
        return await ctx.lifespan_context.call(
            lambda c: c.list_tools(cursor=cursor, cache_mode="bypass")
        )

    async def call_tool(
        ctx: ServerRequestContext[Upstream], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        return await ctx.lifespan_context.call(
            lambda c: c.call_tool(params.name, params.arguments, progress_callback=progress)
        )

    async def list_resources(
        ctx: ServerRequestContext[Upstream], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cursor = params.cursor if params else None
        return await ctx.lifespan_context.call(
            lambda c: c.list_resources(cursor=cursor, cache_mode="bypass")
        )

    async def list_templates(
        ctx: ServerRequestContext[Upstream], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        cursor = params.cursor if params else None
        return await ctx.lifespan_context.call(
            lambda c: c.list_resource_templates(cursor=cursor, cache_mode="bypass")
        )

    async def read_resource(
        ctx: ServerRequestContext[Upstream], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        return await ctx.lifespan_context.call(lambda c: c.read_resource(uri, cache_mode="bypass"))

    return Server(
        "ragbus",
        title="ragbus",
        description=f"ragbus's MCP tools and documents, from the API at {upstream.shown}",
        instructions=instructions,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


async def serve_stdio(url: str, token: str | None) -> None:
    """Serve the bridge on this process's stdin and stdout until the client closes them."""
    log.info("mcp_bridge_started", url=redacted(url))
    async with anyio.create_task_group() as tasks:
        upstream = Upstream(url, token, tasks)
        instructions = None
        try:  # told now, on stderr, when it cannot be reached; each call tries again
            instructions = (await upstream.client()).instructions
        except MCPError as exc:
            log.warning("mcp_bridge_not_connected", url=upstream.shown, reason=exc.error.message)
        server = bridge(upstream, instructions)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        upstream.drop()
        tasks.cancel_scope.cancel()
