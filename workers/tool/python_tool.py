"""The `python` tool: a short program run in the sandbox (`workers.tool.sandbox`)."""

from __future__ import annotations

from contracts.tools import PYTHON
from workers.tool.registry import ToolError, ToolRegistry
from workers.tool.sandbox import Sandbox, SandboxUnavailable


def register_python(registry: ToolRegistry, sandbox: Sandbox) -> None:
    @registry.implement(PYTHON)
    async def python(code: str) -> str:
        try:
            run = await sandbox.run(code)
        except SandboxUnavailable as exc:
            raise ToolError(f"the python tool is unavailable: {exc}") from exc
        problem = run.error(sandbox.limits)
        if problem is not None:
            raise ToolError(problem)
        return run.stdout.rstrip() or "(the program printed nothing)"
