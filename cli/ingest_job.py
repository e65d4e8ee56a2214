"""Publishing an ingest job over the bus and following its progress (`ragbus ingest`, `demo`).

The CLI is only a producer: it uploads files to the object store, publishes documents and
files, and reads the job's progress events; the parse workers make the files into documents,
the ingest workers do the chunking, embedding and indexing. So before it publishes it makes
sure, within seconds, that NATS answers (`reach_nats`) and, for `ragbus ingest`, that an
ingest worker (and, for a job with files, a parse worker) is there to take the job
(`workers_serving`): published to nobody, a job would wait its whole timeout for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import nats
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.event_stream import ingest_events
from cli.common import Failure
from contracts.ingest import DocumentIn, FileDocument
from infra.runtime.bus import Bus, create_broker
from infra.runtime.files import FileStore
from infra.runtime.ingest_producer import (
    JobItem,
    JobReceipt,
    LocalFile,
    check_file_sizes,
    check_sizes,
    publish_job,
    upload_file,
)
from infra.runtime.topology import INGEST_WORKER, PARSE_WORKER, ConsumerSpec, declare_streams
from infra.settings import Settings

PROBE_CONNECT_S = 2.0
"""How long one try to reach a NATS server may take; two tries per server at most."""
READINESS_WAIT_S = 3.0
"""How long reading the readiness beacons in Redis may take before the consumer's state is
asked instead."""

T = TypeVar("T")


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


async def _from_redis(settings: Settings, read: Callable[[Any], Awaitable[T]]) -> T | None:
    """`read(client)` on the stack's Redis (the one `ragbus up` started, if it did); None when
    Redis cannot be read from here within `READINESS_WAIT_S`."""
    from redis.exceptions import RedisError

    from infra.runtime.redis_client import connect_redis, started_redis_url

    try:
        async with asyncio.timeout(READINESS_WAIT_S):
            url = await asyncio.to_thread(
                started_redis_url, settings.redis_url, settings.data_dir / "redis"
            )
            client = connect_redis(url)
            try:
                return await read(client)
            finally:
                await client.aclose()
    except (RedisError, OSError, TimeoutError):
        return None


async def _announced(settings: Settings, role: str) -> int | None:
    """Processes whose readiness beacon announces `role` now (`infra.runtime.readiness`);
    None when Redis cannot be read from here."""
    from infra.runtime.readiness import ready_processes

    async def count(client: Any) -> int:
        return (await ready_processes(client, [role]))[role]

    return await _from_redis(settings, count)


async def job_errors(settings: Settings, job_id: str) -> dict[str, str]:
    """A job's failed documents and their reasons as its state in Redis keeps them (what
    `GET /v1/ingest/{job}` shows); empty when Redis cannot be read from here."""
    from infra.runtime.ingest_jobs import read_job

    async def errors(client: Any) -> dict[str, str]:
        job = await read_job(client, job_id)
        return dict((job or {}).get("errors") or {})

    return await _from_redis(settings, errors) or {}


async def workers_serving(
    settings: Settings, js: JetStreamContext, role: str, consumer: ConsumerSpec
) -> int:
    """How many workers of `role` are there to take a job: those announcing the role in
    Redis; where Redis cannot be read from here, the role's durable consumer on the ingest
    stream, taken as served when a worker waits on it or holds messages of it."""
    announced = await _announced(settings, role)
    if announced is not None:
        return announced
    try:
        info = await js.consumer_info(consumer.stream, consumer.durable)
    except nats.js.errors.NotFoundError:
        return 0
    return max(info.num_waiting or 0, 1 if info.num_ack_pending else 0)


async def ingest_workers(settings: Settings, js: JetStreamContext) -> int:
    """How many ingest workers are there to take a job (`workers_serving`)."""
    return await workers_serving(settings, js, "ingest", INGEST_WORKER)


async def check_ingest_worker(settings: Settings, js: JetStreamContext, files: int = 0) -> None:
    """`Failure` when no ingest worker would take a job published now, or, for a job with
    `files`, no parse worker."""
    from infra.runtime.services import redacted

    if not await ingest_workers(settings, js):
        raise Failure(
            f"no ingest worker is running for {redacted(settings.nats_url)}: nothing was "
            "published; start `ragbus up` (or `ragbus worker ingest`) with the same "
            "RAGBUS_NATS_URL and RAGBUS_REDIS_URL, then ingest again"
        )
    if files and not await workers_serving(settings, js, "parse", PARSE_WORKER):
        raise Failure(
            f"no parse worker is running (or ready) for {redacted(settings.nats_url)}, and "
            f"{files} of the files need one: nothing was published; start `ragbus up` (or "
            "`ragbus worker parse`) with the same RAGBUS_NATS_URL and RAGBUS_REDIS_URL, then "
            "ingest again (a parse worker whose readers do not load is not ready: its log's "
            "`parse_not_ready` line names the library or program missing)"
        )


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


async def upload_files(
    store: FileStore, files: Sequence[LocalFile], console: Console
) -> list[FileDocument]:
    """Put each file into the object store, with a progress bar of the bytes sent."""
    total = sum(file.size for file in files)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[sent]}"),
        TimeElapsedColumn(),
    )
    uploaded: list[FileDocument] = []
    sent = 0
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("uploading", total=len(files), sent=f"0 of {_size(total)}")
        for file in files:
            uploaded.append(await upload_file(store, file))
            sent += file.size
            progress.update(bar, advance=1, sent=f"{_size(sent)} of {_size(total)}")
    return uploaded


async def ingest_and_follow(
    settings: Settings,
    documents: Sequence[DocumentIn],
    console: Console,
    *,
    job_id: str | None = None,
    timeout_s: float = 600.0,
    require_worker: bool = False,
    published: Callable[[int], None] | None = None,
    files: Sequence[LocalFile] = (),
    failures: dict[str, str] | None = None,
) -> tuple[JobReceipt, dict[str, Any] | None]:
    """Upload the `files` (to the object store), publish the job (the files for the parse
    workers, the documents for the ingest workers), then show a progress bar until it is
    `completed` or `failed`, or until `timeout_s` pass without a progress event.

    Fails within seconds where no NATS server answers (`NoServersError`) and, with
    `require_worker`, where no ingest worker (or, with files, no parse worker) is running
    (`Failure`), before anything is uploaded or published; a file over
    `RAGBUS_MAX_FILE_BYTES` (`FileTooLarge`) or a document over the server's message limit
    (`DocumentTooLarge`) refuses the job whole. `published` gets the running count of
    documents and files sent; `failures` gets each failed document's id and reason, from the
    job's events (and, where some failed unnamed, the job's state in Redis). Returns the
    receipt and the last progress data seen (None if nothing came in time).
    """
    check_file_sizes(files, settings.max_file_bytes)
    probe = await reach_nats(settings, "ragbus-ingest-check")
    try:
        js = probe.jetstream()
        # Idempotent: lets a producer run before any worker has declared the streams.
        await declare_streams(js, settings)
        check_sizes(documents, probe.max_payload)  # the whole job, before any of it is sent
        if require_worker:
            await check_ingest_worker(settings, js, files=len(files))
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
        stored: list[FileDocument] = []
        if files:
            store = FileStore(js, settings, settings.publish_retry_s)
            stored = await upload_files(store, files, console)
        job: list[JobItem] = [*stored, *documents]
        receipt = await publish_job(Bus(broker), job, job_id=job_id, progress=published)
        console.print(
            f"job [bold]{receipt.job_id}[/bold]: {receipt.accepted} documents published"
            + (f" ({len(stored)} files to parse)" if stored else "")
            + (f", {receipt.duplicates} duplicates dropped" if receipt.duplicates else "")
        )
        last: dict[str, Any] | None = None
        columns = (
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[chunks]} chunks"),
            *([TextColumn("{task.fields[parsed]} files parsed")] if stored else []),
            TimeElapsedColumn(),
        )
        parsed = 0
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task("indexing", total=receipt.accepted or None, chunks=0, parsed=0)
            try:
                # a stall, not the job's length, ends the wait: a folder of scans parsed
                # while queries take the cores may take hours, and is fine while it moves
                loop = asyncio.get_running_loop()
                async with asyncio.timeout(timeout_s) as stalled:
                    async for _, event in ingest_events(js, receipt.job_id):
                        stalled.reschedule(loop.time() + timeout_s)
                        data = event.get("data") or {}
                        if failures is not None and data.get("error") and data.get("document_id"):
                            failures[str(data["document_id"])] = str(data["error"])
                        if data.get("stage") == "parsed":
                            parsed += 1
                            progress.update(bar, parsed=parsed)
                        last = data
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
                console.print(f"[red]no progress for {timeout_s:g} s[/red]")
        if failures is not None and last and int(last.get("documents_failed") or 0) > len(failures):
            failures.update(await job_errors(settings, receipt.job_id))
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
