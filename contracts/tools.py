"""Built-in tools as wire contracts: name, description and JSON Schema of the arguments.

Tool-call arguments travel on the bus (`GenerateResult.tool_calls` -> `ToolCommand.calls`),
so their schemas are contracts: the generate worker offers these specs to a language model,
the tool worker registers its handlers against the same specs, and neither imports the other.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from contracts.queries import MAX_CALLER_NAMESPACE_CHARS, NAMESPACE_PATTERN

MAX_EXPRESSION_CHARS: Final = 200
MAX_CODE_CHARS: Final = 20_000
MAX_SEARCH_TOP_K: Final = 10

INVALID_ARGUMENTS_KEY: Final = "__invalid_json__"
"""A model's tool call whose arguments were not a JSON object arrives as
`{INVALID_ARGUMENTS_KEY: "<raw text>"}`, so the tool worker can say so instead of guessing."""


def openai_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """One entry of the OpenAI `tools=[...]` list."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str
    parameters: dict[str, Any]

    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI `tools=[...]` entry for this tool."""
        return openai_tool(self.name, self.description, self.parameters)


class CatalogTool(ToolSpec):
    """A tool some tool worker runs, as it publishes its registry for the generate worker
    (`infra.runtime.tool_catalog`): `server` names the MCP server it belongs to, None for a
    built-in or plugin tool."""

    server: str | None = None


CALCULATOR: Final = ToolSpec(
    name="calculator",
    description="Evaluate an arithmetic expression: + - * / // % ^, parentheses, "
    "sqrt, log, exp, sin, cos, abs, round, min, max, pi, e.",
    parameters={
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "Arithmetic, e.g. '17 * 23 + 4' or 'sqrt(2) ^ 2'.",
                "minLength": 1,
                "maxLength": MAX_EXPRESSION_CHARS,
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    },
)

PYTHON: Final = ToolSpec(
    name="python",
    description="Run a short Python 3 program in a sandbox (no network, no files outside a "
    "fresh temporary directory, CPU, memory and time limits) and return what it prints. "
    "Only the standard library is available; print the result.",
    parameters={
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "The program; its standard output is the tool's result.",
                "minLength": 1,
                "maxLength": MAX_CODE_CHARS,
            }
        },
        "required": ["code"],
        "additionalProperties": False,
    },
)

SEARCH: Final = ToolSpec(
    name="search",
    description="Search the indexed documents and return the best matching passages.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 1000},
            "namespace": {
                "type": "string",
                "pattern": NAMESPACE_PATTERN,
                "maxLength": MAX_CALLER_NAMESPACE_CHARS,
                "description": "One of the request's namespaces; unset = its first.",
            },
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_TOP_K},
            "filter": {
                "type": "object",
                "description": "Only passages of documents whose metadata passes this filter: "
                '{"field": value}, {"field": {"$in": [...]}}, {"field": {"$gte": 2020}}, '
                "$exists, $and, $or, $not (the request's own filter applies too).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)

BUILTIN_TOOLS: Final[tuple[ToolSpec, ...]] = (CALCULATOR, PYTHON, SEARCH)


def openai_tools(
    specs: tuple[ToolSpec, ...] | list[ToolSpec] = BUILTIN_TOOLS,
) -> list[dict[str, Any]]:
    return [spec.openai_schema() for spec in specs]
