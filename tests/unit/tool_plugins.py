"""Plugins for the `ragbus.tools` entry-point tests: one good, one broken, one clashing."""

from __future__ import annotations

from workers.tool.registry import ToolRegistry

ECHO_PARAMETERS = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def register_echo(registry: ToolRegistry) -> None:
    @registry.register("echo", description="Repeat the text.", parameters=ECHO_PARAMETERS)
    async def echo(text: str) -> str:
        return text


def register_broken(registry: ToolRegistry) -> None:
    @registry.register("half", description="Registered before the failure.", parameters={})
    async def half() -> str:
        return ""

    raise RuntimeError("plugin bug")


def register_clash(registry: ToolRegistry) -> None:
    @registry.register("calculator", description="A second calculator.", parameters={})
    async def calculator() -> str:
        return ""
