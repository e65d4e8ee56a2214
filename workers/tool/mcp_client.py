"""The tool worker's client of the operator's MCP servers (`infra.config.mcp`), with the SDK.

`McpManager` runs one supervisor task per server (`McpConnection`), started as the worker
warms up and stopped as it stops (`Resources.on_warm_up` / `on_close`, in
`workers.tool.router`). A supervisor:
- connects (stdio: the program started by `mcp.client.stdio`, in the sandbox unless trusted,
  `workers.tool.sandbox_server`; HTTP: `mcp.client.streamable_http`, with the entry's headers
  and bearer token), negotiates the protocol and lists the tools, page by page, within
  `RAGBUS_MCP_CONNECT_TIMEOUT_S`;
- registers them as `<prefix>__<tool>` with their own input schema (`infra.tool_routes`:
  a name that cannot fit OpenAI's pattern is skipped with a log line; `tools` filters);
- lists them again when the server says they changed (`notifications/tools/list_changed`);
- notices a broken connection (a stdio server's end of output at once; a failed call or a
  check every `PING_S` otherwise), takes the server's tools out of the registry at once (the
  others' and the request in progress go on), and connects again after 1 s, 2 s, 4 s … up
  to `RAGBUS_MCP_RECONNECT_MAX_S`;
- never starts an untrusted stdio server outside bubblewrap: it logs why and stays down.

A call is bounded by the server's timeout; its result becomes text
(`workers.tool.mcp_results`); an `isError` result, a protocol error, a timeout or a lost
connection is a `ToolError` (a failed outcome), never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client import Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from infra.config.mcp import McpServer
from infra.logging import get_logger
from infra.runtime.parent_death import stopping_with_parent
from infra.settings import Settings
from infra.tool_routes import prefixed_name
from workers.tool.mcp_results import result_text
from workers.tool.mcp_transport import reason, watched
from workers.tool.registry import Tool, ToolError, ToolHandler, ToolRegistry
from workers.tool.sandbox import Sandbox, SandboxUnavailable
from workers.tool.sandbox_procs import SANDBOX_UIDS, UidPool, drops_privileges
from workers.tool.sandbox_server import SandboxRefused, ServerLimits, sandboxed

log = get_logger(__name__)

PING_S: Final = 15.0
"""How often an idle connection is checked, by listing the tools (a stdio server's exit is
seen at once)."""
FIRST_RETRY_S: Final = 1.0
MAX_PAGES: Final = 100
MAX_DESCRIPTION_CHARS: Final = 1024
CLIENT_INFO: Final = types.Implementation(name="ragbus", version="1")


class McpConnection:
    """One server: its supervisor (`supervise`) and its tools' handler (`call`)."""

    def __init__(
        self,
        name: str,
        config: McpServer,
        settings: Settings,
        registry: ToolRegistry,
        sandbox: Sandbox | None,
        uids: UidPool | None,
        ping_s: float = PING_S,
    ) -> None:
        self.name = name
        self.config = config
        self.settings = settings
        self.registry = registry
        self.sandbox = sandbox
        self.uids = uids
        self.ping_s = ping_s
        self.prefix = config.prefix_for(name)
        self.timeout_s = config.timeout_s or settings.mcp_call_timeout_s
        self.max_chars = config.max_result_chars or settings.mcp_max_result_chars
        self.sandboxed = config.stdio and not config.trusted
        self.first_attempt = asyncio.Event()
        """Set once the first connection has been made or has failed."""
        self.connections = 0
        self._client: Client | None = None
        self._wake = asyncio.Event()
        self._relist = False
        self._scope: anyio.CancelScope | None = None
        self._stopping = False

    # ---- the connection -------------------------------------------------------------------

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Transport]:
        config = self.config
        if config.url is not None:
            timeout = httpx2.Timeout(self.settings.mcp_connect_timeout_s, read=300.0)
            async with httpx2.AsyncClient(headers=config.http_headers(), timeout=timeout) as http:
                yield streamable_http_client(config.url, http_client=http)
            return
        assert config.command is not None
        if config.trusted:  # a worker SIGKILLed takes it along (a sandboxed one dies with bwrap)
            command, args = stopping_with_parent(config.command, config.args)
            params = StdioServerParameters(
                command=command, args=args, env=config.env or None, cwd=config.cwd
            )
            yield stdio_client(params)
            return
        await self._check_isolation()
        limits = ServerLimits(data_mb=self.settings.mcp_sandbox_memory_mb)
        async with sandboxed(
            config.command, config.args, config.env, config.cwd, uids=self.uids, limits=limits
        ) as launch:
            yield stdio_client(StdioServerParameters(command=launch.command, args=launch.args))

    async def _check_isolation(self) -> None:
        if self.sandbox is None:
            raise SandboxRefused("this tool worker has no sandbox")
        try:
            isolation = await self.sandbox.ready()
        except SandboxUnavailable as exc:
            raise SandboxRefused(str(exc)) from None
        if isolation != "bwrap":
            raise SandboxRefused(
                f"the sandbox here is {isolation!r}, not bubblewrap, and an untrusted stdio "
                "server runs only under bubblewrap (install bubblewrap, or mark it trusted)"
            )

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def _register(self, listed: list[types.Tool]) -> list[str]:
        wanted = set(self.config.tools) if self.config.tools is not None else None
        tools: dict[str, Tool] = {}
        for tool in listed:
            if wanted is not None and tool.name not in wanted:
                continue
            name = prefixed_name(self.prefix, tool.name)
            if name is None or name in tools:
                log.warning(
                    "mcp_tool_skipped",
                    server=self.name,
                    tool=tool.name[:100],
                    reason="its name does not fit ^[A-Za-z0-9_-]{1,64}$ after the prefix"
                    if name is None
                    else f"another tool of the server is also {name!r}",
                )
                continue
            description = (tool.description or tool.title or tool.name)[:MAX_DESCRIPTION_CHARS]
            tools[name] = Tool(
                name=name,
                description=description,
                parameters=dict(tool.input_schema),
                handler=self._handler(tool.name),
                server=self.name,
                timeout_s=self.timeout_s + 1.0,  # the call's own limit answers first
            )
        added = self.registry.replace_server(self.name, tools.values())
        log.info("mcp_tools_listed", server=self.name, listed=len(listed), tools=added)
        return added

    def _drop_tools(self) -> None:
        removed = [tool.name for tool in self.registry.server_tools(self.name)]
        if removed:
            self.registry.replace_server(self.name, [])
            log.info("mcp_tools_removed", server=self.name, tools=len(removed))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist = True
            self._wake.set()
        elif isinstance(message, Exception):
            log.warning("mcp_transport_error", server=self.name, error=reason(message))
            self._wake.set()  # a check says whether the connection still works

    async def _session(self) -> None:
        """One connection, from connecting to its end (returns or raises when it ends)."""
        ended = asyncio.Event()
        connect_s = self.settings.mcp_connect_timeout_s
        with anyio.CancelScope(deadline=anyio.current_time() + connect_s) as connecting:
            async with self._transport() as transport:
                client = Client(
                    watched(transport, ended),
                    cache=None,
                    message_handler=self._on_message,
                    client_info=CLIENT_INFO,
                )
                async with client:
                    self._relist = False
                    tools = self._register(await self._list_tools(client))
                    connecting.deadline = math.inf
                    self._client = client
                    self.connections += 1
                    self.first_attempt.set()
                    log.info(
                        "mcp_server_connected",
                        server=self.name,
                        transport="stdio" if self.config.stdio else "http",
                        sandboxed=self.sandboxed,
                        protocol=client.protocol_version,
                        tools=len(tools),
                    )
                    try:
                        async with anyio.create_task_group() as group:
                            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                                group.start_soon(self._listen, client)
                            await self._watch(client, ended)
                    finally:
                        self._client = None
                        self._drop_tools()
        if connecting.cancelled_caught:
            raise TimeoutError(f"no answer within {connect_s:g} s (RAGBUS_MCP_CONNECT_TIMEOUT_S)")

    async def _listen(self, client: Client) -> None:
        """A 2026-07-28 server tells of changed tools on a subscription, not a notification;
        one that ends is opened again (and the tools listed again: changes were missed)."""
        opened = 0
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    if opened:
                        self._relist = True
                        self._wake.set()
                    opened += 1
                    async for _ in subscription:
                        self._relist = True
                        self._wake.set()
            except ListenNotSupportedError:
                return
            except Exception as exc:
                if isinstance(exc, MCPError) and exc.code == types.METHOD_NOT_FOUND:
                    return  # the server has no subscriptions: its tools are checked anyway
                log.info("mcp_listen_ended", server=self.name, reason=reason(exc))
                self._wake.set()  # a check says whether the connection still works
            await anyio.sleep(self.ping_s)

    async def _watch(self, client: Client, ended: asyncio.Event) -> None:
        """Until the connection breaks (raises): relist when told, check it when idle."""
        while True:
            with anyio.move_on_after(self.ping_s):
                await self._wake.wait()
            self._wake.clear()
            if ended.is_set():
                raise ConnectionError("the server closed the connection")
            with anyio.fail_after(self.settings.mcp_connect_timeout_s):
                if self._relist:
                    self._relist = False
                    self._register(await self._list_tools(client))
                else:  # a question any server answers (2026-07-28 has no ping)
                    await client.list_tools()

    async def supervise(self) -> None:
        """Connect, and connect again whenever the connection ends, until stopped."""
        delay = FIRST_RETRY_S
        with anyio.CancelScope() as self._scope:
            if self._stopping:
                self._scope.cancel()
            while True:
                started = time.monotonic()
                try:
                    await self._session()
                except SandboxRefused as exc:
                    log.error("mcp_server_not_started", server=self.name, reason=str(exc))
                    self.first_attempt.set()
                    return
                except Exception as exc:
                    log.warning(
                        "mcp_server_disconnected",
                        server=self.name,
                        reason=reason(exc),
                        retry_in_s=delay,
                    )
                self.first_attempt.set()
                if time.monotonic() - started > self.settings.mcp_reconnect_max_s:
                    delay = FIRST_RETRY_S  # it ran a good while: this is a new failure
                await anyio.sleep(delay)
                delay = min(delay * 2, self.settings.mcp_reconnect_max_s)

    def stop(self) -> None:
        self._stopping = True
        if self._scope is not None:
            self._scope.cancel()

    # ---- the calls ------------------------------------------------------------------------

    def _handler(self, tool: str) -> ToolHandler:
        async def handler(**arguments: Any) -> str:
            return await self.call(tool, arguments)

        return handler

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        client = self._client
        shown = prefixed_name(self.prefix, tool) or tool
        if client is None:
            raise ToolError(f"the MCP server {self.name!r} is not connected")
        try:
            with anyio.fail_after(self.timeout_s):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            raise ToolError(f"{shown} took longer than {self.timeout_s:g} s") from None
        except Exception as exc:
            self._wake.set()  # the connection may be gone: the supervisor checks
            message = getattr(getattr(exc, "error", None), "message", None) or reason(exc)
            raise ToolError(f"the MCP server {self.name!r} failed the call: {message}") from None
        return result_text(result, self.max_chars)


class McpManager:
    """Every configured server's connection: started and stopped with the tool worker."""

    def __init__(
        self,
        servers: Mapping[str, McpServer],
        settings: Settings,
        registry: ToolRegistry,
        sandbox: Sandbox | None,
        *,
        ping_s: float = PING_S,
    ) -> None:
        self.servers = dict(servers)
        uids = UidPool(reversed(SANDBOX_UIDS)) if drops_privileges() else None
        self.connections = {
            name: McpConnection(name, config, settings, registry, sandbox, uids, ping_s)
            for name, config in self.servers.items()
        }
        self.settings = settings
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start every supervisor and wait, at most the connect timeout, for their first
        connection (a server that is slow or down joins later, its tools absent meanwhile)."""
        if self._tasks or not self.connections:
            return
        for name, connection in self.connections.items():
            self._tasks.append(asyncio.create_task(connection.supervise(), name=f"mcp-{name}"))
        log.info("mcp_servers_starting", servers=sorted(self.connections))
        firsts = [asyncio.ensure_future(c.first_attempt.wait()) for c in self.connections.values()]
        _, pending = await asyncio.wait(firsts, timeout=self.settings.mcp_connect_timeout_s + 2)
        for waiting in pending:
            waiting.cancel()

    async def stop(self) -> None:
        """Stop every server (its process killed) and take its tools out."""
        for connection in self.connections.values():
            connection.stop()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=15.0)
            for task in pending:  # a shutdown that hangs: cancel it outright
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks.clear()
            log.info("mcp_servers_stopped", servers=sorted(self.connections))
