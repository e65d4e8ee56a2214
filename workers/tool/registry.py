"""Tools the agent may call: a name, a JSON-Schema for its arguments, an async handler.

Arguments are validated against the schema before a handler ever runs, and `call`
never raises for a tool's own failure: the caller always gets a `ToolOutcome`, with
`ok=False` and a sentence saying what went wrong.

Built-in tools implement the specs in `contracts.tools` (`@registry.implement(SPEC)`), so
what the generate worker offers a model and what this worker runs are one definition.
Tools from other packages arrive as plugins: an entry point in the group `ragbus.tools`
naming a callable that takes the registry and registers its tools
(`[project.entry-points."ragbus.tools"] mytools = "mypkg.tools:register"`). Plugins are
loaded at worker start, each with a log line; a plugin that fails to import or register
is logged and skipped, and leaves nothing half-registered.

Tools of the operator's MCP servers (`workers.tool.mcp_client`) come and go at run time:
each carries its `server`, and a server's tools are replaced or taken out together
(`replace_server`); listeners hear of every change (`on_change`: the catalog the generate
worker reads). A call names the servers its caller may use, and a tool of any other is
unknown to it, the error listing only the tools it may use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from collections.abc import Set as AbstractSet
from contextvars import ContextVar
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from contracts.access import Reader
from contracts.limits import MAX_MESSAGE_CHARS, MAX_TOOL_OUTPUT_CHARS
from contracts.models import ToolCall, ToolOutcome
from contracts.tenancy import DEFAULT_TENANT
from contracts.tools import INVALID_ARGUMENTS_KEY, CatalogTool, ToolSpec, openai_tool
from infra.logging import get_logger
from infra.tenancy.tool_access import allows
from workers.tool.schema import check_schema, validate

log = get_logger(__name__)

PLUGIN_GROUP = "ragbus.tools"

calling_tenant: ContextVar[str] = ContextVar("calling_tenant", default=DEFAULT_TENANT)
"""The tenant whose request runs the tool call in progress: tools that read data (`search`)
read only that tenant's (the tool worker sets it from the command)."""

calling_filter: ContextVar[dict[str, Any] | None] = ContextVar("calling_filter", default=None)
"""The metadata filter of the request whose tool call is in progress: the `search` tool
finds only passages of documents that pass it (the tool worker sets it from the command)."""

calling_reader: ContextVar[Reader | None] = ContextVar("calling_reader", default=None)
"""The tenant's user whose request runs the tool call in progress (`contracts.access`): the
`search` tool finds only passages of documents that user may read (None: the tenant's key)."""

ToolHandler = Callable[..., Awaitable[str]]
"""Called with the validated arguments as keywords; returns the tool's output text."""


class ToolError(Exception):
    """A tool's expected failure (bad input, domain error): its message goes to the caller."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    server: str | None = None
    """The MCP server the tool belongs to; None for a built-in or plugin tool."""
    timeout_s: float | None = None
    """This tool's own time limit; None: the registry's."""

    def openai_schema(self) -> dict[str, Any]:
        return openai_tool(self.name, self.description, self.parameters)

    def catalog_entry(self) -> CatalogTool:
        return CatalogTool(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            server=self.server,
        )


class ToolRegistry:
    def __init__(self, timeout_s: float = 10.0) -> None:
        self._tools: dict[str, Tool] = {}
        self.timeout_s = timeout_s
        self._listeners: list[Callable[[], object]] = []

    def on_change(self, listener: Callable[[], object]) -> None:
        """Call `listener` (no arguments) whenever tools are added or removed."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # a listener's bug must not undo a registration
                log.exception("tool_registry_listener_failed")

    def add(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        check_schema(tool.parameters)  # a bad schema is the tool author's bug: fail at start-up
        self._tools[tool.name] = tool
        self._changed()
        return tool

    def remove(self, name: str) -> Tool | None:
        """Take one tool out; None when there was none by that name."""
        tool = self._tools.pop(name, None)
        if tool is not None:
            self._changed()
        return tool

    def server_tools(self, server: str) -> list[Tool]:
        return [tool for tool in self.tools() if tool.server == server]

    def replace_server(self, server: str, tools: Iterable[Tool]) -> list[str]:
        """Make `tools` the whole of `server`'s tools at once (none: take them all out).
        A tool whose name another owner's tool holds, or whose schema is invalid, is skipped
        with a log line. Returns the names registered."""
        kept = {name: tool for name, tool in self._tools.items() if tool.server != server}
        added: list[str] = []
        for tool in tools:
            if tool.server != server:
                raise ValueError(f"tool {tool.name!r} is not server {server!r}'s")
            if tool.name in kept:
                log.warning("mcp_tool_skipped", server=server, tool=tool.name, reason="name taken")
                continue
            try:
                check_schema(tool.parameters)
            except Exception as exc:
                log.warning(
                    "mcp_tool_skipped",
                    server=server,
                    tool=tool.name,
                    reason=f"invalid input schema: {getattr(exc, 'message', exc)}",
                )
                continue
            kept[tool.name] = tool
            added.append(tool.name)
        before = {name for name, tool in self._tools.items() if tool.server == server}
        self._tools = kept
        if before or added:
            self._changed()
        return added

    def register(
        self, name: str, *, description: str, parameters: dict[str, Any]
    ) -> Callable[[ToolHandler], ToolHandler]:
        """Decorator: `@registry.register("calculator", description=..., parameters=...)`."""

        def decorate(handler: ToolHandler) -> ToolHandler:
            self.add(Tool(name, description, parameters, handler))
            return handler

        return decorate

    def implement(self, spec: ToolSpec) -> Callable[[ToolHandler], ToolHandler]:
        """Decorator: the handler of a tool whose spec is a wire contract."""
        return self.register(spec.name, description=spec.description, parameters=spec.parameters)

    def tools(self, servers: AbstractSet[str] | None = None) -> list[Tool]:
        """Every tool, or those a caller who may use `servers`' tools sees."""
        return [
            self._tools[name] for name in self.names if allows(servers, self._tools[name].server)
        ]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def openai_schema(self) -> list[dict[str, Any]]:
        """The tools in the OpenAI `tools=[...]` format, for an LLM generator to offer."""
        return [self._tools[name].openai_schema() for name in self.names]

    async def call(self, call: ToolCall, servers: AbstractSet[str] | None = None) -> ToolOutcome:
        """Run one call. `servers`: the MCP servers whose tools the caller may use (None:
        all); a tool of another server is unknown to it, and the error lists only the tools
        it may use."""
        t0 = time.perf_counter()

        def outcome(ok: bool, output: str = "", error: str | None = None) -> ToolOutcome:
            if error is not None and len(error) > MAX_MESSAGE_CHARS:
                error = error[: MAX_MESSAGE_CHARS - 3] + "..."
            return ToolOutcome(
                call_id=call.id,
                name=call.name,
                ok=ok,
                arguments=call.arguments,
                output=output[:MAX_TOOL_OUTPUT_CHARS],
                error=error,
                duration_ms=(time.perf_counter() - t0) * 1000,
            )

        tool = self._tools.get(call.name)
        if tool is None or not allows(servers, tool.server):
            known = ", ".join(t.name for t in self.tools(servers))
            return outcome(False, error=f"unknown tool '{call.name}' (known: {known})")
        if INVALID_ARGUMENTS_KEY in call.arguments:
            raw = str(call.arguments[INVALID_ARGUMENTS_KEY])[:200]
            return outcome(False, error=f"invalid arguments: not a JSON object: {raw!r}")
        problems = validate(call.arguments, tool.parameters)
        if problems:
            return outcome(False, error="invalid arguments: " + "; ".join(problems))
        timeout_s = tool.timeout_s or self.timeout_s
        try:
            output = await asyncio.wait_for(tool.handler(**call.arguments), timeout_s)
        except ToolError as exc:
            return outcome(False, error=str(exc))
        except TimeoutError:
            return outcome(False, error=f"{call.name} took longer than {timeout_s:g} s")
        except Exception as exc:  # a bug in a tool must not take the worker down
            log.exception("tool_crashed", tool=call.name)
            return outcome(False, error=f"{call.name} failed unexpectedly: {type(exc).__name__}")
        return outcome(True, output=output)


def load_plugins(registry: ToolRegistry, plugins: Iterable[EntryPoint] | None = None) -> list[str]:
    """Register the tools of every `ragbus.tools` entry point; returns the tool names added.

    Each plugin registers into a scratch registry first and is merged only when it loaded,
    registered and clashes with no tool already known: a broken plugin changes nothing.
    """
    added: list[str] = []
    found = list(entry_points(group=PLUGIN_GROUP) if plugins is None else plugins)
    for plugin in found:
        scratch = ToolRegistry(timeout_s=registry.timeout_s)
        try:
            register = plugin.load()
            register(scratch)
            clashes = [name for name in scratch.names if registry.get(name) is not None]
            if clashes:
                raise ValueError(f"tool name(s) already registered: {', '.join(clashes)}")
        except Exception as exc:
            log.error(
                "tool_plugin_skipped",
                plugin=plugin.name,
                target=plugin.value,
                error=f"{type(exc).__name__}: {exc}",
            )
            continue
        for tool in scratch.tools():
            registry.add(tool)
        added.extend(scratch.names)
        log.info("tool_plugin_loaded", plugin=plugin.name, target=plugin.value, tools=scratch.names)
    if not found:
        log.info("tool_plugins_none", group=PLUGIN_GROUP)
    return added
