"""The tool worker on the bus: `rag.cmd.tool` in, `rag.res.tool` out."""

from __future__ import annotations

from faststream.nats import NatsRouter

from contracts.commands import ToolCommand
from contracts.enums import Phase, Step
from contracts.models import ToolOutcome
from contracts.results import ToolResult
from infra.logging import get_logger
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router
from infra.settings import Settings
from workers.tool.calculator import register_calculator
from workers.tool.planner import plan_calls
from workers.tool.python_tool import register_python
from workers.tool.registry import ToolRegistry, calling_tenant, load_plugins
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


async def run_tools(registry: ToolRegistry, cmd: ToolCommand) -> list[ToolOutcome]:
    """The explicit calls in order, or the planned one; a query with nothing to compute
    gets one failed outcome that says so, never an empty list the generator must guess at."""
    calls = cmd.calls or plan_calls(cmd.query)
    if not calls:
        return [
            ToolOutcome(
                call_id="plan",
                name="planner",
                ok=False,
                error="no calculation found in the question",
            )
        ]
    return [await registry.call(call) for call in calls]


def create_router(resources: Resources, registry: ToolRegistry | None = None) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    sandbox = sandbox_for(settings)
    tools = registry or default_registry(
        timeout_s=settings.tool_timeout_s / 2,
        resources=resources,
        sandbox=sandbox,
        plugins=True,
    )
    if registry is None:
        resources.on_warm_up(sandbox.warm_up)  # the isolation is chosen before any call
    log.info("tool_registry_ready", tools=tools.names)
    router = step_router(resources)
    publisher = ResultPublisher(router, Step.TOOL, ToolResult)

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.TOOL), settings, ToolCommand))
    async def execute(cmd: ToolCommand) -> None:
        """Run the requested (or planned) tool calls; tool errors become failed outcomes."""
        async with phase(bus, cmd, Phase.TOOL_EXECUTION, planned=not cmd.calls) as run:
            tenant = calling_tenant.set(cmd.tenant)
            try:
                outcomes = await run_tools(tools, cmd)
            finally:
                calling_tenant.reset(tenant)
            run.metadata.update(
                calls=[o.name for o in outcomes],
                ok=sum(o.ok for o in outcomes),
                failed=sum(not o.ok for o in outcomes),
            )
        result = ToolResult(**step_result_fields(cmd, run), outcomes=outcomes)
        await publisher.publish(result)

    return router
