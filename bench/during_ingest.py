"""`ragbus bench-during-ingest`: how much an ingest slows the queries beside it.

Issue 46's goal is that parsing never slows queries: `ragbus bench`'s p95 during an ingest of
files stays within 1.5x of idle. One window of a few seconds is noisy (a single round ran
from 1.1x to 3.2x on one build), so this runs `rounds` load rounds while `ragbus ingest`
works through a folder, then as many once it has finished, on the same stack, and reports the
ratio of the mean p95s and the worst busy round's ratio. A busy round that outlasted the
ingest is flagged, and the goal not called met: its figures are partly idle ones. So is a run
with failed requests: a round whose requests the tenant's quota refused (429) was held below
the load it was asked for, and compares nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.load import run_bench

GOAL_RATIO = 1.5
INGESTING = "ingest_running_throughout"


def load_round(report: dict[str, Any], busy: bool, busy_key: str) -> dict[str, Any]:
    """One load round's figures; `busy_key` names whether the work it was measured beside ran
    through the whole round."""
    return {
        "p50_ms": report["latency_ms"]["p50"],
        "p95_ms": report["latency_ms"]["p95"],
        "p99_ms": report["latency_ms"]["p99"],
        "throughput_qps": round(report["throughput_qps"], 2),
        "errors": report["errors"],
        "rate_limited": report.get("rate_limited", 0),
        busy_key: busy,
    }


def summary(
    busy: Sequence[dict[str, Any]], idle: Sequence[dict[str, Any]], busy_key: str = INGESTING
) -> dict[str, Any]:
    """The ratios the goal is judged on, from the rounds."""
    busy_p95 = sum(r["p95_ms"] for r in busy) / len(busy)
    idle_p95 = sum(r["p95_ms"] for r in idle) / len(idle)
    ratio = busy_p95 / idle_p95
    errors = sum(r.get("errors", 0) for r in (*busy, *idle))
    return {
        "busy_p95_ms": round(busy_p95, 1),
        "idle_p95_ms": round(idle_p95, 1),
        "ratio": round(ratio, 2),
        "worst_round_ratio": round(max(r["p95_ms"] for r in busy) / idle_p95, 2),
        "goal_ratio": GOAL_RATIO,
        "errors": errors,
        "met": ratio <= GOAL_RATIO and errors == 0 and all(r[busy_key] for r in busy),
    }


def start_ingest(folder: Path, namespace: str) -> subprocess.Popen[bytes]:
    """`ragbus ingest FOLDER` as a user would run it (it talks to NATS, not the API)."""
    command = [sys.executable, "-m", "cli", "ingest", str(folder), "--namespace", namespace]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def measure(
    api: str,
    queries: Sequence[str],
    folder: Path,
    *,
    namespace: str | None,
    rounds: int,
    concurrency: int,
    duration_s: float,
    delay_s: float,
    token: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Rounds of load while `folder` is ingested into a namespace of its own, then as many
    once it is done."""

    async def one(ingest: subprocess.Popen[bytes] | None) -> dict[str, Any]:
        report = await run_bench(
            api,
            queries,
            concurrency=concurrency,
            duration_s=duration_s,
            token=token,
            namespace=namespace,
        )
        return load_round(report, ingest is not None and ingest.poll() is None, INGESTING)

    target = f"during-ingest-{uuid.uuid4().hex[:8]}"
    ingest = start_ingest(folder, target)
    started = time.monotonic()
    try:
        progress(f"ingesting {folder} into {target}; load starts in {delay_s:.0f} s")
        await asyncio.sleep(delay_s)
        busy = []
        for number in range(1, rounds + 1):
            progress(f"busy round {number} of {rounds}")
            busy.append(await one(ingest))
        progress("waiting for the ingest to finish")
        _, stderr = await asyncio.to_thread(ingest.communicate)
    finally:
        if ingest.poll() is None:
            ingest.terminate()
            ingest.wait()
    if ingest.returncode != 0:
        raise RuntimeError(f"ragbus ingest {folder} failed: {stderr.decode()[-500:]}")
    ingest_s = time.monotonic() - started
    idle = []
    for number in range(1, rounds + 1):
        progress(f"idle round {number} of {rounds}")
        idle.append(await one(None))
    return {
        "folder": str(folder),
        "ingest_namespace": target,
        "ingest_seconds": round(ingest_s, 1),
        "rounds": rounds,
        "concurrency": concurrency,
        "duration_s": duration_s,
        "delay_s": delay_s,
        "namespace": namespace or "default",
        "busy": busy,
        "idle": idle,
        **summary(busy, idle, INGESTING),
    }
