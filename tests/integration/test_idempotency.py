"""`Idempotency-Key` on the POSTs that start work, and a truthful 503 across a NATS outage.

The outage is a real nats-server killed with SIGKILL and restarted on the same port with
the same storage. A submission made while it is down is answered 503; the client library may
still deliver it after the restart, so the 503 says the request may still run, and a retry
with the same key gets that very request instead of a second one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import nats
import pytest
from nats.aio.msg import Msg

from infra.runtime.services import LocalService, free_port, start_nats, start_redis
from tests.integration.conftest import own_services, running, serving_api, stack_settings

pytestmark = pytest.mark.integration

QUESTION = {"query": "Who designed the Gatun Locks?"}


async def _status(http: httpx.AsyncClient, request_id: str, leaving: str) -> str:
    for _ in range(150):
        state = (await http.get(f"/v1/queries/{request_id}")).json()
        if state["status"] != leaving:
            return str(state["status"])
        await asyncio.sleep(0.1)
    return leaving


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "over-the-bus"])
async def test_the_same_key_gives_the_same_request_and_no_second_run(
    tmp_path: Path, in_process: bool
) -> None:
    """Either way a question reaches the saga (`api.submission`), a replay sends nothing
    again: one first command on the bus, and a submission only where the bus carries it."""
    submissions: list[str] = []
    commands: list[str] = []
    with own_services(tmp_path) as settings:
        settings = settings.model_copy(update={"submit_in_process": in_process})
        async with (
            running(settings, orchestrator=True, workers=()) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            nc = await nats.connect(settings.nats_url)

            def count(into: list[str]) -> Callable[[Msg], Awaitable[None]]:
                async def seen(msg: Msg) -> None:
                    into.append(json.loads(msg.data)["request_id"])

                return seen

            await nc.subscribe("rag.query.submitted", cb=count(submissions))
            await nc.subscribe("rag.cmd.>", cb=count(commands))
            key = {"Idempotency-Key": "order-0001"}
            first = await http.post("/v1/queries", json=QUESTION, headers=key)
            assert first.status_code == 202, first.text
            request_id = first.json()["request_id"]
            assert "idempotent-replayed" not in first.headers
            # taken up: it waits on its first search (which classifies it), with no worker
            assert await _status(http, request_id, "submitted") == "searching"

            again = await http.post("/v1/queries", json=QUESTION, headers=key)
            assert again.status_code == 202
            assert again.json()["request_id"] == request_id
            assert again.headers["idempotent-replayed"] == "true"

            other = await http.post("/v1/queries", json={"query": "another"}, headers=key)
            assert other.status_code == 422
            assert "Idempotency-Key" in other.json()["error"]["message"]

            # Keys are per kind of work: the same key on /v1/documents is a job of its own.
            docs = {"documents": [{"id": "d1", "title": "D", "text": "The canal opened in 1914."}]}
            job = await http.post("/v1/documents", json=docs, headers=key)
            assert job.status_code == 202, job.text
            job_again = await http.post("/v1/documents", json=docs, headers=key)
            assert job_again.status_code == 202
            assert job_again.json() == job.json()
            assert job_again.headers["idempotent-replayed"] == "true"

            await nc.flush()
            await asyncio.sleep(0.3)
            await nc.close()
            assert commands == [request_id], "one first command on the bus, not two"
            assert submissions == ([] if in_process else [request_id])


async def test_a_503_during_a_nats_outage_says_it_may_still_run_and_a_keyed_retry_runs_it_once(
    tmp_path: Path,
) -> None:
    port, nats_dir = free_port(), tmp_path / "nats"
    nats_service: LocalService = start_nats(port, nats_dir)
    redis_service = start_redis(free_port(), tmp_path / "redis", persistent=False)
    # a publish gives up after RAGBUS_PUBLISH_RETRY_S (20 s by default, for a cluster's
    # election); the 503 it ends in is the same after 2 s
    settings = stack_settings(
        nats_service.url, redis_service.url, tmp_path / "data", publish_retry_s=2.0
    )
    try:
        async with (
            running(settings, orchestrator=True, workers=()) as runtime,
            serving_api(runtime) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            os.kill(nats_service.process.pid, signal.SIGKILL)
            nats_service.process.wait(10)

            key = {"Idempotency-Key": "retry-me"}
            down = await http.post("/v1/queries", json=QUESTION, headers=key)
            assert down.status_code == 503, down.text
            assert down.headers["retry-after"].isdigit()
            message = down.json()["error"]["message"]
            assert "may still run" in message and "Idempotency-Key" in message
            named = re.search(r"request ([0-9a-f]{32})", message)
            assert named is not None, message

            unkeyed = await http.post("/v1/queries", json={"query": "no key"})
            assert unkeyed.status_code == 503
            assert "may still run" in unkeyed.json()["error"]["message"]
            assert "GET /v1/queries/" in unkeyed.json()["error"]["message"]

            nats_service = start_nats(port, nats_dir)
            nc = await nats.connect(nats_service.url)
            commands: list[str] = []

            async def command(msg: Msg) -> None:
                commands.append(json.loads(msg.data)["request_id"])

            await nc.subscribe("rag.cmd.>", cb=command)
            retried: httpx.Response | None = None
            for _ in range(60):  # until the API's connection is back
                retried = await http.post("/v1/queries", json=QUESTION, headers=key)
                if retried.status_code != 503:
                    break
                await asyncio.sleep(0.5)
            assert retried is not None and retried.status_code == 202, retried and retried.text
            assert retried.json()["request_id"] == named.group(1)
            assert await _status(http, named.group(1), "submitted") == "searching"
            for _ in range(50):  # the retry sent the first step's command the outage held back
                if named.group(1) in commands:
                    break
                await asyncio.sleep(0.1)
            await nc.close()
            assert named.group(1) in commands
    finally:
        redis_service.stop()
        nats_service.stop()
