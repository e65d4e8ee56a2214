"""A child started through `stopping_with_parent` stops when the process that started it dies,
SIGKILLed or not, though nothing ran in it between fork and exec (MCP's stdio transport takes
no `preexec_fn`: a trusted MCP server is started so)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from infra.runtime.parent_death import stopping_with_parent

STARTER = """
import signal, subprocess, sys, time
from infra.runtime.parent_death import stopping_with_parent
command, args = stopping_with_parent("sleep", ["60"])
child = subprocess.Popen([command, *args])
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _program(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().split(b"\0")[0].rsplit(b"/", 1)[-1]
    except FileNotFoundError:
        return b""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_child_stops_when_its_starter_is_killed() -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    deadline = time.monotonic() + 5
    while _program(child) != b"sleep" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _program(child) == b"sleep"  # it became the command
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_the_command_line_runs_the_command_with_its_arguments() -> None:
    command, args = stopping_with_parent("echo", ["one", "two"])
    done = subprocess.run([command, *args], capture_output=True, text=True, check=True)
    assert done.stdout == "one two\n"
