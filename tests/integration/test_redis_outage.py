"""Redis goes away and comes back: the API says 503 with `Retry-After` while it is down, and
serves again at once when it returns (no dead pooled connections). The outage is a real
redis-server killed with SIGKILL and restarted on the same port."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx
import pytest

from infra.runtime.services import LocalService, free_port, start_nats, start_redis
from infra.settings import Settings
from tests.integration.conftest import running, serving_api, stack_settings

pytestmark = pytest.mark.integration


def _kill(service: LocalService) -> None:
    os.kill(service.process.pid, signal.SIGKILL)
    service.process.wait(10)


async def test_api_answers_503_during_a_redis_outage_and_recovers_at_once(
    tmp_path: Path,
) -> None:
    # Its own servers: another test's orchestrator on a shared nats-server would take the
    # submissions from the shared work queue.
    nats_server = start_nats(free_port(), tmp_path / "nats")
    port, redis_dir = free_port(), tmp_path / "redis"  # killed and restarted below
    redis = start_redis(port, redis_dir, persistent=True)
    settings: Settings = stack_settings(nats_server.url, redis.url, tmp_path / "data")
    try:
        async with (
            running(settings, orchestrator=True, workers=()) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            accepted = await http.post("/v1/queries", json={"query": "before the outage"})
            assert accepted.status_code == 202, accepted.text
            request_id = accepted.json()["request_id"]
            assert (await http.get(f"/v1/queries/{request_id}")).status_code == 200
            await asyncio.sleep(1.2)  # AOF is fsynced every second

            _kill(redis)
            down = await http.get(f"/v1/queries/{request_id}")
            assert down.status_code == 503, down.text
            assert down.headers.get("retry-after", "").isdigit()
            assert down.json()["error"]["code"] == "unavailable"
            assert "redis" in down.json()["error"]["message"].lower()
            submit = await http.post("/v1/queries", json={"query": "during the outage"})
            assert submit.status_code == 503, submit.text
            assert submit.headers.get("retry-after", "").isdigit()
            ready = await http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["checks"]["redis"] != "ok"

            redis = start_redis(port, redis_dir, persistent=True)
            codes, after = [], []
            for _ in range(8):
                codes.append((await http.get(f"/v1/queries/{request_id}")).status_code)
                submitted = await http.post("/v1/queries", json={"query": "after"})
                codes.append(submitted.status_code)
                after.append(submitted.json().get("request_id"))
            assert codes == [200, 202] * 8
            ready = await http.get("/readyz")
            assert ready.json()["checks"]["redis"] == "ok", ready.text
            # The orchestrator's own pooled connections healed too: it takes up the new
            # requests (there is no search worker here, so they wait in `searching`, on the
            # first search, which classifies them too).
            for _ in range(100):
                states = [(await http.get(f"/v1/queries/{rid}")).json() for rid in after]
                if all(s["status"] == "searching" for s in states):
                    break
                await asyncio.sleep(0.1)
            assert [s["status"] for s in states] == ["searching"] * 8
    finally:
        redis.stop()
        nats_server.stop()
