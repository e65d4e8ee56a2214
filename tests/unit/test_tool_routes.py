"""MCP tools' names (`<prefix>__<tool>`, within OpenAI's function-name pattern) and the operator's
routes: a question that matches plans a call with arguments taken from it."""

from __future__ import annotations

import json

import pytest

from infra.config.mcp import McpServer
from infra.settings import Settings
from infra.tool_routes import coerce_arguments, prefixed_name, route_calls


def configured(servers: dict[str, object]) -> dict[str, McpServer]:
    return Settings(mcp_servers=json.dumps({"mcpServers": servers})).mcp_server_configs()


EVERYTHING = {
    "command": "mcp-server-everything",
    "routes": [
        {"pattern": r"^(?:say|echo)\s+(?P<message>.+?)[.!]?$", "tool": "echo"},
        {"pattern": r"\badd (?P<a>-?\d+) and (?P<b>-?\d+)", "tool": "get-sum"},
        {
            "pattern": r"remember that (?P<who>\w+) (?P<fact>.+)",
            "tool": "create.entities",
            "arguments": {
                "entities": [{"name": "{who}", "observations": ["{who} {fact}"], "n": 1}]
            },
        },
    ],
}
NOTES = {
    "url": "https://notes.example/mcp",
    "prefix": "kb",
    "routes": [
        {
            "pattern": r"note (?P<title>\w+)(?: about (?P<topic>\w+))?",
            "tool": "add_note",
            "arguments": {"title": "{title}", "text": "topic: {topic}"},
        },
        {"pattern": r"^(?:say|echo) ", "tool": "never_reached"},
    ],
}


@pytest.mark.parametrize(
    ("prefix", "tool", "name"),
    [
        ("everything", "echo", "everything__echo"),
        ("everything", "get-sum", "everything__get-sum"),
        ("fs", "read.file/v2 now", "fs__read_file_v2_now"),
        ("kb", "notes:search", "kb__notes_search"),
        ("x", "a" * 61, "x__" + "a" * 61),
        ("x", "a" * 62, None),  # 65 characters: no name fits
        ("x", "", None),
    ],
)
def test_prefixed_names_fit_openai_function_names(prefix: str, tool: str, name: str | None) -> None:
    assert prefixed_name(prefix, tool) == name


def test_the_first_matching_route_plans_a_call_with_the_prefixed_name() -> None:
    servers = configured({"everything": EVERYTHING, "notes": NOTES})
    [call] = route_calls("Say hello world!", servers)
    assert (call.name, call.arguments) == ("everything__echo", {"message": "hello world"})
    assert call.id.startswith("route-")
    [again] = route_calls("Say hello world!", servers)
    assert again.id == call.id  # the same question plans the same call
    [note] = route_calls("please note groceries about food", servers)
    assert (note.name, note.arguments) == (
        "kb__add_note",
        {"title": "groceries", "text": "topic: food"},
    )
    [bare] = route_calls("note groceries", servers)
    assert bare.arguments == {"title": "groceries", "text": "topic: "}  # no group: empty
    assert route_calls("what is the capital of France?", servers) == []
    assert route_calls("say hi", {"notes": servers["notes"]})[0].name == "kb__never_reached"


def test_templates_fill_nested_arguments_and_text_becomes_numbers_by_the_schema() -> None:
    servers = configured({"everything": EVERYTHING})
    [entity] = route_calls("remember that Ada wrote the first program", servers)
    assert entity.name == "everything__create_entities"
    assert entity.arguments == {
        "entities": [{"name": "Ada", "observations": ["Ada wrote the first program"], "n": 1}]
    }
    [text] = route_calls("please add 2 and -40", servers)
    assert text.arguments == {"a": "2", "b": "-40"}
    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
    [numbers] = route_calls("please add 2 and -40", servers, {"everything__get-sum": schema})
    assert numbers.arguments == {"a": 2, "b": -40}


def test_coercion_follows_the_schema_and_leaves_what_does_not_read() -> None:
    schema = {
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": ["null", "number"]},
            "flag": {"type": "boolean"},
            "word": {"type": "string"},
            "bad": {"type": "integer"},
        }
    }
    given = {"n": " 7 ", "x": "2.5", "flag": "Yes", "word": "12", "bad": "seven", "other": "1"}
    assert coerce_arguments(given, schema) == {
        "n": 7,
        "x": 2.5,
        "flag": True,
        "word": "12",
        "bad": "seven",
        "other": "1",
    }
    assert coerce_arguments({"n": "1"}, {"type": "object"}) == {"n": "1"}
