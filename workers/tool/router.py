"""The tool worker on the bus: `rag.cmd.tool` in, `rag.res.tool` out.

As it warms up it chooses the sandbox's isolation, starts the operator's MCP servers
(`workers.tool.mcp_client`) and publishes its registry for the generate worker
(`infra.runtime.tool_catalog`); it stops both as the process stops. A command's calls run
with the tools its tenant may use (`infra.tenancy.tool_access`): another server's tool is as
unknown to it as a tool that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from faststream.nats import NatsRouter

from contracts.commands import ToolCommand
from contracts.enums import Phase, Step
from contracts.models import ToolCall, ToolOutcome
from contracts.results import ToolResult
from infra.config.mcp import McpServer
from infra.logging import get_logger
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.tool_catalog import CatalogPublisher
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router
from infra.settings import Settings
from infra.tenancy.tool_access import ToolAccess
from infra.tool_routes import route_calls, routed_servers
from workers.tool.calculator import register_calculator
from workers.tool.mcp_client import McpManager
from workers.tool.planner import plan_calls
from workers.tool.python_tool import register_python
from workers.tool.registry import (
    ToolRegistry,
    calling_filter,
    calling_reader,
    calling_tenant,
    load_plugins,
)
from workers.tool.sandbox import Sandbox
from workers.tool.sandbox_run import SandboxLimits
from workers.tool.search_tool import register_search

log = get_logger(__name__)


def sandbox_for(settings: Settings) -> Sandbox:
    limits = SandboxLimits(
        timeout_s=settings.sandbox_timeout_s,
        cpu_s=settings.sandbox_cpu_s,
        memory_mb=settings.sandbox_memory_mb,
        max_procs=settings.sandbox_max_procs,
    )
    return Sandbox(limits, settings.sandbox_isolation)


def default_registry(
    timeout_s: float = 10.0,
    *,
    resources: Resources | None = None,
    sandbox: Sandbox | None = None,
    plugins: bool = False,
) -> ToolRegistry:
    """The calculator always; `python` with a sandbox, `search` with resources; then the
    `ragbus.tools` plugins when asked."""
    registry = ToolRegistry(timeout_s=timeout_s)
    register_calculator(registry)
    if sandbox is not None:
        register_python(registry, sandbox)
    if resources is not None:
        register_search(registry, resources)
    if plugins:
        load_plugins(registry)
    return registry


def routed_calls(
    registry: ToolRegistry,
    query: str,
    routes: Mapping[str, McpServer],
    servers: AbstractSet[str] | None,
) -> list[ToolCall]:
    """The call the operator's routes plan for `query`, among the servers the caller may use."""
    usable = routed_servers(routes, servers)
    if not usable:
        return []
    schemas = {tool.name: tool.parameters for tool in registry.tools(servers) if tool.server}
    return route_calls(query, usable, schemas)


async def run_tools(
    registry: ToolRegistry,
    cmd: ToolCommand,
    *,
    servers: AbstractSet[str] | None = None,
    routes: Mapping[str, McpServer] | None = None,
) -> list[ToolOutcome]:
    """The explicit calls in order, or the planned one: the calculator's arithmetic, else the
    call an MCP server's route plans. A query with nothing to run gets one failed outcome
    that says so, never an empty list the generator must guess at. `servers`: the MCP
    servers whose tools the caller may use (None: all)."""
    calls = (
        cmd.calls
        or plan_calls(cmd.query)
        or routed_calls(registry, cmd.query, routes or {}, servers)
    )
    if not calls:
        return [
            ToolOutcome(
                call_id="plan",
                name="planner",
                ok=False,
                error="no calculation found in the question",
            )
        ]
    return [await registry.call(call, servers) for call in calls]


def create_router(resources: Resources, registry: ToolRegistry | None = None) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    sandbox = sandbox_for(settings)
    tools = registry or default_registry(
        timeout_s=settings.tool_timeout_s / 2,
        resources=resources,
        sandbox=sandbox,
        plugins=True,
    )
    routes: dict[str, McpServer] = {}
    if registry is None:
        routes = settings.mcp_server_configs()  # a bad configuration stops the worker here
        mcp = McpManager(routes, settings, tools, sandbox)
        catalog = CatalogPublisher(
            resources.redis(), lambda: [tool.catalog_entry() for tool in tools.tools()]
        )
        tools.on_change(catalog.changed)
        # the isolation is chosen before any call, and before an MCP server starts in it
        resources.on_warm_up(sandbox.warm_up, mcp.start, catalog.start)
        resources.on_close(catalog.stop, mcp.stop)
    access = ToolAccess(resources.redis(), settings)  # who may use which server's tools
    log.info("tool_registry_ready", tools=tools.names, mcp_servers=sorted(routes))
    router = step_router(resources)
    publisher = ResultPublisher(router, Step.TOOL, ToolResult)

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.TOOL), settings, ToolCommand))
    async def execute(cmd: ToolCommand) -> None:
        """Run the requested (or planned) tool calls; tool errors become failed outcomes."""
        async with phase(bus, cmd, Phase.TOOL_EXECUTION, planned=not cmd.calls) as run:
            servers = await access.servers_for(cmd.tenant)
            tenant = calling_tenant.set(cmd.tenant)
            narrowed = calling_filter.set(cmd.filter)
            reading = calling_reader.set(cmd.reader)
            try:
                outcomes = await run_tools(tools, cmd, servers=servers, routes=routes)
            finally:
                calling_reader.reset(reading)
                calling_filter.reset(narrowed)
                calling_tenant.reset(tenant)
            run.metadata.update(
                calls=[o.name for o in outcomes],
                ok=sum(o.ok for o in outcomes),
                failed=sum(not o.ok for o in outcomes),
            )
        result = ToolResult(**step_result_fields(cmd, run), outcomes=outcomes)
        await publisher.publish(result)

    return router
