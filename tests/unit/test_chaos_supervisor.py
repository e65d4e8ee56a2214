"""The chaos harness's supervisor starts again a process that exited on its own, whatever the
kill loop is waiting on (an ingest job's submission once waited on an API that had exited, and
the run hung until pytest's timeout)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from bench.chaos import _supervise
from bench.chaos_cluster import Cluster, Role


def _started(tmp_path: Path, name: str) -> tuple[Cluster, Role, subprocess.Popen[bytes]]:
    """A cluster of one role, one process that prints its help and exits."""
    cluster = Cluster(tmp_path, roles={name: (["--help"], 1)})
    role = cluster.roles[name]
    cluster.spawn(role, 0)
    first = role.processes[0]
    assert first is not None
    return cluster, role, first


async def test_a_process_that_exits_on_its_own_is_started_again(tmp_path: Path) -> None:
    cluster, role, first = _started(tmp_path, "short-lived")
    await asyncio.to_thread(first.wait, 60)

    stop = asyncio.Event()
    supervisor = asyncio.create_task(_supervise(cluster, stop))
    try:
        for _ in range(300):  # up to 30 s
            if cluster.crash_restarts["short-lived"]:
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await supervisor
        cluster.stop()
    assert role.processes[0] is not first


async def test_a_killed_process_is_left_to_its_restart(tmp_path: Path) -> None:
    """A process the harness killed is started by the kill's own restart, never twice."""
    cluster, role, first = _started(tmp_path, "sleeper")
    assert cluster.kill("sleeper") == 0

    stop = asyncio.Event()
    supervisor = asyncio.create_task(_supervise(cluster, stop))
    await asyncio.sleep(1.5)
    stop.set()
    await supervisor
    cluster.stop()
    assert role.processes[0] is first
    assert not cluster.crash_restarts
