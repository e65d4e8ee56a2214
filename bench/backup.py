"""`ragbus bench-backup`: what a backup costs while ragbus serves, and what a restore takes.

Issue 58's goals: the backup of an index of about 12k chunks with its files, its time and
size, with the queries' p95 during the backup within 1.5x of idle; then the restore's time
and the time until the first answer after it.

- **During**: `rounds` load rounds (`bench.load.run_bench`) while `ragbus backup` runs back
  to back into fresh directories, so that every round is measured with a backup under way
  (a round that outlasted the backups is flagged); then as many idle rounds.
- **Restore**: the last backup restored by `ragbus restore` into a fresh data directory with
  a nats-server and a redis-server of its own on free ports, then `ragbus up` there, timed
  until its first question is answered.

Both commands run as a user runs them, in processes of their own, with this process's
environment (the stack's settings) for the backup and a fresh one for the restore.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.during_ingest import load_round, summary
from bench.load import run_bench
from bench.stack import spawn, stop_child
from client import RagbusClient
from infra.runtime.services import free_port
from infra.sparse_copy import bytes_on_disk

READY_TIMEOUT_S = 600.0
BACKING_UP = "backup_running_throughout"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _backup(work: Path, number: int) -> dict[str, Any]:
    target = work / f"backup-{number}"
    started = time.monotonic()
    done = _cli("backup", str(target))
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"ragbus backup failed: {done.stderr.strip()[-800:]}")
    manifest = json.loads((target / "manifest.json").read_text())
    return {
        "directory": str(target),
        "seconds": round(seconds, 2),
        "bytes": sum(f["bytes"] for f in manifest["files"]),
        "bytes_on_disk": bytes_on_disk(target),
        "files": len(manifest["files"]),
        "streams": len(manifest["streams"]),
        "by_part": {
            part: sum(f["bytes"] for f in manifest["files"] if f["part"] == part)
            for part in sorted({f["part"] for f in manifest["files"]})
        },
    }


async def _backups_meanwhile(work: Path, stop: asyncio.Event) -> list[dict[str, Any]]:
    """Backups back to back until `stop`; each but the last removed once measured."""
    taken: list[dict[str, Any]] = []
    while not stop.is_set():
        taken.append(await asyncio.to_thread(_backup, work, len(taken) + 1))
        if len(taken) > 1:
            shutil.rmtree(taken[-2]["directory"], ignore_errors=True)
    return taken


async def _first_answer(api: str, question: str, deadline: float) -> float:
    """Seconds until `question` is answered on a stack that is starting."""
    async with RagbusClient(api, timeout=60) as client:
        while time.monotonic() < deadline:
            try:
                if await client.ready():
                    accepted = await client.submit(question)
                    async for message in client.stream_events(accepted["request_id"]):
                        if message.event == "done":
                            status = message.data.get("data", {}).get("status")
                            if status != "completed":
                                raise RuntimeError(f"the first answer ended {status}")
                            return time.monotonic()
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("the restored stack gave no answer in time")


async def restore_and_answer(backup: Path, work: Path, question: str) -> dict[str, Any]:
    """`ragbus restore` into a fresh data directory and services, then `ragbus up` until the
    first answer."""
    data = work / "restored"
    api_port = free_port()
    env = {
        **os.environ,
        "RAGBUS_DATA_DIR": str(data),
        "RAGBUS_API_PORT": str(api_port),
        "RAGBUS_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "RAGBUS_START_SERVICES": "true",
    }
    started = time.monotonic()
    done = await asyncio.to_thread(_cli, "restore", str(backup), env=env)
    restore_s = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"ragbus restore failed: {done.stderr.strip()[-800:]}")
    up_started = time.monotonic()
    process = spawn(["-m", "cli", "up"], env, work / "restored-up.log")
    try:
        answered = await _first_answer(
            f"http://127.0.0.1:{api_port}", question, up_started + READY_TIMEOUT_S
        )
    finally:
        await asyncio.to_thread(stop_child, process)
    return {
        "restore_seconds": round(restore_s, 2),
        "first_answer_after_up_seconds": round(answered - up_started, 2),
        "first_answer_after_restore_began_seconds": round(answered - started, 2),
    }


async def measure(
    api: str,
    queries: Sequence[str],
    work: Path,
    *,
    namespace: str | None,
    rounds: int,
    concurrency: int,
    duration_s: float,
    token: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)

    async def one(backups: asyncio.Task[Any] | None) -> dict[str, Any]:
        report = await run_bench(
            api,
            queries,
            concurrency=concurrency,
            duration_s=duration_s,
            token=token,
            namespace=namespace,
        )
        return load_round(report, backups is not None and not backups.done(), BACKING_UP)

    progress("the first backup, alone")
    alone = await asyncio.to_thread(_backup, work, 0)
    stop = asyncio.Event()
    backups = asyncio.create_task(_backups_meanwhile(work, stop))
    busy = []
    try:
        await asyncio.sleep(0.5)
        for number in range(1, rounds + 1):
            progress(f"busy round {number} of {rounds}")
            busy.append(await one(backups))
    finally:
        stop.set()
    during = await backups
    idle = []
    for number in range(1, rounds + 1):
        progress(f"idle round {number} of {rounds}")
        idle.append(await one(None))
    progress("restoring the first backup on a fresh data directory and services")
    restored = await restore_and_answer(Path(alone["directory"]), work, queries[0])
    return {
        "backup": alone,
        "backups_during_load": [{k: v for k, v in b.items() if k != "directory"} for b in during],
        "rounds": rounds,
        "concurrency": concurrency,
        "duration_s": duration_s,
        "namespace": namespace or "default",
        "busy": busy,
        "idle": idle,
        **summary(busy, idle, BACKING_UP),
        **restored,
    }
