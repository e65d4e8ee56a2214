"""The tool worker's MCP client against real servers no one here wrote: the reference servers
`server-everything` and `server-memory` (Node, installed under tools/mcp by `make mcp-peers`),
and a server written with the SDK's `MCPServer` (tests/mcp_servers/notes_server.py) over stdio,
sandboxed and trusted, and over streamable HTTP behind a bearer token.

What it shows: tools registered under their server's prefix with their own (draft-07)
schemas; calls and argument checks; a timeout and the size cap as failed and cut outcomes; an
untrusted stdio server that cannot read the host's files or reach its network, while a trusted
one can; a server that dies costing its own tools only, and coming back; tools listed again
when a server says they changed; the tenant allowlist and the operator's routes through
`run_tools`; and the worker itself starting its servers, publishing its catalog and stopping
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import JStream, NatsBroker, TestNatsBroker

from contracts import subjects as sj
from contracts.commands import ToolCommand
from contracts.enums import Step
from contracts.models import ToolCall, ToolOutcome
from contracts.results import ToolResult
from contracts.tenancy import DEFAULT_TENANT
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.runtime.services import LocalService, free_port
from infra.runtime.tool_catalog import read_catalog
from infra.settings import Settings
from infra.tenancy.registry import TenantRegistry
from workers import tool
from workers.tool.mcp_client import McpManager
from workers.tool.registry import ToolRegistry
from workers.tool.router import run_tools
from workers.tool.sandbox import Sandbox, SandboxUnavailable
from workers.tool.sandbox_command import interpreter
from workers.tool.sandbox_procs import SANDBOX_UIDS, processes
from workers.tool.sandbox_run import SandboxLimits

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tools" / "mcp" / "node_modules" / ".bin"
NOTES = ROOT / "tests" / "mcp_servers" / "notes_server.py"
TOKEN = "s3cret-token"
SECRET_VARIABLE = "RAGBUS_TEST_MCP_SECRET"
HAVE_PEERS = (PEERS / "mcp-server-everything").exists() and (PEERS / "mcp-server-memory").exists()
needs_peers = pytest.mark.skipif(
    not HAVE_PEERS,
    reason="the reference MCP servers are not installed under tools/mcp/node_modules "
    "(`make mcp-peers`; `make test` installs them first)",
)


def sandbox_python() -> str | None:
    """A Python the sandbox's user may run, of this one's version (the virtualenv's packages,
    on PYTHONPATH, must load in it); None when there is none."""
    python = interpreter()
    found = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return str(python) if found.stdout.strip() == str(sys.version_info[:2]) else None


class HttpNotes:
    """The notes server over streamable HTTP on a free port, behind a bearer token."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(NOTES), "http", str(self.port), TOKEN],
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the HTTP notes server did not start")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture(scope="module")
def http_notes() -> Iterator[HttpNotes]:
    server = HttpNotes()
    server.start()
    yield server
    server.kill()


class Stack:
    def __init__(self, manager: McpManager, registry: ToolRegistry, isolation: str | None):
        self.manager = manager
        self.registry = registry
        self.isolation = isolation

    async def call(self, name: str, **arguments: Any) -> ToolOutcome:
        return await self.registry.call(ToolCall(id="t", name=name, arguments=arguments))

    def server_tools(self, server: str) -> list[str]:
        return [tool.name for tool in self.registry.server_tools(server)]

    async def wait_for(self, name: str, present: bool = True, within_s: float = 15.0) -> None:
        deadline = time.monotonic() + within_s
        while (self.registry.get(name) is not None) != present:
            assert time.monotonic() < deadline, f"{name} {'never came' if present else 'stayed'}"
            await asyncio.sleep(0.05)

    def sandboxed(self) -> None:
        if self.isolation != "bwrap":
            pytest.skip(f"no bubblewrap sandbox here ({self.isolation or 'none works'})")


EVERYTHING_ROUTES = [
    {"pattern": r"^(?:say|echo)\s+(?P<message>.+?)[.!]?$", "tool": "echo"},
    {"pattern": r"\badd (?P<a>\d+) and (?P<b>\d+)", "tool": "get-sum"},
]


def stack_servers(http: HttpNotes, python: str | None) -> dict[str, Any]:
    servers: dict[str, Any] = {
        "local": {"command": sys.executable, "args": [str(NOTES)], "trusted": True},
        "web": {"url": http.url, "token": TOKEN},
    }
    if python is not None:
        servers["notes"] = {
            "command": python,
            "args": [str(NOTES)],
            "env": {"PYTHONPATH": sysconfig.get_paths()["purelib"]},
            "timeout_s": 3,
            "max_result_chars": 500,
        }
    if HAVE_PEERS:
        servers["everything"] = {
            "command": str(PEERS / "mcp-server-everything"),
            "args": ["stdio"],
            "routes": EVERYTHING_ROUTES,
        }
        servers["memory"] = {
            "command": str(PEERS / "mcp-server-memory"),
            "env": {"MEMORY_FILE_PATH": "/sandbox/memory.jsonl"},
            "prefix": "kg",
            "tools": ["create_entities", "read_graph"],
        }
    return servers


def mcp_settings(servers: dict[str, Any], **values: Any) -> Settings:
    return Settings(
        mcp_servers=json.dumps({"mcpServers": servers}), mcp_reconnect_max_s=2, **values
    )


@pytest.fixture(scope="module")
async def stack(http_notes: HttpNotes) -> AsyncIterator[Stack]:
    os.environ[SECRET_VARIABLE] = "the worker's own"  # a sandboxed server must not see it
    sandbox = Sandbox(SandboxLimits(), "auto")
    with contextlib.suppress(SandboxUnavailable):  # the sandboxed tests skip
        await sandbox.ready()
    settings = mcp_settings(stack_servers(http_notes, sandbox_python()))
    registry = ToolRegistry(timeout_s=10)
    manager = McpManager(settings.mcp_server_configs(), settings, registry, sandbox, ping_s=1)
    await manager.start()
    try:
        yield Stack(manager, registry, sandbox.isolation)
    finally:
        await manager.stop()
        os.environ.pop(SECRET_VARIABLE, None)


@needs_peers
async def test_tools_are_registered_under_the_prefix_with_their_own_schemas(stack: Stack) -> None:
    stack.sandboxed()
    assert {"everything__echo", "everything__get-sum", "everything__get-tiny-image"} <= set(
        stack.server_tools("everything")
    )
    assert stack.server_tools("memory") == ["kg__create_entities", "kg__read_graph"]
    echo = stack.registry.get("everything__echo")
    assert echo is not None and echo.server == "everything"
    assert echo.parameters["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert echo.parameters["required"] == ["message"]
    assert "web__add" in stack.server_tools("web")
    assert stack.registry.get("calculator") is None  # this registry holds MCP tools only


@needs_peers
async def test_calls_run_and_their_arguments_are_checked_first(stack: Stack) -> None:
    stack.sandboxed()
    echo = await stack.call("everything__echo", message="hello")
    assert (echo.ok, echo.output) == (True, "Echo: hello")
    total = await stack.call("everything__get-sum", a=2, b=3)
    assert total.ok and "5" in total.output
    wrong = await stack.call("everything__get-sum", a="two", b=3)
    assert wrong.error == "invalid arguments: $.a: 'two' is not of type 'number'"
    image = await stack.call("everything__get-tiny-image")
    assert image.ok and "[image/png, " in image.output and "bytes]" in image.output
    made = await stack.call(
        "kg__create_entities",
        entities=[{"name": "Ada", "entityType": "person", "observations": ["wrote programs"]}],
    )
    assert made.ok, made.error
    graph = await stack.call("kg__read_graph")
    assert graph.ok and "Ada" in graph.output and "wrote programs" in graph.output
    web = await stack.call("web__add", a=2, b=40)
    assert web.ok and json.loads(web.output) == {"sum": 42}  # structured content, as JSON


async def test_a_slow_call_fails_at_its_timeout_and_a_long_result_is_cut(stack: Stack) -> None:
    stack.sandboxed()
    started = time.monotonic()
    slow = await stack.call("notes__sleep", seconds=30)
    assert (slow.ok, slow.error) == (False, "notes__sleep took longer than 3 s")
    assert time.monotonic() - started < 6
    assert (await stack.call("notes__whoami")).ok  # the server goes on
    long = await stack.call("notes__big", n=2000)
    assert long.ok and long.output == "x" * 500 + "\n[result cut at 500 of 2,000 characters]"
    refused = await stack.call("local__get_note", title="q")
    assert refused.error == "Error executing tool get_note: no note titled 'q'"


async def test_an_untrusted_server_is_sandboxed_and_a_trusted_one_is_not(
    stack: Stack, tmp_path: Path
) -> None:
    stack.sandboxed()
    listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        outside = await stack.call("local__open_socket", host="127.0.0.1", port=port)
        inside = await stack.call("notes__open_socket", host="127.0.0.1", port=port)
    finally:
        listener.close()
    assert outside.ok and outside.output == f"connected to 127.0.0.1:{port}"
    assert not inside.ok  # its own loopback, where nothing listens: no way out
    assert "root:" in (await stack.call("local__read_file", path="/etc/passwd")).output
    assert not (await stack.call("notes__read_file", path="/etc/passwd")).ok
    assert not (await stack.call("notes__write_file", path=str(tmp_path / "x"), text="x")).ok
    assert not (tmp_path / "x").exists()
    written = await stack.call("notes__write_file", path="/sandbox/x", text="mine")
    assert written.ok and (await stack.call("notes__read_file", path="/sandbox/x")).output == "mine"
    who = (await stack.call("notes__whoami")).output
    assert "cwd=/sandbox home=/sandbox" in who
    if os.geteuid() == 0:  # a user of its own, not root
        uid = int(who.split("uid=")[1].split()[0])
        assert uid in SANDBOX_UIDS
    if HAVE_PEERS:  # Node runs in it too: its environment is the sandbox's
        env = (await stack.call("everything__get-env")).output
        assert '"HOME": "/sandbox"' in env and SECRET_VARIABLE not in env


async def test_a_server_that_dies_costs_its_own_tools_only_and_comes_back(stack: Stack) -> None:
    before = stack.manager.connections["local"].connections
    crashed = await stack.call("local__crash")
    assert not crashed.ok and "'local' failed the call" in (crashed.error or "")
    await stack.wait_for("local__whoami", present=False, within_s=2)
    assert stack.server_tools("local") == []
    assert (await stack.call("web__add", a=1, b=1)).ok  # the others go on meanwhile
    gone = await stack.call("local__whoami")
    assert gone.error is not None and gone.error.startswith("unknown tool 'local__whoami'")
    await stack.wait_for("local__whoami")  # a new process, after a second
    assert (await stack.call("local__whoami")).ok
    assert stack.manager.connections["local"].connections == before + 1


async def test_a_sandboxed_server_that_dies_comes_back_in_a_new_sandbox(stack: Stack) -> None:
    stack.sandboxed()
    assert not (await stack.call("notes__crash")).ok
    await stack.wait_for("notes__whoami", present=False, within_s=2)
    await stack.wait_for("notes__whoami")
    assert "home=/sandbox" in (await stack.call("notes__whoami")).output
    me = os.getpid()  # the dead sandbox's init, handed to this process, was reaped
    # (its zombies: a sandbox user's or bwrap's; another test of this worker process may
    # leave zombies of its own, a killed nats-server's, that are no sandbox's)
    left = [
        p
        for p in processes()
        if p.ppid == me and p.state == "Z" and (p.uid in SANDBOX_UIDS or p.name == "bwrap")
    ]
    assert left == []


async def test_tools_are_listed_again_when_a_server_says_they_changed(stack: Stack) -> None:
    for server in ("local", "web"):  # a notification, and a 2026-07-28 subscription
        await stack.wait_for(f"{server}__grow")
        assert (await stack.call(f"{server}__grow")).ok
        await stack.wait_for(f"{server}__extra", within_s=5)
        extra = await stack.call(f"{server}__extra", word="grown")
        assert (extra.ok, extra.output) == (True, "GROWN")


async def test_an_http_server_that_goes_away_comes_back(
    stack: Stack, http_notes: HttpNotes
) -> None:
    await stack.wait_for("web__add")
    http_notes.kill()
    lost = await stack.call("web__add", a=1, b=2)
    assert not lost.ok
    await stack.wait_for("web__add", present=False, within_s=5)
    http_notes.start()
    await stack.wait_for("web__add", within_s=15)
    assert (await stack.call("web__add", a=1, b=2)).ok


async def test_a_bearer_token_or_header_is_sent_and_a_wrong_one_gets_no_tools(
    http_notes: HttpNotes,
) -> None:
    if http_notes.process is None:
        http_notes.start()
    settings = mcp_settings(
        {
            "wrong": {"url": http_notes.url, "token": "not-the-token"},
            "hdr": {"url": http_notes.url, "headers": {"Authorization": f"Bearer {TOKEN}"}},
        }
    )
    registry = ToolRegistry()
    manager = McpManager(settings.mcp_server_configs(), settings, registry, None)
    await manager.start()
    try:
        assert "hdr__add" in registry.names
        assert [name for name in registry.names if name.startswith("wrong")] == []
        assert manager.connections["wrong"].connections == 0
    finally:
        await manager.stop()
    assert registry.names == []


class NoBubblewrap:
    """A sandbox whose isolation is not bubblewrap (or none at all)."""

    def __init__(self, isolation: str | None) -> None:
        self.isolation = isolation

    async def ready(self) -> str:
        if self.isolation is None:
            raise SandboxUnavailable("neither bwrap nor `unshare -rn` works here")
        return self.isolation


@pytest.mark.parametrize("isolation", ["unshare", "none", None])
async def test_an_untrusted_server_never_runs_in_a_weaker_sandbox(isolation: str | None) -> None:
    settings = mcp_settings({"notes": {"command": sys.executable, "args": [str(NOTES)]}})
    registry = ToolRegistry()
    manager = McpManager(
        settings.mcp_server_configs(),
        settings,
        registry,
        NoBubblewrap(isolation),  # type: ignore[arg-type]
    )
    started = time.monotonic()
    await manager.start()
    try:
        assert time.monotonic() - started < 2  # refused at once, not tried again
        assert registry.names == []
        assert all(task.done() for task in manager._tasks)
    finally:
        await manager.stop()


@needs_peers
async def test_the_allowlist_and_the_routes_in_run_tools(stack: Stack) -> None:
    stack.sandboxed()
    registry, routes = stack.registry, stack.manager.servers

    def command(query: str, *calls: ToolCall) -> ToolCommand:
        return ToolCommand(request_id="req-mcp", query=query, calls=list(calls))

    echo = ToolCall(id="c1", name="everything__echo", arguments={"message": "hi"})
    nothing = ToolCall(id="c2", name="everything__nothing", arguments={})
    only_web = frozenset({"web"})
    [hidden] = await run_tools(registry, command("x", echo), servers=only_web)
    [unknown] = await run_tools(registry, command("x", nothing), servers=only_web)
    assert hidden.error is not None and unknown.error is not None
    assert hidden.error.replace("echo", "nothing") == unknown.error  # nothing else told
    assert "everything__" not in hidden.error.split("known:")[1] and "web__add" in hidden.error
    [allowed] = await run_tools(registry, command("x", echo), servers=frozenset({"everything"}))
    assert (allowed.ok, allowed.output) == (True, "Echo: hi")

    [said] = await run_tools(registry, command("Say hello there!"), routes=routes)
    assert (said.name, said.output) == ("everything__echo", "Echo: hello there")
    [summed] = await run_tools(registry, command("please add 2 and 40"), routes=routes)
    assert summed.name == "everything__get-sum" and summed.arguments == {"a": 2, "b": 40}
    assert "42" in summed.output
    [refused] = await run_tools(
        registry, command("Say hello there!"), servers=only_web, routes=routes
    )
    assert (refused.name, refused.error) == ("planner", "no calculation found in the question")


async def test_the_worker_runs_its_servers_publishes_them_and_stops_them(
    redis_server: LocalService, tmp_path: Path
) -> None:
    servers = {"local": {"command": sys.executable, "args": [str(NOTES)], "trusted": True}}
    settings = mcp_settings(
        servers, redis_url=redis_server.url, data_dir=tmp_path, auth_mode="tenants"
    )
    broker = NatsBroker()
    resources = Resources(settings, Bus(broker))

    async def every_request_is_live(request_id: str) -> bool:
        return True

    resources.is_live = every_request_is_live  # type: ignore[method-assign]
    broker.include_router(tool.create_router(resources))
    results: list[ToolResult] = []

    @broker.subscriber("rag.res.>", stream=JStream(sj.STREAM_RES, declare=False))
    async def on_result(body: dict[str, Any]) -> None:
        results.append(ToolResult.model_validate(body))

    tenants = TenantRegistry(resources.redis())
    for name, allowed in (("acme", ["other"]), ("beta", ["local"])):
        await tenants.create(name, f"A{name.upper()}")
        await tenants.allow_mcp_servers(name, allowed)

    async def outcome(tenant: str, name: str) -> ToolOutcome:
        call = ToolCall(id="c", name=name, arguments={"a": 20, "b": 22})
        cmd = ToolCommand(request_id=f"req-{tenant}", tenant=tenant, query="x", calls=[call])
        await test_broker.publish(
            cmd.model_dump(mode="json"), sj.cmd_subject(Step.TOOL), stream=sj.STREAM_CMD
        )
        return results[-1].outcomes[0]

    try:
        async with TestNatsBroker(broker) as test_broker:
            await resources.warm_up()  # the sandbox chosen, the servers started
            catalog = {t.name: t for t in await read_catalog(resources.redis())}
            assert catalog["local__add"].server == "local"
            assert catalog["local__add"].parameters["required"] == ["a", "b"]
            assert catalog["calculator"].server is None
            for tenant in (DEFAULT_TENANT, "beta"):
                ok = await outcome(tenant, "local__add")
                assert (ok.ok, json.loads(ok.output)) == (True, {"sum": 42})
            hidden = await outcome("acme", "local__add")
            unknown = await outcome("acme", "local__nothing")
            assert hidden.error is not None and "local__" not in hidden.error.split("known:")[1]
            assert hidden.error.replace("add", "nothing") == unknown.error
            pid = int((await outcome(DEFAULT_TENANT, "local__whoami")).output.split()[0][4:])
    finally:
        await resources.aclose()  # the servers stopped, the catalog taken back
    left = [t.name for t in await read_catalog(resources.redis()) if t.server == "local"]
    await resources.redis().aclose()
    assert left == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
