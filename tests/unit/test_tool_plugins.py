"""Tool specs as contracts, argument validation, OpenAI schema export, entry-point plugins."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from contracts.models import ToolCall
from contracts.tools import BUILTIN_TOOLS, CALCULATOR, INVALID_ARGUMENTS_KEY, openai_tools
from workers.tool.registry import PLUGIN_GROUP, ToolRegistry, load_plugins
from workers.tool.router import default_registry
from workers.tool.sandbox import Sandbox
from workers.tool.sandbox_run import SandboxLimits


def entry(name: str, target: str) -> EntryPoint:
    return EntryPoint(name=name, value=target, group=PLUGIN_GROUP)


def test_registered_builtins_export_exactly_the_contract_specs() -> None:
    registry = default_registry(sandbox=Sandbox(SandboxLimits()))
    exported = {t["function"]["name"]: t for t in registry.openai_schema()}
    for spec in BUILTIN_TOOLS:
        if spec.name == "search":  # needs resources; registered by the worker
            continue
        assert exported[spec.name] == spec.openai_schema()
    assert {t["function"]["name"] for t in openai_tools()} == {"calculator", "python", "search"}
    assert openai_tools()[0]["type"] == "function"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "'expression' is a required property"),
        ({"expression": 5}, "$.expression: 5 is not of type 'string'"),
        ({"expression": "1+1", "shell": "rm -rf /"}, "Additional properties are not allowed"),
        ({"expression": ""}, "should be non-empty"),
        ({INVALID_ARGUMENTS_KEY: "{expression: 1"}, "not a JSON object"),
    ],
)
async def test_invalid_arguments_are_rejected_before_the_handler_runs(
    arguments: dict[str, object], message: str
) -> None:
    ran: list[str] = []
    registry = ToolRegistry()

    @registry.implement(CALCULATOR)
    async def calculator(expression: str) -> str:
        ran.append(expression)
        return "ran"

    outcome = await registry.call(ToolCall(id="c1", name="calculator", arguments=arguments))
    assert not outcome.ok
    assert (outcome.error or "").startswith("invalid arguments: ")
    assert message in (outcome.error or "")
    assert outcome.arguments == arguments
    assert ran == []


async def test_plugins_load_and_broken_or_clashing_ones_are_skipped() -> None:
    registry = default_registry()
    added = load_plugins(
        registry,
        [
            entry("echo", "tests.unit.tool_plugins:register_echo"),
            entry("broken", "tests.unit.tool_plugins:register_broken"),
            entry("missing", "tests.unit.no_such_module:register"),
            entry("clash", "tests.unit.tool_plugins:register_clash"),
        ],
    )
    assert added == ["echo"]
    assert registry.names == ["calculator", "echo"]  # nothing half-registered by "broken"
    outcome = await registry.call(ToolCall(id="e", name="echo", arguments={"text": "hi"}))
    assert (outcome.ok, outcome.output) == (True, "hi")
    calc = await registry.call(ToolCall(id="c", name="calculator", arguments={"expression": "2+2"}))
    assert calc.output == "2+2 = 4"  # the built-in, not the clashing plugin's


def test_no_installed_plugins_is_fine() -> None:
    assert load_plugins(ToolRegistry(), []) == []
