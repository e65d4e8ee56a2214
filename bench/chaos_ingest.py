"""The chaos run's ingest job: its documents (long enough that the job is still running when its
process is killed), submitting it while the API may be down, and waiting for a job to end."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from client import ApiError, RagbusClient
from contracts.ingest import DocumentIn

CHAOS_NAMESPACE = "chaos"


def chaos_documents(count: int) -> list[DocumentIn]:
    """Documents long enough that an ingest job of them is still running when it is killed."""
    base = [
        p.read_text(encoding="utf-8")
        for p in sorted((Path(__file__).parent / "sample").glob("*.md"))
    ]
    return [
        DocumentIn(
            id=f"chaos-{n:03d}",
            title=f"Chaos document {n}",
            text=f"# Chaos document {n}\n\n{base[n % len(base)]}\n\nCopy {n} of the sample.",
            namespace=CHAOS_NAMESPACE,
        )
        for n in range(count)
    ]


SUBMIT_TIMEOUT_S = 120.0


async def submit_job(url: str, count: int, timeout_s: float = SUBMIT_TIMEOUT_S) -> str:
    """Submit the ingest job, again while the API is down (killed a moment ago, restarting):
    one `Idempotency-Key`, so a submission that did land is taken once. `TimeoutError` when
    the API has not taken it within `timeout_s`."""
    documents = [d.model_dump() for d in chaos_documents(count)]
    key = uuid.uuid4().hex
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            async with RagbusClient(url, timeout=30) as client:
                return str((await client.ingest(documents, idempotency_key=key))["job_id"])
        except httpx.HTTPError:
            await asyncio.sleep(0.5)
        except ApiError as exc:
            if exc.status < 500:
                raise
            await asyncio.sleep(0.5)
    raise TimeoutError(f"the API did not take the ingest job within {timeout_s:g} s")


async def wait_job(url: str, job_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    async with RagbusClient(url, timeout=10) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                job = await client.job(job_id)
                if job.get("status") in ("completed", "failed"):
                    return job
            await asyncio.sleep(1.0)
    return job
