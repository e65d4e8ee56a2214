"""Publishing an ingest job over the bus and following its progress (`ragbus ingest`, `demo`).

The CLI is only a producer: it publishes documents and reads the job's progress
events; the ingest workers do the chunking, embedding and indexing. So before it publishes
it makes sure, within seconds, that NATS answers (`reach_nats`) and, for `ragbus ingest`,
that an ingest worker is there to take the job (`ingest_workers`): published to nobody, a
job would wait its whole timeout for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import nats
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.event_stream import ingest_events
from cli.common import Failure
from contracts import subjects as sj
from contracts.ingest import DocumentIn
from infra.runtime.bus import INGEST_WORKER, Bus, create_broker, declare_streams
from infra.runtime.ingest_producer import JobReceipt, check_sizes, publish_job
from infra.settings import Settings

PROBE_CONNECT_S = 2.0
"""How long one try to reach a NATS server may take; two tries per server at most."""
READINESS_WAIT_S = 3.0
"""How long reading the readiness beacons in Redis may take before the consumer's state is
asked instead."""


async def _quiet(_: Exception) -> None:
    """nats-py logs each failed connection try with its traceback; the caller tells."""


async def reach_nats(settings: Settings, name: str) -> NATS:
    """A connection that fails within seconds (`NoServersError`) where no server answers,
    rather than retrying for minutes as a long-lived one does. For checks before a job."""
    return await nats.connect(
        settings.nats_servers,
        name=name,
        user_credentials=settings.nats_credentials,
        connect_timeout=PROBE_CONNECT_S,
        max_reconnect_attempts=1,
        reconnect_time_wait=0.2,
        allow_reconnect=False,
        error_cb=_quiet,
    )


async def _announced_ingest_workers(settings: Settings) -> int | None:
    """Processes whose readiness beacon announces the `ingest` role now
    (`infra.runtime.readiness`); None when Redis cannot be read from here."""
    from redis.exceptions import RedisError

    from infra.runtime.readiness import ready_processes
    from infra.runtime.redis_client import connect_redis, started_redis_url

    try:
        async with asyncio.timeout(READINESS_WAIT_S):
            url = await asyncio.to_thread(
                started_redis_url, settings.redis_url, settings.data_dir / "redis"
            )
            client = connect_redis(url)
            try:
                return (await ready_processes(client, ["ingest"]))["ingest"]
            finally:
                await client.aclose()
    except (RedisError, OSError, TimeoutError):
        return None


async def ingest_workers(settings: Settings, js: JetStreamContext) -> int:
    """How many ingest workers are there to take a job: those announcing the `ingest` role in
    Redis; where Redis cannot be read from here, the ingest workers' durable consumer on the
    ingest stream, taken as served when a worker waits on it or holds messages of it."""
    announced = await _announced_ingest_workers(settings)
    if announced is not None:
        return announced
    try:
        info = await js.consumer_info(sj.STREAM_INGEST, INGEST_WORKER.durable)
    except nats.js.errors.NotFoundError:
        return 0
    return max(info.num_waiting or 0, 1 if info.num_ack_pending else 0)


async def check_ingest_worker(settings: Settings, js: JetStreamContext) -> None:
    """`Failure` when no ingest worker would take a job published now."""
    if await ingest_workers(settings, js):
        return
    from infra.runtime.services import redacted

    raise Failure(
        f"no ingest worker is running for {redacted(settings.nats_url)}: nothing was "
        "published; start `ragbus up` (or `ragbus worker ingest`) with the same RAGBUS_NATS_URL "
        "and RAGBUS_REDIS_URL, then ingest again"
    )


async def ingest_and_follow(
    settings: Settings,
    documents: Sequence[DocumentIn],
    console: Console,
    *,
    job_id: str | None = None,
    timeout_s: float = 600.0,
    require_worker: bool = False,
    published: Callable[[int], None] | None = None,
) -> tuple[JobReceipt, dict[str, Any] | None]:
    """Publish the job, then show a progress bar until it is `completed` or `failed`.

    Fails within seconds where no NATS server answers (`NoServersError`) and, with
    `require_worker`, where no ingest worker is running (`Failure`), before anything is
    published. `published` gets the running count of documents sent.
    Returns the receipt and the last progress data seen (None if nothing came in time).
    """
    probe = await reach_nats(settings, "ragbus-ingest-check")
    try:
        js = probe.jetstream()
        # Idempotent: lets a producer run before any worker has declared the streams.
        await declare_streams(js, settings)
        check_sizes(documents, probe.max_payload)  # the whole job, before any of it is sent
        if require_worker:
            await check_ingest_worker(settings, js)
    finally:
        await probe.close()
    broker = create_broker(settings, name="ragbus-ingest")
    await broker.connect()
    nc = await nats.connect(
        settings.nats_servers,
        name="ragbus-ingest-progress",
        user_credentials=settings.nats_credentials,
    )
    try:
        js = nc.jetstream()
        receipt = await publish_job(Bus(broker), list(documents), job_id=job_id, progress=published)
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


async def ingest_to_workers(
    settings: Settings,
    documents: Sequence[DocumentIn],
    console: Console,
    *,
    timeout_s: float = 600.0,
) -> tuple[JobReceipt, dict[str, Any] | None]:
    """`ingest_and_follow` that first makes sure an ingest worker is running (`eval`)."""
    return await ingest_and_follow(
        settings, documents, console, timeout_s=timeout_s, require_worker=True
    )


def describe(progress: dict[str, Any]) -> str:
    """One line for a finished job's counts."""
    return (
        f"{progress.get('chunks', 0)} chunks indexed, {progress.get('entities', 0)} entities; "
        f"documents: {progress.get('documents_done', 0)} done, "
        f"{progress.get('documents_unchanged', 0)} unchanged, "
        f"{progress.get('documents_failed', 0)} failed"
    )
