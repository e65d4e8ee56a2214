"""Sandbox runs cannot starve each other, leave nothing behind, and never fall back to a weaker
isolation. Real processes (bwrap or unshare where the machine has them)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import workers.tool.sandbox as sandbox_module
from contracts.models import ToolCall
from workers.tool.python_tool import register_python
from workers.tool.registry import ToolRegistry
from workers.tool.sandbox import Sandbox, SandboxUnavailable
from workers.tool.sandbox_procs import SANDBOX_UIDS, processes
from workers.tool.sandbox_run import SandboxLimits, SandboxRun

LIMITS = SandboxLimits(timeout_s=8.0, cpu_s=2, memory_mb=256, max_procs=16, file_size_mb=4)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="per-run users need a root worker")

SLEEPERS = """
import os, time
for _ in range(13):
    if os.fork() == 0:
        time.sleep(4)
        os._exit(0)
print("forked")
time.sleep(4)
"""


async def _isolated() -> Sandbox:
    sandbox = Sandbox(LIMITS, "auto")
    try:
        await sandbox.ready()
    except SandboxUnavailable as exc:
        pytest.skip(f"no isolation on this machine: {exc}")
    return sandbox


def _leftovers() -> set[int]:
    """Processes of a sandbox user, and bwrap zombies whoever their parent (before the worker
    reaped them, each run left one to PID 1)."""
    return {
        p.pid
        for p in processes()
        if p.uid in SANDBOX_UIDS or (p.state == "Z" and p.name == "bwrap")
    }


@as_root
async def test_one_run_forking_a_dozen_processes_does_not_starve_another() -> None:
    sandbox = await _isolated()
    busy = asyncio.create_task(sandbox.run(SLEEPERS))
    await asyncio.sleep(1.5)  # the sleepers exist now
    other = await sandbox.run("print('still room')")
    assert other.ok, other.stderr
    assert other.stdout.strip() == "still room"
    assert (await busy).stdout.startswith("forked")


async def _ours_left(before: set[int], uids: set[int | None], wait_s: float = 5.0) -> set[int]:
    """What the runs left: a process of a user id they ran as, or a bwrap zombie handed to this
    process (the subreaper) or to PID 1; anything alive before them is not theirs.

    Other pytest workers run sandboxes at the same time, each as its own subreaper, and may
    take one of these ids again once a run gave it back: such a run's processes end within
    its time limit, a leak does not, so this waits for the set to empty before answering."""
    me = os.getpid()

    def left() -> set[int]:
        return {
            p.pid
            for p in processes()
            if p.pid not in before
            and (p.uid in uids or (p.state == "Z" and p.name == "bwrap" and p.ppid in (me, 1)))
        }

    for _ in range(round(wait_s / 0.2)):
        if not (found := left()):
            return found
        await asyncio.sleep(0.2)
    return left()


async def test_twenty_runs_back_to_back_all_work_and_leave_no_process_behind() -> None:
    sandbox = await _isolated()
    # Every bwrap alive now is an earlier test's: one that turns zombie meanwhile is not ours.
    before = _leftovers() | {p.pid for p in processes() if p.name == "bwrap"}
    runs = [await sandbox.run(f"print({n})") for n in range(20)]
    assert [r.ok for r in runs] == [True] * 20, [r.stderr for r in runs if not r.ok]
    uids: set[int | None] = {r.uid for r in runs} if os.geteuid() == 0 else set(SANDBOX_UIDS)
    assert await _ours_left(before, uids) == set()


@as_root
async def test_a_descendant_that_leaves_the_process_group_is_killed_with_the_run() -> None:
    sandbox = await _isolated()
    escape = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(30)\n"
        "    os._exit(0)\n"
        "print('left one behind')\n"
    )
    run = await sandbox.run(escape)
    assert run.ok and "left one behind" in run.stdout
    assert run.uid in SANDBOX_UIDS
    await asyncio.sleep(0.2)
    survivors = [p for p in processes() if p.uid == run.uid and p.state != "Z"]
    assert survivors == [], "nothing of the run's user survives the call"


async def test_with_no_isolation_the_python_tool_refuses_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name, **_: None)
    sandbox = Sandbox(LIMITS, "auto")
    await sandbox.warm_up()  # a worker without isolation still starts
    registry = ToolRegistry(timeout_s=10)
    register_python(registry, sandbox)
    outcome = await registry.call(ToolCall(id="p", name="python", arguments={"code": "print(1)"}))
    assert not outcome.ok
    assert "neither bwrap nor `unshare -rn` works" in (outcome.error or "")
    assert sandbox.isolation is None, "never `none` unless configured"


async def test_a_probe_that_fails_for_a_moment_does_not_weaken_the_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sandbox_module.shutil.which("bwrap") is None:
        pytest.skip("bwrap is not installed")
    real = sandbox_module.execute
    calls: list[str] = []

    async def flaky(code: str, limits: Any, isolation: str, *args: Any) -> Any:
        calls.append(isolation)
        if len(calls) == 1:  # no free process slot, once
            return SandboxRun(1, "", "Can't fork", False, False, isolation, 1.0)
        return await real(code, limits, isolation, *args)

    monkeypatch.setattr(sandbox_module, "execute", flaky)
    monkeypatch.setattr(sandbox_module, "PROBE_PAUSE_S", 0.01)
    sandbox = Sandbox(LIMITS, "auto")
    if not await sandbox._works("bwrap"):  # the machine itself cannot run bwrap
        pytest.skip("bwrap does not work here")
    calls.clear()
    assert await Sandbox(LIMITS, "auto").ready() == "bwrap"
    assert calls[:2] == ["bwrap", "bwrap"]
