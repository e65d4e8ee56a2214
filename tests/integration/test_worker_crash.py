"""A worker killed while it holds a message: the message is redelivered, one answer results."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from infra.runtime.services import free_port, start_nats, start_redis
from infra.settings import Settings
from launcher.layout import WORKER_KINDS
from tests.integration.conftest import ingest_and_wait, running, serving_api, stack_settings
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def spawn_worker(
    settings: Settings,
    kind: str,
    ready: Path,
    stall: Path | None = None,
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RAGBUS_NATS_URL": settings.nats_url,
        "RAGBUS_REDIS_URL": settings.redis_url,
        "RAGBUS_DATA_DIR": str(settings.data_dir / f"proc-{kind}"),
        "RAGBUS_START_SERVICES": "false",
        "RAGBUS_ACK_WAIT_S": str(settings.ack_wait_s),
        "RAGBUS_LOG_LEVEL": "WARNING",
    }
    cmd = [sys.executable, "-m", "tests.integration.worker_process", kind, "--ready", str(ready)]
    if stall is not None:
        cmd += ["--stall", str(stall)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env)


async def wait_for(path: Path, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Poll without blocking the loop: the in-process stack must keep running meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(path.exists):
            return
        assert process.poll() is None, f"worker exited early with {process.returncode}"
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path.name} did not appear")


async def test_worker_killed_holding_a_message_the_request_still_completes_once(
    tmp_path: Path,
) -> None:
    nats_svc = start_nats(free_port(), tmp_path / "nats")
    redis_svc = start_redis(free_port(), tmp_path / "redis", persistent=False)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        settings = stack_settings(
            nats_svc.url,
            redis_svc.url,
            tmp_path / "data",
            fuse_timeout_s=90.0,
            request_timeout_s=180.0,
            fuse_with_search=False,  # fusion is the wedged worker's step, a hop of its own
        )
        in_process = [k for k in WORKER_KINDS if k != "fuse"]
        async with running(settings, orchestrator=True, workers=in_process) as runtime:
            await ingest_and_wait(runtime)
            wedged = spawn_worker(settings, "fuse", tmp_path / "ready-1", tmp_path / "holding")
            processes.append(wedged)
            await wait_for(tmp_path / "ready-1", wedged)
            async with serving_api(runtime) as url, httpx.AsyncClient(base_url=url) as http:
                response = await http.post(
                    "/v1/queries", json={"query": "Who sculpted the Colossus of Rhodes?"}
                )
                assert response.status_code == 202
                request_id = response.json()["request_id"]

                await wait_for(tmp_path / "holding", wedged)
                wedged.send_signal(signal.SIGKILL)
                assert wedged.wait(10) == -signal.SIGKILL

                restarted = spawn_worker(settings, "fuse", tmp_path / "ready-2")
                processes.append(restarted)
                await wait_for(tmp_path / "ready-2", restarted)

                events = await read_events(http, f"/v1/queries/{request_id}/events", timeout=150)
                kinds = [e.event for e in events]
                assert kinds[-1] == "done"
                assert events[-1].data["data"]["status"] == "completed"
                assert kinds.count("answer") == 1
                fusions = [
                    e
                    for e in events
                    if e.event == "phase"
                    and e.data["data"]["phase"] == "fusion"
                    and e.data["data"]["status"] == "completed"
                ]
                assert len(fusions) == len({e.data["attempt"] for e in fusions})
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
        nats_svc.stop()
        redis_svc.stop()
