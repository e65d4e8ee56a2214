"""The python tool's sandbox contains the classic attacks, and the worker keeps serving.

Which isolation runs depends on the machine (`auto`: bwrap, else `unshare -rn`, else none);
the assertions that need a namespace say so and are skipped without one.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from contracts import subjects as sj
from contracts.commands import ToolCommand
from contracts.enums import Step
from contracts.models import ToolCall
from contracts.results import ToolResult
from infra.settings import Settings
from tests.unit.test_answer_workers_broker import harness_for  # noqa: F401  (fixture)
from workers import tool
from workers.tool.python_tool import register_python
from workers.tool.registry import ToolRegistry
from workers.tool.router import default_registry
from workers.tool.sandbox import Sandbox
from workers.tool.sandbox_run import SandboxLimits, SandboxRun

LIMITS = SandboxLimits(timeout_s=4.0, cpu_s=2, memory_mb=256, max_procs=16, file_size_mb=4)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(LIMITS, "auto")


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def python_registry(sandbox: Sandbox) -> ToolRegistry:
    registry = ToolRegistry(timeout_s=30)
    register_python(registry, sandbox)
    return registry


async def run(registry: ToolRegistry, code: str) -> Any:
    return await registry.call(ToolCall(id="p", name="python", arguments={"code": code}))


async def test_a_normal_program_prints_its_result(sandbox: Sandbox) -> None:
    outcome = await run(python_registry(sandbox), "print(17 * 23 + 4)")
    assert (outcome.ok, outcome.output) == (True, "395")


async def test_files_outside_the_sandbox_are_out_of_reach(sandbox: Sandbox) -> None:
    registry = python_registry(sandbox)
    where = await run(registry, "import os; print(os.getcwd()); print(os.listdir('.'))")
    assert where.ok
    cwd, listing = where.output.splitlines()
    assert "sandbox" in cwd  # a fresh directory holding only the program
    assert listing == "['main.py']"
    if await sandbox.ready() != "bwrap":
        pytest.skip("without bwrap, world-readable files such as /etc/passwd stay readable")
    outcome = await run(registry, "print(open('/etc/passwd').read())")
    assert not outcome.ok
    assert "FileNotFoundError" in (outcome.error or "")
    home = await run(registry, "import os; print(os.listdir('/'))")
    assert "etc" not in home.output and "work" not in home.output


async def test_no_network(sandbox: Sandbox, listener: int) -> None:
    if await sandbox.ready() == "none":
        pytest.skip("neither bwrap nor unshare -rn works here: the network is reachable")
    code = (
        "import socket\n"
        f"socket.create_connection(('127.0.0.1', {listener}), timeout=2)\n"
        "print('connected')\n"
    )
    outcome = await run(python_registry(sandbox), code)
    assert not outcome.ok
    assert "connected" not in outcome.output
    assert "Error" in (outcome.error or "")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import os\nwhile True:\n    os.fork()\n", ("Resource temporarily unavailable", "killed")),
        ("x = bytearray(4 * 1024 ** 3)\n", ("out of memory",)),
        ("chunks = []\nwhile True:\n    chunks.append('x' * 10 ** 6)\n", ("out of memory",)),
        ("while True:\n    pass\n", ("CPU time", "wall-clock")),  # whichever comes first
        ("import time\ntime.sleep(60)\n", ("wall-clock",)),
        ("open('big', 'wb').write(b'x' * (16 * 1024 * 1024))\n", ("File too large",)),
    ],
    ids=["fork-bomb", "memory-bomb", "memory-creep", "infinite-loop", "sleeper", "big-file"],
)
async def test_attacks_end_in_a_clear_tool_error(
    sandbox: Sandbox, code: str, expected: tuple[str, ...]
) -> None:
    registry = python_registry(sandbox)
    outcome = await run(registry, code)
    assert not outcome.ok
    assert any(text in (outcome.error or "") for text in expected), outcome.error
    after = await run(registry, "print(2 ** 10)")  # and the next call works as ever
    assert (after.ok, after.output) == (True, "1024")


def test_a_fork_bombs_interleaved_tracebacks_still_name_the_process_limit() -> None:
    """Forked children write their tracebacks over each other; the last line may be any of them."""
    stderr = (
        'Traceback (most recent call last):\n  File "<string>", line 3, in <module>\n'
        "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
        "Traceback (most recent call last):\n"
    )
    run = SandboxRun(1, "", stderr, False, False, "none", 5.0)
    assert run.error(LIMITS) == (
        "the program tried to run more than 16 processes (Resource temporarily unavailable)"
    )


async def test_output_is_truncated_at_32_kb(sandbox: Sandbox) -> None:
    outcome = await run(python_registry(sandbox), "print('x' * 100_000)")
    assert outcome.ok
    assert outcome.output.startswith("x" * 1000)
    assert outcome.output.endswith("[output truncated at 32 KB]")
    assert len(outcome.output) < 33 * 1024


async def test_the_tool_worker_survives_attacks_and_keeps_serving(harness_for: Any) -> None:  # noqa: F811
    def create_router(resources: Any) -> Any:
        registry = default_registry(timeout_s=20, sandbox=Sandbox(LIMITS, "auto"))
        return tool.create_router(resources, registry)

    attacks = [
        "print(open('/etc/shadow').read())",
        "import os\nwhile True:\n    os.fork()\n",
        "x = bytearray(4 * 1024 ** 3)\n",
        "while True:\n    pass\n",
    ]
    async with harness_for(create_router) as h:
        calls = [
            ToolCall(id=f"a{i}", name="python", arguments={"code": code})
            for i, code in enumerate(attacks)
        ]
        await h.send(
            ToolCommand(request_id="req-sbx", query="x", calls=calls), sj.cmd_subject(Step.TOOL)
        )
        outcomes = ToolResult.model_validate(h.results[0]).outcomes
        assert [o.ok for o in outcomes] == [False] * len(attacks)
        assert all(o.error for o in outcomes)
        normal = ToolCommand(
            request_id="req-ok",
            query="x",
            calls=[
                ToolCall(id="c", name="calculator", arguments={"expression": "17 * 23 + 4"}),
                ToolCall(id="p", name="python", arguments={"code": "print(17 * 23 + 4)"}),
            ],
        )
        await h.send(normal, sj.cmd_subject(Step.TOOL))
        outcomes = ToolResult.model_validate(h.results[1]).outcomes
        assert [(o.ok, o.output) for o in outcomes] == [
            (True, "17 * 23 + 4 = 395"),
            (True, "395"),
        ]
        assert h.dead == []


def test_settings_build_the_sandbox_limits() -> None:
    from workers.tool.router import sandbox_for

    box = sandbox_for(Settings(sandbox_timeout_s=3, sandbox_cpu_s=2, sandbox_memory_mb=128))
    assert (box.limits.timeout_s, box.limits.cpu_s, box.limits.memory_mb) == (3, 2, 128)
