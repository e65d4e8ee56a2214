"""What MCP servers need of the tool registry and around it: a server's tools replaced or taken
out at run time, a caller who may not use a server seeing its tools as unknown, draft-07
schemas, the registry published in Redis for the generate worker, the listing of a server's
tools page by page, and what a sandboxed server's program may see."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import mcp.types as types
import redis.asyncio as aioredis

from contracts.models import ToolCall
from contracts.tools import CatalogTool
from infra.config.mcp import McpServer
from infra.runtime.services import LocalService
from infra.runtime.tool_catalog import WORKERS_KEY, CatalogPublisher, catalog_key, read_catalog
from infra.settings import Settings
from workers.tool.mcp_client import McpConnection
from workers.tool.registry import Tool, ToolRegistry
from workers.tool.router import default_registry
from workers.tool.sandbox_server import bwrap_command, plan

DRAFT7 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


async def echo(**arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True)


def mcp_tool(server: str, name: str, parameters: dict[str, Any] | None = None) -> Tool:
    return Tool(name, f"{name} of {server}", parameters or {"type": "object"}, echo, server)


async def test_a_servers_tools_are_replaced_and_taken_out_alone() -> None:
    registry = default_registry()
    changes: list[int] = []
    registry.on_change(lambda: changes.append(len(registry.names)))
    added = registry.replace_server("sums", [mcp_tool("sums", "sums__add", DRAFT7)])
    assert added == ["sums__add"] and changes == [2]
    registry.replace_server("notes", [mcp_tool("notes", "notes__get")])
    registry.replace_server("sums", [mcp_tool("sums", "sums__add"), mcp_tool("sums", "sums__mul")])
    assert registry.names == ["calculator", "notes__get", "sums__add", "sums__mul"]
    registry.replace_server("sums", [])
    assert registry.names == ["calculator", "notes__get"]
    assert registry.remove("notes__get") is not None and registry.remove("nope") is None
    assert registry.names == ["calculator"] and changes[-1] == 1
    registry.replace_server("x", [])
    assert len(changes) == 5  # nothing changed, nobody told


def test_a_tool_whose_name_is_taken_or_whose_schema_is_invalid_is_skipped() -> None:
    registry = default_registry()
    added = registry.replace_server(
        "bad",
        [
            mcp_tool("bad", "calculator"),
            mcp_tool("bad", "bad__broken", {"type": "object", "properties": 3}),
            mcp_tool("bad", "bad__fine"),
        ],
    )
    assert added == ["bad__fine"]
    assert registry.get("calculator").server is None  # type: ignore[union-attr]


async def test_a_server_the_caller_may_not_use_is_unknown_to_it() -> None:
    registry = default_registry()
    registry.replace_server("sums", [mcp_tool("sums", "sums__add", DRAFT7)])
    registry.replace_server("secret", [mcp_tool("secret", "secret__read")])
    call = ToolCall(id="1", name="secret__read")
    hidden = await registry.call(call, servers=frozenset({"sums"}))
    missing = await registry.call(ToolCall(id="1", name="nothing"), servers=frozenset({"sums"}))
    assert hidden.error == "unknown tool 'secret__read' (known: calculator, sums__add)"
    assert missing.error == "unknown tool 'nothing' (known: calculator, sums__add)"
    nothing = await registry.call(call, servers=frozenset())
    assert nothing.error == "unknown tool 'secret__read' (known: calculator)"
    allowed = await registry.call(call, servers=None)
    assert (allowed.ok, allowed.output) == (True, "{}")


async def test_draft_07_schemas_validate_arguments() -> None:
    registry = ToolRegistry()
    registry.replace_server("sums", [mcp_tool("sums", "sums__add", DRAFT7)])
    wrong = await registry.call(ToolCall(id="1", name="sums__add", arguments={"a": "x", "c": 1}))
    assert not wrong.ok
    assert wrong.error == (
        "invalid arguments: $: 'b' is a required property; $: Additional properties are not "
        "allowed ('c' was unexpected); $.a: 'x' is not of type 'number'"
    )
    right = await registry.call(ToolCall(id="2", name="sums__add", arguments={"a": 1, "b": 2}))
    assert (right.ok, right.output) == (True, '{"a": 1, "b": 2}')


async def test_a_tool_keeps_its_own_time_limit_and_long_errors_are_cut() -> None:
    registry = ToolRegistry(timeout_s=0.05)

    async def slow() -> str:
        await asyncio.sleep(0.2)
        return "done"

    async def wordy() -> str:
        from workers.tool.registry import ToolError

        raise ToolError("e" * 10_000)

    registry.add(Tool("slow", "", {"type": "object"}, slow, "s", timeout_s=1.0))
    registry.add(Tool("wordy", "", {"type": "object"}, wordy, "s"))
    assert (await registry.call(ToolCall(id="1", name="slow"))).output == "done"
    failed = await registry.call(ToolCall(id="2", name="wordy"))
    assert failed.error is not None and len(failed.error) == 4000


async def test_the_catalog_is_published_per_worker_and_read_as_one(
    redis_service: LocalService,
) -> None:
    redis = aioredis.from_url(redis_service.url, decode_responses=True)
    registry = default_registry()
    registry.replace_server("sums", [mcp_tool("sums", "sums__add", DRAFT7)])
    other = ToolRegistry()
    other.replace_server("notes", [mcp_tool("notes", "notes__get")])
    other.add(Tool("calculator", "another worker's", {}, echo))

    def entries(of: ToolRegistry) -> list[CatalogTool]:
        return [tool.catalog_entry() for tool in of.tools()]

    first = CatalogPublisher(redis, lambda: entries(registry), worker="unit-a", refresh_s=60)
    second = CatalogPublisher(redis, lambda: entries(other), worker="unit-b", ttl_s=5)
    try:
        await first.start()
        await second.start()
        catalog = await read_catalog(redis)
        assert [(t.name, t.server) for t in catalog] == [
            ("calculator", None),
            ("notes__get", "notes"),
            ("sums__add", "sums"),
        ]
        assert catalog[0].description.startswith("Evaluate")  # the first worker's, by key
        assert catalog[2].parameters == DRAFT7
        assert 0 < await redis.pttl(catalog_key("unit-b")) <= 5000
        registry.on_change(first.changed)
        registry.replace_server("sums", [])  # published at once, not in a minute
        for _ in range(50):
            if "sums__add" not in [t.name for t in await read_catalog(redis)]:
                break
            await asyncio.sleep(0.02)
        assert [t.name for t in await read_catalog(redis)] == ["calculator", "notes__get"]
        await redis.set(catalog_key("unit-c"), "not json")
        await redis.sadd(WORKERS_KEY, catalog_key("unit-c"), catalog_key("unit-gone"))
        assert len(await read_catalog(redis)) == 2  # a broken entry is skipped
        # a worker that died without a word: its key lapsed, and the read forgets it
        assert catalog_key("unit-gone") not in await redis.smembers(WORKERS_KEY)
    finally:
        await first.stop()
        await second.stop()
        await redis.delete(catalog_key("unit-c"))
        await redis.srem(WORKERS_KEY, catalog_key("unit-c"))
    assert await redis.exists(catalog_key("unit-a"), catalog_key("unit-b")) == 0
    assert await read_catalog(redis) == []
    await redis.aclose()


class PagedClient:
    """A client whose server lists its tools two to a page."""

    def __init__(self, names: list[str]) -> None:
        self.pages = [names[i : i + 2] for i in range(0, len(names), 2)]

    async def list_tools(self, cursor: str | None = None) -> types.ListToolsResult:
        index = int(cursor or 0)
        tools = [
            types.Tool(name=name, description=f"tool {name}", input_schema={"type": "object"})
            for name in self.pages[index]
        ]
        more = str(index + 1) if index + 1 < len(self.pages) else None
        return types.ListToolsResult(tools=tools, next_cursor=more)


async def test_a_servers_tools_are_listed_page_by_page_and_filtered() -> None:
    registry = ToolRegistry()
    names = ["echo", "sum", "bad name!", "x" * 70, "bad_name_", "image"]
    config = McpServer(command="srv", prefix="ev", tools=[*names[:5]])
    connection = McpConnection("everything", config, Settings(), registry, None, None)
    listed = await connection._list_tools(PagedClient(names))  # type: ignore[arg-type]
    assert [tool.name for tool in listed] == names
    added = connection._register(listed)
    # "image" is not in `tools`; "x"*70 cannot fit; "bad name!" and "bad_name_" clash
    assert added == ["ev__echo", "ev__sum", "ev__bad_name_"]
    assert registry.get("ev__echo").server == "everything"  # type: ignore[union-attr]
    assert registry.get("ev__echo").timeout_s == 21.0  # type: ignore[union-attr]


def test_a_sandboxed_program_sees_its_own_trees_only(tmp_path: Path) -> None:
    modules = tmp_path / "app" / "node_modules"
    package = modules / "@scope" / "server" / "dist"
    package.mkdir(parents=True)
    (package / "index.js").write_text("#!/usr/bin/env node\n")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "server").symlink_to(package / "index.js")
    (package / "index.js").chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /opt/python3.11/bin\n")
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    script = tmp_path / "servers" / "notes.py"
    script.parent.mkdir()
    script.write_text("print()")

    node = plan(str(modules / ".bin" / "server"), ["stdio"], {}, None)
    assert node.program == [str(modules / ".bin" / "server"), "stdio"]
    assert node.binds == [modules]  # the top-most node_modules: npm hoists there
    python = plan(
        str(venv / "bin" / "python"),
        ["-u", "servers/notes.py"],
        {"PYTHONPATH": str(tmp_path / "servers")},
        str(tmp_path),
    )
    assert python.program == [str(venv / "bin" / "python"), "-u", str(script)]
    assert sorted(python.binds) == sorted([venv, Path("/opt/python3.11"), script.parent])

    command = bwrap_command(python, tmp_path / "work", {"TOKEN": "t"})
    assert command[1:5] == ["--unshare-all", "--die-with-parent", "--new-session", "--ro-bind"]
    assert "/etc" not in command and "--share-net" not in command
    joined = " ".join(command)
    assert f"--ro-bind {venv} {venv}" in joined
    assert f"--bind {tmp_path / 'work' / 'home'} /sandbox" in joined
    assert "--clearenv" in command and "--setenv TOKEN t" in joined
    assert command[-4:] == ["--", str(venv / "bin" / "python"), "-u", str(script)]
