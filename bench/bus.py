"""`ragbus bench-bus`: the broker path's own cost, with instant engines (`bench.instant`).

Starts a nats-server and a redis-server on free ports with temporary storage, serves the
instant stack in a child process, and drives it with the same closed loop as `ragbus bench`.
Whatever CPU a request costs here is the bus, the saga, the worker runtime, the API and its
event stream: no model and no store did any work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.load import run_bench
from infra.runtime.services import free_port, start_nats, start_redis

READY_TIMEOUT_S = 60.0


def _spawn(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.instant"], env=env, stdout=log, stderr=log
        )


def _wait_ready(url: str, child: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the instant stack exited with {child.returncode}: {tail}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the instant stack was not ready within {READY_TIMEOUT_S:g} s")


async def bench_bus(
    queries: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ragbus-bench-bus-") as tmp:
        root = Path(tmp)
        nats = start_nats(free_port(), root / "nats")
        redis = start_redis(free_port(), root / "redis", persistent=False)
        port = free_port()
        env = {
            **os.environ,
            "RAGBUS_NATS_URL": nats.url,
            "RAGBUS_REDIS_URL": redis.url,
            "RAGBUS_DATA_DIR": str(root / "data"),
            "RAGBUS_START_SERVICES": "false",
            "RAGBUS_API_PORT": str(port),
            "RAGBUS_LOG_LEVEL": "WARNING",
            # The instant vectors are random, so the real critic would send every request round
            # again; one attempt is what a request costs (NFCorpus averages 1.05 attempts).
            "RAGBUS_MAX_ATTEMPTS": "1",
            **(extra_env or {}),
        }
        log_path = root / "stack.log"
        child = _spawn(env, log_path)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, child, log_path)
            report = await run_bench(
                url,
                queries,
                concurrency=concurrency,
                duration_s=duration_s,
                warmup_s=warmup_s,
                pids={
                    "ragbus": child.pid,
                    "nats-server": nats.process.pid,
                    "redis-server": redis.process.pid,
                },
            )
        finally:
            child.terminate()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
            redis.stop()
            nats.stop()
    report["stack"] = "instant engines: real API, orchestrator, workers, nats-server, redis-server"
    return report
