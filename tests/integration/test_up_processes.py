"""`ragbus up` on two processes, as a user starts it: the API, saga, classifier, generation
and critic in the parent, the other workers in a child it restarts when it dies and stops
when it stops."""

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
from tests.integration.corpus import DOCUMENTS
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def spawn_up(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "cli", "up"], cwd=ROOT, env=env)


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaped yet."""
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


async def ready(url: str, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url, timeout=2) as http:
        while time.monotonic() < deadline:
            assert process.poll() is None, f"ragbus up exited with {process.returncode}"
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError("ragbus up was not ready in time")


async def ask(http: httpx.AsyncClient, query: str) -> None:
    response = await http.post("/v1/queries", json={"query": query})
    assert response.status_code == 202, response.text
    events = await read_events(http, response.json()["events_url"], timeout=120)
    assert events[-1].event == "done"
    assert events[-1].data["data"]["status"] == "completed", events[-1].data


async def test_up_runs_two_processes_and_restarts_its_worker_child(tmp_path: Path) -> None:
    nats_svc = start_nats(free_port(), tmp_path / "nats")
    redis_svc = start_redis(free_port(), tmp_path / "redis", persistent=False)
    port = free_port()
    env = {
        **os.environ,
        "RAGBUS_NATS_URL": nats_svc.url,
        "RAGBUS_REDIS_URL": redis_svc.url,
        "RAGBUS_DATA_DIR": str(tmp_path / "data"),
        "RAGBUS_START_SERVICES": "false",
        "RAGBUS_API_PORT": str(port),
        "RAGBUS_UP_PROCESSES": "2",
        "RAGBUS_LOG_LEVEL": "WARNING",
    }
    up = spawn_up(env)
    url = f"http://127.0.0.1:{port}"
    try:
        await ready(url, up)
        (child,) = children(up.pid)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            documents = [d.model_dump(mode="json") for d in DOCUMENTS]
            job_id = (await http.post("/v1/documents", json={"documents": documents})).json()[
                "job_id"
            ]
            for _ in range(600):
                job = (await http.get(f"/v1/ingest/{job_id}")).json()
                if job["status"] != "running":
                    break
                await asyncio.sleep(0.2)
            assert job["status"] == "completed", job
            await ask(http, "Who sculpted the Colossus of Rhodes?")
            # /metrics reports the roles of both processes: generation runs in the parent,
            # search (which classifies a plain question) and fusion in the child.
            # with an operator key configured (RAGBUS_METRICS_TOKEN, or the admin token),
            # /metrics needs it: send it whenever one is
            key = env.get("RAGBUS_METRICS_TOKEN") or env.get("RAGBUS_ADMIN_TOKEN")
            scrape = await http.get(
                "/metrics", headers={"Authorization": f"Bearer {key}"} if key else {}
            )
            assert scrape.status_code == 200, scrape.text
            metrics = scrape.text
            for phase in ("intent_classification", "fusion", "generation"):
                assert f'ragbus_step_seconds_count{{phase="{phase}"}}' in metrics, phase

            os.kill(child, signal.SIGKILL)  # the parent starts another one
            for _ in range(300):
                now = children(up.pid)
                if now and now != [child]:
                    break
                await asyncio.sleep(0.1)
            assert now and child not in now
            await ask(http, "Who designed the Lighthouse of Alexandria?")
        replacement = now[0]
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0
        assert gone(replacement)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
        nats_svc.stop()
        redis_svc.stop()
