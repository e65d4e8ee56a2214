"""A ragbus stack in a child process on its own nats-server and redis-server (free ports,
temporary storage): what `ragbus bench-bus` and `ragbus bench-scale` start, measure and stop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.cpu import API_PROCESS, REPLICA_PROCESS, STORES_PROCESS
from infra.runtime.services import free_port, start_nats, start_redis

ROOT = Path(__file__).resolve().parents[1]
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Stack:
    url: str
    pids: dict[str, int]
    """The stack's processes (`ragbus` and its worker child, `ragbus-child`), nats-server and
    redis-server, for `run_bench`'s CPU per process."""
    nats_url: str = ""
    redis_url: str = ""


def child_pids(pid: int) -> list[int]:
    """The processes `pid` started (`ragbus up`'s worker child), from /proc (none elsewhere)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found.extend(int(word) for word in task.read_text().split())
        except OSError:
            continue
    return sorted(set(found))


def stack_pids(pid: int) -> dict[str, int]:
    """The stack's own processes by name: `ragbus`, then `ragbus-child` (and `-2`, ...), then
    the store owner's search replicas, `ragbus-replica` (and `-2`, ...)."""
    pids = {API_PROCESS: pid}
    children = child_pids(pid)
    for n, child in enumerate(children, start=1):
        pids[STORES_PROCESS if n == 1 else f"{STORES_PROCESS}-{n}"] = child
    replicas = [p for child in children for p in child_pids(child) if is_replica(p)]
    for n, replica in enumerate(replicas, start=1):
        pids[REPLICA_PROCESS if n == 1 else f"{REPLICA_PROCESS}-{n}"] = replica
    return pids


def is_replica(pid: int) -> bool:
    """Whether `pid` is a search replica (`python -m cli search-replica NAME`)."""
    try:
        return b"search-replica" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


async def replicas_serving(nats_url: str, count: int, timeout_s: float) -> float:
    """Wait until `count` search replicas serve from a copy that holds every write (their
    announcements against the owner's version); the seconds it took. `TimeoutError` past
    `timeout_s`."""
    import nats

    from contracts import subjects as sj
    from contracts.replicas import ReplicaSeen, StoresVersion

    started = time.perf_counter()
    client = await nats.connect(nats_url)
    seen: dict[str, StoresVersion | None] = {}

    async def note(msg: Any) -> None:
        announced = ReplicaSeen.model_validate_json(msg.data)
        seen[announced.replica] = announced.version

    try:
        await client.subscribe(sj.SEARCH_REPLICAS, cb=note)
        while time.perf_counter() - started < timeout_s:
            try:
                reply = await client.request(sj.STORES_VERSION, b"", timeout=2.0)
            except Exception:
                await asyncio.sleep(0.5)
                continue
            version = StoresVersion.model_validate_json(reply.data)
            if sum(1 for v in seen.values() if v == version) >= count:
                return time.perf_counter() - started
            await asyncio.sleep(0.5)
    finally:
        await client.close()
    raise TimeoutError(f"{count} search replica(s) not serving after {timeout_s:g} s")


def _tail(log_path: Path) -> str:
    return log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""


def spawn(args: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """`python ARGS` from the repository's root, its output appended to `log_path`."""
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, *args], env=env, cwd=ROOT, stdout=log, stderr=log)


def stop_child(child: subprocess.Popen[bytes]) -> None:
    """Terminate, then kill after `STOP_TIMEOUT_S`."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)


async def _wait_ready(
    url: str, child: subprocess.Popen[bytes], log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise RuntimeError(f"the stack exited with {child.returncode}: {_tail(log_path)}")
            try:
                if (await http.get(f"{url}/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the stack was not ready within {timeout_s:g} s (see {log_path})")


@asynccontextmanager
async def served_stack(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    ready_timeout_s: float,
    data_dir: Path | None = None,
    log_path: Path | None = None,
) -> AsyncIterator[Stack]:
    """`python <args>` with the `RAGBUS_*` settings that point it at fresh services and a free
    API port (plus `env`), ready on `/readyz`; stopped with its services on exit. `data_dir`
    and `log_path` default to the temporary directory."""
    with tempfile.TemporaryDirectory(prefix="ragbus-bench-") as tmp:
        root = Path(tmp)
        nats = start_nats(free_port(), root / "nats")
        try:
            redis = start_redis(free_port(), root / "redis", persistent=False)
        except BaseException:
            nats.stop()
            raise
        port = free_port()
        log = log_path or root / "stack.log"
        full_env = {
            **os.environ,
            "RAGBUS_NATS_URL": nats.url,
            "RAGBUS_REDIS_URL": redis.url,
            "RAGBUS_DATA_DIR": str(data_dir or root / "data"),
            "RAGBUS_START_SERVICES": "false",
            "RAGBUS_API_HOST": "127.0.0.1",
            "RAGBUS_API_PORT": str(port),
            "RAGBUS_LOG_LEVEL": "WARNING",
            **env,
        }
        child = spawn(args, full_env, log)
        url = f"http://127.0.0.1:{port}"
        try:
            await _wait_ready(url, child, log, ready_timeout_s)
            yield Stack(
                url,
                {
                    **stack_pids(child.pid),
                    "nats-server": nats.process.pid,
                    "redis-server": redis.process.pid,
                },
                nats_url=nats.url,
                redis_url=redis.url,
            )
        finally:
            await asyncio.to_thread(stop_child, child)
            redis.stop()
            nats.stop()
