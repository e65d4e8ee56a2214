from __future__ import annotations

import asyncio

import pytest

from contracts.commands import ToolCommand
from contracts.models import ToolCall
from contracts.tools import SEARCH
from workers.tool.calculator import CalculatorError, evaluate, format_number
from workers.tool.planner import extract_expression, plan_calls
from workers.tool.registry import ToolError, ToolRegistry
from workers.tool.router import default_registry, run_tools
from workers.tool.schema import validate


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("17 * 23 + 4", 395),
        ("2^10", 1024),
        ("2 ** 0.5 * 2 ** 0.5", pytest.approx(2.0)),
        ("(3 + 4) * 2.5", 17.5),
        ("-7 // 2", -4),
        ("17 % 5", 2),
        ("sqrt(16) + abs(-2)", 6.0),
        ("max(1, 5, 3) - min(4, 2)", 3),
        ("round(3.14159, 2)", 3.14),
        ("log(100, 10)", pytest.approx(2.0)),
        ("cos(0) + sin(0) + exp(0)", 2.0),
        ("12 × 7 ÷ 4", 21.0),
        ("2 * pi", pytest.approx(6.283185307)),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, expected: float) -> None:
    assert evaluate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "function '__import__' is not allowed"),
        ("__import__('os').system('ls')", "attribute access is not allowed"),
        ("().__class__.__bases__", "attribute access is not allowed"),
        ("open('/etc/passwd')", "function 'open' is not allowed"),
        ("x + 1", "unknown name 'x'"),
        ("2 ** 100000", "exponent 100000 is too large"),
        ("9 ** 9 ** 9", "too large"),
        ("10.0 ** 400", "too large"),
        ("99999999999 ** 999", "too large"),
        ("1 / 0", "division by zero"),
        ("sqrt(-1)", "sqrt() cannot take"),
        ("'a' * 3", "not allowed"),
        ("[1, 2][0]", "not allowed"),
        ("(lambda: 1)()", "not allowed"),
        ("1 +", "not a valid arithmetic expression"),
        ("1 + " * 100 + "1", "longer than 200 characters"),
        ("", "empty"),
    ],
)
def test_calculator_rejects_unsafe_or_impossible_input(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(expression)


def test_format_number_is_human() -> None:
    assert format_number(30.0) == "30"
    assert format_number(1 / 3) == "0.333333333333"
    assert format_number(2**70) == str(2**70)


@pytest.mark.parametrize(
    ("query", "expression", "value"),
    [
        ("what is 17 * 23 + 4?", "17 * 23 + 4", 395),
        ("calculate 2^10", "2^10", 1024),
        ("15% of 200", "15 / 100 * 200", 30),
        ("sqrt(16)", "sqrt(16)", 4),
        ("What is 12 x 7?", "12 * 7", 84),
        ("what is 3 plus 4 times 2", "3 + 4 * 2", 11),
        ("What is the square root of 144?", "sqrt(144)", 12),
        ("how much is 1,000 + 2,500?", "1000 + 2500", 3500),
    ],
)
def test_planner_extracts_the_arithmetic(query: str, expression: str, value: float) -> None:
    assert extract_expression(query) == expression
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "query", ["What is the capital of France?", "what happened in 2019-2020", "COVID-19 symptoms"]
)
def test_planner_finds_nothing_without_arithmetic(query: str) -> None:
    assert extract_expression(query) is None
    assert plan_calls(query) == []


def test_planned_call_targets_the_calculator() -> None:
    [call] = plan_calls("what is 6 * 7?")
    assert call.name == "calculator"
    assert call.arguments == {"expression": "6 * 7"}


# ----------------------------------------------------------------- schema and registry


def test_validator_reports_each_violation() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["fast", "exact"]},
            "n": {"type": "integer", "minimum": 1},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
        },
        "required": ["mode"],
        "additionalProperties": False,
    }
    assert validate({"mode": "fast", "n": 2, "tags": ["a"]}, schema) == []
    errors = validate({"n": True, "tags": ["abcd"], "other": 1}, schema)
    assert "$: 'mode' is a required property" in errors
    assert "$.n: True is not of type 'integer'" in errors
    assert "$.tags[0]: 'abcd' is too long" in errors
    assert any(e.startswith("$: Additional properties are not allowed ('other'") for e in errors)
    assert validate("x", schema) == ["$: 'x' is not of type 'object'"]
    assert validate({"mode": "slow"}, schema) == ["$.mode: 'slow' is not one of ['fast', 'exact']"]


async def test_registry_runs_a_valid_call() -> None:
    outcome = await default_registry().call(
        ToolCall(id="c1", name="calculator", arguments={"expression": "17 * 23 + 4"})
    )
    assert outcome.ok
    assert outcome.output == "17 * 23 + 4 = 395"
    assert outcome.call_id == "c1"
    assert outcome.duration_ms >= 0


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({}, "'expression' is a required property"),
        ({"expression": 42}, "$.expression: 42 is not of type 'string'"),
        ({"expression": "1+1", "shell": "rm -rf /"}, "('shell' was unexpected)"),
        ({"expression": "1+" * 150 + "1"}, "is too long"),
    ],
)
async def test_registry_rejects_bad_arguments_before_the_handler(
    arguments: dict[str, object], error: str
) -> None:
    ran: list[str] = []
    registry = ToolRegistry()

    @registry.register(
        "calculator",
        description="test",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string", "maxLength": 200}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    )
    async def calculator(expression: str) -> str:
        ran.append(expression)
        return "ran"

    outcome = await registry.call(ToolCall(id="c", name="calculator", arguments=arguments))
    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith("invalid arguments: ")
    assert error in outcome.error
    assert ran == []


async def test_registry_turns_tool_failures_into_outcomes() -> None:
    registry = ToolRegistry(timeout_s=0.05)
    free = {"type": "object"}

    @registry.register("refuses", description="", parameters=free)
    async def refuses() -> str:
        raise ToolError("the input is out of range")

    @registry.register("crashes", description="", parameters=free)
    async def crashes() -> str:
        raise KeyError("bug")

    @registry.register("hangs", description="", parameters=free)
    async def hangs() -> str:
        await asyncio.sleep(5)
        return "never"

    refused = await registry.call(ToolCall(id="1", name="refuses"))
    crashed = await registry.call(ToolCall(id="2", name="crashes"))
    hung = await registry.call(ToolCall(id="3", name="hangs"))
    unknown = await registry.call(ToolCall(id="4", name="nope"))
    assert (refused.ok, refused.error) == (False, "the input is out of range")
    assert (crashed.ok, crashed.error) == (False, "crashes failed unexpectedly: KeyError")
    assert not hung.ok
    assert "longer than" in (hung.error or "")
    assert not unknown.ok
    assert "unknown tool 'nope'" in (unknown.error or "")


def test_openai_schema_export() -> None:
    [schema] = default_registry().openai_schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]


def test_duplicate_registration_is_refused() -> None:
    registry = default_registry()
    with pytest.raises(ValueError, match="already registered"):
        registry.add(registry.get("calculator"))  # type: ignore[arg-type]


async def test_run_tools_plans_or_says_why_not() -> None:
    registry = default_registry()
    planned = await run_tools(registry, ToolCommand(request_id="r", query="what is 2^8?"))
    assert [o.output for o in planned] == ["2^8 = 256"]
    nothing = await run_tools(registry, ToolCommand(request_id="r", query="who is Ada?"))
    assert [(o.name, o.ok) for o in nothing] == [("planner", False)]
    assert nothing[0].error == "no calculation found in the question"
    failing = await run_tools(
        registry,
        ToolCommand(
            request_id="r",
            query="x",
            calls=[ToolCall(id="c", name="calculator", arguments={"expression": "1/0"})],
        ),
    )
    assert failing[0].error == "division by zero"


@pytest.mark.parametrize("namespace", ["../../../../tmp", "Other Tenant", "a/b", ""])
async def test_the_search_tool_refuses_a_namespace_the_api_would_refuse(namespace: str) -> None:
    ran: list[str] = []
    registry = ToolRegistry()

    @registry.implement(SEARCH)
    async def search(query: str, namespace: str = "default", top_k: int = 5) -> str:
        ran.append(namespace)
        return "searched"

    outcome = await registry.call(
        ToolCall(id="s", name="search", arguments={"query": "locks", "namespace": namespace})
    )
    assert not outcome.ok
    assert (outcome.error or "").startswith("invalid arguments: $.namespace")
    assert ran == []
