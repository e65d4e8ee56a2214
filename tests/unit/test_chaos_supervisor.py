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


async def test_the_checks_wait_out_an_api_that_is_starting_again() -> None:
    """A status read during the checks meets a refused connection while the supervisor starts
    the API again: it reads again until the API answers, within `API_BACK_WITHIN_S`."""
    import httpx

    from bench.chaos_verify import _status
    from client import RagbusClient

    tries: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        tries.append(request.url.path)
        if len(tries) < 3:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        return httpx.Response(200, json={"status": "completed"})

    async with RagbusClient("http://api", transport=httpx.MockTransport(handler)) as client:
        assert await _status(client, "r1") == {"status": "completed"}
    assert tries == ["/v1/queries/r1"] * 3
