"""Publishing an ingest job over the bus and following its progress (`ragbus ingest`, `demo`).

The CLI is only a producer: it publishes documents and reads the job's progress
events; the ingest workers do the chunking, embedding and indexing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import nats
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.event_stream import ingest_events
from contracts.ingest import DocumentIn
from infra.runtime.bus import Bus, create_broker, declare_streams
from infra.runtime.ingest_producer import JobReceipt, check_sizes, publish_job
from infra.settings import Settings


async def ingest_and_follow(
    settings: Settings,
    documents: Sequence[DocumentIn],
    console: Console,
    *,
    job_id: str | None = None,
    timeout_s: float = 600.0,
) -> tuple[JobReceipt, dict[str, Any] | None]:
    """Publish the job, then show a progress bar until it is `completed` or `failed`.

    Returns the receipt and the last progress data seen (None if nothing came in time).
    """
    broker = create_broker(settings, name="ragbus-ingest")
    await broker.connect()
    nc = await nats.connect(
        settings.nats_servers,
        name="ragbus-ingest-progress",
        user_credentials=settings.nats_credentials,
    )
    try:
        js = nc.jetstream()
        # Idempotent: lets a producer run before any worker has declared the streams.
        await declare_streams(js, settings)
        check_sizes(documents, nc.max_payload)  # the whole job, before any of it is sent
        receipt = await publish_job(Bus(broker), list(documents), job_id=job_id)
        console.print(
            f"job [bold]{receipt.job_id}[/bold]: {receipt.accepted} documents published"
            + (f", {receipt.duplicates} duplicates dropped" if receipt.duplicates else "")
        )
        last: dict[str, Any] | None = None
        columns = (
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[chunks]} chunks"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task("indexing", total=receipt.accepted or None, chunks=0)
            try:
                async with asyncio.timeout(timeout_s):
                    async for _, event in ingest_events(js, receipt.job_id):
                        last = event.get("data") or {}
                        total = last.get("expected") or receipt.accepted
                        handled = sum(
                            int(last.get(key) or 0)
                            for key in ("documents_done", "documents_failed", "documents_unchanged")
                        )
                        progress.update(
                            bar,
                            total=total,
                            completed=min(handled, total) if total else handled,
                            chunks=last.get("chunks", 0),
                        )
            except TimeoutError:
                console.print(f"[red]no completion within {timeout_s:g} s[/red]")
        return receipt, last
    finally:
        await nc.drain()
        await broker.stop()


def describe(progress: dict[str, Any]) -> str:
    """One line for a finished job's counts."""
    return (
        f"{progress.get('chunks', 0)} chunks indexed, {progress.get('entities', 0)} entities; "
        f"documents: {progress.get('documents_done', 0)} done, "
        f"{progress.get('documents_unchanged', 0)} unchanged, "
        f"{progress.get('documents_failed', 0)} failed"
    )
