"""`ragbus bench-sync`'s run (`bench.sync` says what is measured, and how)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.load import percentile
from bench.stack import served_stack
from bench.sync import (
    build_folder,
    corpus_rows,
    rewrite,
    sample_paths,
    searchable,
    stored_leftovers,
    wait_job,
)
from infra.settings import Settings

SOURCE = "bench"
SYNC_SPACE = "bench-sync"
INGEST_SPACE = "bench-ingest"
WARM_SPACE = "bench-warm-up"
WARM_UP_FILES = 40
JOB_TIMEOUT_S = 6 * 3600.0


def _document_id(folder: Path, path: Path) -> str:
    from infra.runtime.ingest_producer import document_id_for

    return f"{SOURCE}:{document_id_for(path.relative_to(folder).as_posix())}"


def _warm_up_folder(paths: list[Path], folder: Path, warm: Path) -> None:
    shutil.rmtree(warm, ignore_errors=True)
    for path in paths:
        target = warm / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


async def _ingest(
    env: dict[str, str], folder: Path, log: Path, namespace: str = INGEST_SPACE
) -> dict[str, Any]:
    """`ragbus ingest FOLDER --namespace bench-ingest`, the command itself, timed from its
    start to its end (it waits for the job to complete)."""
    started = time.perf_counter()
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli",
            "ingest",
            str(folder),
            "--namespace",
            namespace,
            "--timeout",
            str(JOB_TIMEOUT_S),
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        code = await process.wait()
    seconds = time.perf_counter() - started
    if code != 0:
        tail = (await asyncio.to_thread(log.read_text))[-2000:]
        raise RuntimeError(f"ragbus ingest exited {code}: {tail}")
    return {"seconds": round(seconds, 2), "exit_status": code}


async def run_bench_sync(
    corpora: list[Path], files: int, work: Path, seed: int, writes: int, console: Console
) -> dict[str, Any]:
    from client import RagbusClient
    from infra.runtime.files import FileStore
    from infra.runtime.redis_client import connect_redis
    from infra.sources.audit import leftovers

    folder, data_dir = work / "files", work / "data"
    for old in (folder, data_dir):
        shutil.rmtree(old, ignore_errors=True)
    rows, distinct = corpus_rows(corpora, files)
    with console.status(f"writing {len(rows):,} files"):
        paths = await asyncio.to_thread(build_folder, rows, folder, seed)
    kinds: dict[str, int] = {}
    for path in paths:
        kinds[path.suffix] = kinds.get(path.suffix, 0) + 1
    env = {
        "RAGBUS_SOURCE_ROOTS": str(work),
        "RAGBUS_QUOTA_REQUESTS_PER_S": "0",
        "RAGBUS_SOURCE_MIN_EVERY_S": "1",
    }
    report: dict[str, Any] = {
        "files": len(paths),
        "kinds": kinds,
        "corpora": [str(path) for path in corpora],
        "distinct_rows": distinct,
    }
    async with served_stack(
        ["-m", "cli", "up"],
        env,
        ready_timeout_s=900,
        data_dir=data_dir,
        log_path=work / "stack.log",
    ) as stack:
        settings = Settings(
            nats_url=stack.nats_url,
            redis_url=stack.redis_url,
            data_dir=data_dir,
            start_services=False,
        )
        console.print(f"stack up at {stack.url}; `ragbus ingest` of the folder first")
        stack_env = {
            **os.environ,
            "RAGBUS_NATS_URL": stack.nats_url,
            "RAGBUS_REDIS_URL": stack.redis_url,
            "RAGBUS_DATA_DIR": str(data_dir),
            "RAGBUS_START_SERVICES": "false",
        }
        # both timed runs find the stack warm: its models loaded, its stores open
        warm = work / "warm-up"
        await asyncio.to_thread(_warm_up_folder, paths[:WARM_UP_FILES], folder, warm)
        with console.status("warming the stack up"):
            await _ingest(stack_env, warm, work / "warm-up.log", WARM_SPACE)
        with console.status("ragbus ingest"):
            report["ingest"] = await _ingest(stack_env, folder, work / "ingest.log")
        async with RagbusClient(stack.url, timeout=120) as client:
            started = time.perf_counter()
            made = await client.create_source(
                {"name": SOURCE, "location": str(folder), "namespace": SYNC_SPACE}
            )
            with console.status("the source's first sync"):
                job = await wait_job(client, made["job_id"], JOB_TIMEOUT_S)
            first_s = time.perf_counter() - started
            report["first_sync"] = {"seconds": round(first_s, 2), "job": _counts(job)}
            report["first_sync_speed_vs_ingest"] = round(report["ingest"]["seconds"] / first_s, 3)

            changed = list(sample_paths(paths, 0.01, seed))
            for n, path in enumerate(changed):
                rewrite(path, f"resync{seed}x{n}")
            started = time.perf_counter()
            queued = await client.sync_source(SOURCE)
            job = await wait_job(client, queued["job_id"], JOB_TIMEOUT_S)
            resync_s = time.perf_counter() - started
            report["resync_1pct"] = {
                "files_changed": len(changed),
                "seconds": round(resync_s, 2),
                "fraction_of_first_sync": round(resync_s / first_s, 4),
                "job": _counts(job),
            }

            await client.set_source_schedule(SOURCE, watch=True)
            await asyncio.sleep(3.0)  # the scheduler's next tick starts the watch
            latencies: list[float] = []
            missed = 0
            for n, path in enumerate(sample_paths(paths, writes / len(paths), seed + 1)):
                marker = f"watchword{seed}q{n}z"
                rewrite(path, marker)
                took = await searchable(client, marker, _document_id(folder, path), SYNC_SPACE, 60)
                if took is None:
                    missed += 1
                else:
                    latencies.append(took)
                await asyncio.sleep(1.0)
            await client.set_source_schedule(SOURCE, watch=False)
            await asyncio.sleep(2.0)
            report["watch"] = {
                "writes": len(latencies) + missed,
                "missed_within_60_s": missed,
                "p50_s": round(percentile(latencies, 50) or 0.0, 3),
                "p95_s": round(percentile(latencies, 95) or 0.0, 3),
                "max_s": round(max(latencies, default=0.0), 3),
            }

            gone = list(sample_paths([p for p in paths if p not in changed], 0.01, seed + 2))
            for path in gone:
                path.unlink()
            queued = await client.sync_source(SOURCE)
            job = await wait_job(client, queued["job_id"], JOB_TIMEOUT_S)
            ids = [_document_id(folder, path) for path in gone]
            report["deleted"] = {"files": len(gone), "job": _counts(job)}
            redis = connect_redis(stack.redis_url)
            import nats

            nc = await nats.connect(stack.nats_url)
            try:
                live = await leftovers(
                    SYNC_SPACE,
                    ids,
                    vectors=None,
                    graph=None,
                    files=FileStore(nc.jetstream(), settings, 10.0),
                    redis=redis,
                )
            finally:
                await nc.close()
                await redis.aclose()
    child_env = {**os.environ, "RAGBUS_DATA_DIR": str(data_dir)}
    stored = await asyncio.to_thread(stored_leftovers, child_env, SYNC_SPACE, ids)
    report["orphans"] = {**stored, **live}
    report["orphans_total"] = sum(report["orphans"].values())
    return report


def _counts(job: dict[str, Any]) -> dict[str, Any]:
    keys = ("status", "expected", "documents_done", "documents_unchanged", "documents_failed")
    return {key: job.get(key) for key in keys}
