"""Real nats-server and redis-server on free ports with temporary storage, and a ragbus stack.

Never the machine's own services on 4222 / 6379: every server here is started by a
fixture and stopped with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from api.app import create_app
from infra.runtime.ingest_jobs import read_job
from infra.runtime.ingest_producer import publish_job
from infra.runtime.nats_cluster import NatsCluster
from infra.runtime.services import LocalService, free_port, start_nats, start_redis
from infra.settings import Settings
from launcher.layout import WORKER_KINDS
from launcher.runtime import Runtime
from tests.integration.corpus import DOCUMENTS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    service = start_nats(free_port(), tmp_path_factory.mktemp("nats"))
    yield service
    service.stop()


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[LocalService]:
    """A nats-server of the test's own: the session's may carry a tenants test's
    authorization."""
    service = start_nats(free_port(), tmp_path / "nats")
    yield service
    service.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    service = start_redis(free_port(), tmp_path_factory.mktemp("redis"), persistent=False)
    yield service
    service.stop()


def stack_settings(nats_url: str, redis_url: str, data_dir: Path, **overrides: object) -> Settings:
    """Quick redelivery, so crash paths resolve in seconds; generous step deadlines, so a busy
    machine (CI runs on a developer's) never degrades a step whose result a test asserts.
    Deadlines that expire on purpose are `test_degradation.py`'s, with their own stack."""
    values: dict[str, object] = {
        "nats_url": nats_url,
        "redis_url": redis_url,
        "data_dir": data_dir,
        "start_services": False,
        "ack_wait_s": 3.0,
        "retry_delay_s": 0.2,
        "classify_timeout_s": 60.0,
        "search_timeout_s": 60.0,
        "fuse_timeout_s": 60.0,
        "generate_timeout_s": 90.0,
        "critic_timeout_s": 60.0,
        "tool_timeout_s": 60.0,
        "request_timeout_s": 180.0,
        "deadline_poll_s": 0.1,
        "log_level": "WARNING",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """Three nats-server nodes routed to each other, a module's own (its tests kill them)."""
    nodes = NatsCluster(tmp_path_factory.mktemp("nats-cluster")).start()
    yield nodes
    nodes.stop()


@pytest.fixture(scope="module")
def cluster_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    """The redis-server beside a module's cluster."""
    service = start_redis(free_port(), tmp_path_factory.mktemp("redis-cluster"), persistent=False)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def settings(
    nats_server: LocalService, redis_server: LocalService, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    return stack_settings(nats_server.url, redis_server.url, tmp_path_factory.mktemp("data"))


@contextlib.contextmanager
def own_services(
    root: Path, *, nats_max_payload: int | None = None, **overrides: object
) -> Iterator[Settings]:
    """A nats-server and a redis-server of the test's own (free ports, storage under `root`),
    and stack settings pointing at them; both stopped on exit. For tests whose messages no
    session-wide worker may take, or whose services they kill."""
    nats_options = {} if nats_max_payload is None else {"max_payload": nats_max_payload}
    nats_service = start_nats(free_port(), root / "nats", **nats_options)  # type: ignore[arg-type]
    try:
        redis_service = start_redis(free_port(), root / "redis", persistent=False)
        try:
            yield stack_settings(nats_service.url, redis_service.url, root / "data", **overrides)
        finally:
            redis_service.stop()
    finally:
        nats_service.stop()


@contextlib.asynccontextmanager
async def running(settings: Settings, **kwargs: object) -> AsyncIterator[Runtime]:
    runtime = Runtime(settings, **kwargs)  # type: ignore[arg-type]
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


@contextlib.asynccontextmanager
async def serving_api(runtime: Runtime) -> AsyncIterator[str]:
    assert runtime.broker is not None
    app = create_app(runtime.settings, broker=runtime.broker, orchestrator=runtime.orchestrator)
    async with serving(app) as url:
        yield url


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[str]:
    """`app` under uvicorn on a free port, until the block ends; its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def ingest_and_wait(runtime: Runtime, timeout: float = 120.0) -> str:
    assert runtime.resources is not None
    receipt = await publish_job(runtime.resources.bus, DOCUMENTS)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = await read_job(runtime.resources.redis(), receipt.job_id)
        if job and job["status"] in ("completed", "failed"):
            assert job["status"] == "completed", job
            return receipt.job_id
        await asyncio.sleep(0.2)
    raise AssertionError(f"ingest job {receipt.job_id} did not finish")


@pytest.fixture(scope="session")
async def stack(settings: Settings) -> AsyncIterator[Runtime]:
    """API-less runtime with the orchestrator and every worker kind, corpus ingested."""
    async with running(settings, orchestrator=True, workers=WORKER_KINDS) as runtime:
        await ingest_and_wait(runtime)
        yield runtime


@pytest.fixture(scope="session")
async def api_url(stack: Runtime) -> AsyncIterator[str]:
    async with serving_api(stack) as url:
        yield url


@pytest.fixture
async def http(api_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as client:
        yield client
