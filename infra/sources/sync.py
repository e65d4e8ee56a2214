"""One sync of a source: list it, decide what changed (`infra.sources.plan`), and publish the
changes as one ingest job, exactly once, resumably.

The steps, each of which a killed sync resumes from (`SyncRun.status`, in KV):
1. `planning`: the listing, and a pending mark on every path the sync owes an operation
   (`infra.sources.state`). Nothing is published yet: a sync killed here is planned again,
   under the same job.
2. `publishing`: the job's seal is sent first, with the number of operations, then each
   operation, at most `RAGBUS_SOURCE_SYNC_CONCURRENCY` at once: a path's bytes are read,
   hashed, and published as a document (text) or a file to parse; a deleted path's document
   is deleted (chunks, vectors and graph facts by the ingest workers; the original file and
   the quota's count here). Each operation clears its mark once its message is on the bus;
   its event id is fixed by the job and the path (`plan.event_id`), so a resumed sync that
   sends it again is dropped by the broker's duplicate window or the job's seen set.
3. `published`: every operation is on the bus; the ingest workers finish the job.

An operation that sends nothing is counted in the job here: a path whose bytes did not change
(`touched`), a move (a new path holding a deleted path's bytes keeps that document, id and all),
a path that cannot be read or is over a limit (`failed`, with the reason).

One sync of a source runs at a time: a Redis lock, renewed while the sync runs. A sync asked
for meanwhile waits (its job id in the source's `again` key), and runs, under its own job, as
soon as the running one ends; a third asked for while one already waits is folded into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

import redis.asyncio as aioredis
from nats.aio.client import Client as NATS
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.envelope import utcnow
from contracts.ingest import DocumentIn, FileDocument, IngestDeletion, IngestJobSealed
from contracts.sources import SourceRecord, SyncCounts, SyncReason, SyncRun, SyncSource
from contracts.tenancy import DEFAULT_TENANT
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.runtime.files import FileStore
from infra.runtime.ingest_jobs import JobTracker, open_job, publish_progress
from infra.runtime.ingest_producer import (
    HEADER_ALLOWANCE,
    TEXT_SUFFIXES,
    JobItem,
    job_message,
    job_subject,
    title_of,
)
from infra.runtime.ingest_tree import Skipped
from infra.runtime.step_context import current_deliveries
from infra.settings import Settings
from infra.sources.kinds import Listed, NamedPaths, SourceReader, SourceRefused
from infra.sources.network import HostRefused
from infra.sources.plan import document_id, event_id, marked, plan
from infra.sources.readers import reader_for
from infra.sources.registry import SourceRegistry
from infra.sources.state import Pending, Seen, SourceState, sources_bucket
from infra.tenancy.quotas import DocumentSize, Effective, QuotaExceeded, Quotas, effective
from infra.tenancy.registry import TenantRegistry

log = get_logger(__name__)

LOCK_TTL_S = 15.0
"""A sync's lock outlives a killed holder by at most this; the holder renews it every third."""
LOCK_WAIT_S = LOCK_TTL_S + 5.0
"""How long a redelivered sync waits for a dead holder's lock to lapse."""
JOB_WAIT_S = 86_400
"""How long a sync waiting for the running one is remembered (a day: far past any sync)."""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def lock_key(tenant: str, source: str) -> str:
    return f"ragbus:source-lock:{tenant}/{source}"


def again_key(tenant: str, source: str) -> str:
    return f"ragbus:source-again:{tenant}/{source}"


@dataclass
class _Run:
    """One sync under way: what it works from, and what it has counted."""

    record: SourceRecord
    state: SourceState
    job_id: str
    reader: SourceReader
    listed: dict[str, Listed]
    seen: dict[str, Seen]
    limits: Effective
    counts: SyncCounts = field(default_factory=SyncCounts)
    taken: set[str] = field(default_factory=set)
    gone_by_sha: dict[str, Seen] = field(default_factory=dict)
    moved_from: set[str] = field(default_factory=set)


class SourceSyncer:
    """Runs syncs for the sources worker (`workers.sources`)."""

    def __init__(self, bus: Bus, redis: aioredis.Redis, nc: NATS, settings: Settings) -> None:
        self.bus, self.redis, self.settings = bus, redis, settings
        self.nc, self.js = nc, nc.jetstream()
        self.registry = SourceRegistry(redis)
        self.quotas = Quotas(redis)
        self.jobs = JobTracker(redis, settings.state_ttl_s)
        self.files = FileStore(self.js, settings, settings.publish_retry_s)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)

    async def handle(self, command: SyncSource) -> None:
        """Run the sync a command asks for (and the ones asked for while it ran)."""
        kv = await sources_bucket(self.js, self.settings)
        state = SourceState(
            kv, command.tenant, command.source, self.settings.publish_retry_s, self.js
        )
        async with self._lock(command.tenant, command.source) as held:
            if not held:
                await self._coalesce(command)
                return
            job_id, reason = command.request_id, command.reason
            while True:
                record = await self.registry.get(command.tenant, command.source)
                if record is None:  # removed, its documents kept
                    return
                if record.removing:
                    await self._removed(record, state, job_id)
                    return
                await self.sync(record, state, job_id, reason)
                waiting = await self.redis.getdel(again_key(command.tenant, command.source))
                if not waiting:
                    return
                job_id = waiting.decode() if isinstance(waiting, bytes) else str(waiting)
                reason = "watch"

    async def _coalesce(self, command: SyncSource) -> None:
        """A sync asked for while another of the source runs: it runs, under its own job, as
        soon as that one ends. One already waiting takes this one in: this job ends at once,
        empty, and the waiting one (which starts later) syncs what this one would have."""
        key = again_key(command.tenant, command.source)
        if await self.redis.set(key, command.request_id, nx=True, ex=JOB_WAIT_S):
            log.info("source_sync_waiting", source=command.source, job_id=command.request_id)
            return
        await open_job(self.redis, command.request_id, self.settings.state_ttl_s, command.tenant)
        await self._seal(command.request_id, 0)
        log.info("source_sync_folded", source=command.source, job_id=command.request_id)

    @contextlib.asynccontextmanager
    async def _lock(self, tenant: str, source: str) -> AsyncIterator[bool]:
        """Hold the source's lock (waiting out one a dead holder left), renewed meanwhile;
        False when a live sync holds it."""
        key, token = lock_key(tenant, source), secrets.token_hex(16)
        loop = asyncio.get_running_loop()
        # a first delivery finds a live holder: it waits its turn (`_coalesce`) at once; a
        # redelivery may find the lock of its own killed first try, which lapses in seconds
        deadline = loop.time() + (LOCK_WAIT_S if current_deliveries() > 1 else 0.0)
        while not await self.redis.set(key, token, nx=True, px=int(LOCK_TTL_S * 1000)):
            if loop.time() > deadline:
                yield False
                return
            await asyncio.sleep(0.5)

        async def renew() -> None:
            while True:
                await asyncio.sleep(LOCK_TTL_S / 3)
                await self._renew(keys=[key], args=[token, int(LOCK_TTL_S * 1000)])

        renewing = asyncio.create_task(renew())
        try:
            yield True
        finally:
            renewing.cancel()
            await self._release(keys=[key], args=[token])

    async def _limits(self, tenant: str) -> Effective:
        if tenant == DEFAULT_TENANT:
            return effective(self.settings)
        found = await TenantRegistry(self.redis).get(tenant)
        return effective(self.settings, found.limits if found else None)

    async def sync(
        self, record: SourceRecord, state: SourceState, job_id: str, reason: SyncReason
    ) -> SyncRun:
        """One sync of `record` as job `job_id`; a sync of the source that was killed while
        it published is finished first, under its own job."""
        previous = await state.run()
        if previous is not None and previous.status == "publishing":
            log.info("source_sync_resumed", source=record.name, job_id=previous.job_id)
            await self._run(record, state, previous, resume=True)
            if previous.job_id == job_id:
                return previous
        planned = previous is not None and previous.status == "planning"
        if planned and previous is not None and previous.job_id != job_id:
            await self._seal(previous.job_id, 0)  # nothing of it was sent: it ends empty
        run = SyncRun(job_id=job_id, reason=reason)
        await self._run(record, state, run, resume=False)
        return run

    async def _run(
        self, record: SourceRecord, state: SourceState, run: SyncRun, *, resume: bool
    ) -> None:
        job_id = run.job_id
        await open_job(self.redis, job_id, self.settings.state_ttl_s, record.tenant)
        skipped: list[Skipped] = []
        try:
            reader = reader_for(record, self.settings)
            listing = await asyncio.to_thread(lambda: list(reader.listing(skipped)))
        except (SourceRefused, HostRefused, OSError) as exc:
            await self._failed_run(state, run, f"{type(exc).__name__}: {exc}")
            return
        for missed in skipped:
            log.warning(
                "source_path_skipped", source=record.name, path=missed.name, reason=missed.reason
            )
        seen = await state.seen()
        job = _Run(
            record=record,
            state=state,
            job_id=job_id,
            reader=reader,
            listed={item.path: item for item in listing},
            seen=seen,
            limits=await self._limits(record.tenant),
        )
        job.counts.listed, job.counts.skipped = len(listing), len(skipped)
        if resume:
            owed = [s for s in seen.values() if s.pending and s.pending.job_id == job_id]
        else:
            await state.set_run(run)  # `planning`
            decided = plan(listing, seen, kept={missed.name for missed in skipped})
            owed = marked(decided, seen, job_id)
            marking = {entry.path for entry in owed}
            await state.put_all([*owed, *_stale(seen, marking)])
            for path, entry in list(seen.items()):
                unmarked = entry.pending is not None and path not in marking  # a killed plan's
                if path in decided.forgotten or (unmarked and not entry.sha256):
                    await state.drop(path)
                    del seen[path]
            for entry in owed:
                seen[entry.path] = entry
            run.status = "publishing"
            await state.set_run(run)
            await self._seal(job_id, len(owed))
        job.taken = {s.document_id for s in seen.values() if s.document_id}
        deletes = [s for s in owed if s.pending and s.pending.op == "delete"]
        puts = [s for s in owed if s.pending and s.pending.op == "put"]
        job.gone_by_sha = {s.sha256: s for s in deletes if s.sha256}
        slots = asyncio.Semaphore(self.settings.source_sync_concurrency)

        async def bounded(entry: Seen, op: Literal["put", "delete"]) -> None:
            async with slots:
                await (self._put(job, entry) if op == "put" else self._delete(job, entry))

        try:
            await asyncio.gather(*(bounded(entry, "put") for entry in puts))
            await asyncio.gather(*(bounded(entry, "delete") for entry in deletes))
        finally:
            await asyncio.to_thread(reader.close)
        run.status, run.published_at, run.counts = "published", utcnow(), job.counts
        await state.set_run(run)
        log.info(
            "source_sync_published",
            source=record.name,
            tenant=record.tenant,
            job_id=job_id,
            resumed=resume,
            **job.counts.model_dump(),
        )

    async def _seal(self, job_id: str, expected: int) -> None:
        seal = IngestJobSealed(request_id=job_id, expected=expected)
        await self.bus.publish(seal, sj.ingest_docs_subject(job_id), sj.STREAM_INGEST)

    async def _failed_run(self, state: SourceState, run: SyncRun, error: str) -> None:
        """A sync that could not list its source: its job ends failed, with the reason."""
        log.warning("source_sync_failed", source=state.source, job_id=run.job_id, error=error)
        run.status, run.error = "failed", error[:2000]
        await state.set_run(run)
        await self._seal(run.job_id, 1)
        await self._settle(
            run.job_id, event_id(run.job_id, "list", ""), "failed", state.source, error
        )

    async def _settle(
        self,
        job_id: str,
        event: str,
        outcome: Literal["unchanged", "failed"],
        document: str,
        error: str = "",
    ) -> None:
        """Count an operation that sends nothing in its job, and tell the job's watchers."""
        await self.jobs.record(job_id, event, outcome, document_id=document, error=error[:2000])
        await publish_progress(self.bus, self.redis, job_id, document, error or None)

    async def _put(self, job: _Run, entry: Seen) -> None:
        assert entry.pending is not None
        mark, path = entry.pending, entry.path
        listed = job.listed.get(path)
        before = entry.model_copy(update={"pending": None})
        limit = self.settings.max_file_bytes
        if listed is not None and listed.size > limit:  # never read into memory
            reason = (
                f"{listed.size:,} bytes; files of at most {limit:,} are taken "
                "(RAGBUS_MAX_FILE_BYTES)"
            )
            await self._fail(job, before, mark.event_id, reason, listed.version)
            return
        try:
            if listed is None:
                raise OSError(f"{path} is gone")
            data = await asyncio.to_thread(job.reader.read, path)
        except OSError as exc:
            await self._fail(job, before, mark.event_id, f"cannot be read: {exc}")
            return
        sha = hashlib.sha256(data).hexdigest()
        now = Seen(path=path, version=listed.version, size=len(data), sha256=sha, failed="")
        if before.sha256 == sha:  # a new stat, the same bytes
            job.counts.touched += 1
            await job.state.put(now.model_copy(update={"document_id": before.document_id}))
            await self._settle(job.job_id, mark.event_id, "unchanged", before.document_id)
            return
        gone = job.gone_by_sha.get(sha) if not before.sha256 else None
        if gone is not None and gone.path not in job.moved_from:
            job.moved_from.add(gone.path)
            await self._moved(job, now, gone, mark.event_id)
            return
        doc_id = before.document_id or document_id(job.record, path, job.taken)
        if doc_id is None:
            reason = "its path makes no document id"
            await self._fail(job, before, mark.event_id, reason, listed.version)
            return
        job.taken.add(doc_id)
        try:
            document = await self._document(job, path, doc_id, data)
        except (ValueError, ValidationError) as exc:  # the file itself: until it changes
            await self._fail(job, before, mark.event_id, _reason(exc), listed.version)
            return
        except QuotaExceeded as exc:  # tried again at the next sync
            await self._fail(job, before, mark.event_id, _reason(exc))
            return
        message, body = job_message(job.job_id, document, mark.event_id)
        await self.bus.publish_raw(
            body, job_subject(job.job_id, document), sj.STREAM_INGEST, message.event_id
        )
        await job.state.put(now.model_copy(update={"document_id": doc_id}))
        if before.sha256:
            job.counts.changed += 1
        else:
            job.counts.added += 1

    async def _document(self, job: _Run, path: str, doc_id: str, data: bytes) -> JobItem:
        """The path's document, checked, charged against the tenant's quota, and (a file)
        stored as its original: `ValueError` for a file that cannot be one, `QuotaExceeded`
        past the tenant's limits; nothing is stored for either."""
        record = job.record
        name = PurePosixPath(path)
        common = {
            "id": doc_id,
            "metadata": record.stamped(),
            "namespace": record.store_namespace,
            "access": record.access,
        }
        if name.suffix.lower() in TEXT_SUFFIXES:
            text = data.decode("utf-8", errors="replace")
            if not text.strip():
                raise ValueError("no text (empty, or white space only)")
            document = DocumentIn(title=title_of(text, name.stem), text=text, **common)
            self._fits(job_message(job.job_id, document)[1])
            await self._charge(job, document.namespace, doc_id, len(text.encode()))
            return document
        if not data:
            raise ValueError("empty")
        if len(data) > self.settings.max_file_bytes:
            raise ValueError(
                f"{len(data):,} bytes; files of at most {self.settings.max_file_bytes:,} are "
                "taken (RAGBUS_MAX_FILE_BYTES)"
            )
        await self._charge(job, record.store_namespace, doc_id, len(data))
        ref = await self.files.put(
            record.store_namespace,
            doc_id,
            data,
            job.reader.filename(path),
            job.reader.media_type(path),
        )
        return FileDocument(file=ref, **common)

    def _fits(self, body: bytes) -> None:
        if len(body) + HEADER_ALLOWANCE > self.nc.max_payload:
            raise ValueError(
                f"{len(body):,} bytes as a message, over the NATS server's max_payload"
            )

    async def _charge(self, job: _Run, namespace: str, doc_id: str, size: int) -> None:
        await self.quotas.accept_documents(
            job.record.tenant, [DocumentSize(namespace, doc_id, size)], job.limits
        )

    async def _fail(
        self, job: _Run, before: Seen, event: str, reason: str, version: str | None = None
    ) -> None:
        """An operation that could not be sent: counted failed, the path's document left as
        it was. With the `version` it failed at (a file that cannot be a document: empty,
        too large), the path is not tried again until it changes; without (it could not be
        read, the tenant was at its quota), the next sync tries it again."""
        job.counts.skipped += 1
        log.warning("source_path_failed", source=job.record.name, path=before.path, reason=reason)
        if version is not None:
            await job.state.put(before.model_copy(update={"version": version, "failed": reason}))
        elif before.sha256:
            await job.state.put(before)
        else:
            await job.state.drop(before.path)
        await self._settle(job.job_id, event, "failed", before.document_id or before.path, reason)

    async def _moved(self, job: _Run, now: Seen, gone: Seen, event: str) -> None:
        """`now` holds the bytes of `gone`, which is no longer listed: the document moves with
        them, and nothing is sent. The new path is written first: a sync killed between the
        two writes finds the id held by a path that is not going, and only forgets the old."""
        await job.state.put(now.model_copy(update={"document_id": gone.document_id}))
        job.seen[now.path] = now.model_copy(update={"document_id": gone.document_id})
        job.counts.moved += 1
        await self._settle(job.job_id, event, "unchanged", gone.document_id)

    async def _delete(self, job: _Run, entry: Seen) -> None:
        assert entry.pending is not None
        record, mark = job.record, entry.pending
        held_by = [
            s.path
            for s in job.seen.values()
            if s.document_id == entry.document_id
            and s.path != entry.path
            and not (s.pending and s.pending.op == "delete")
        ]
        if held_by:  # moved: the document lives on under another path
            await job.state.drop(entry.path)
            await self._settle(job.job_id, mark.event_id, "unchanged", entry.document_id)
            return
        deletion = IngestDeletion(
            request_id=job.job_id,
            event_id=mark.event_id,
            namespace=record.store_namespace,
            document_id=entry.document_id,
        )
        await self.bus.publish(deletion, sj.ingest_docs_subject(job.job_id), sj.STREAM_INGEST)
        await self.quotas.release_document(record.tenant, record.store_namespace, entry.document_id)
        try:
            await self.files.delete(record.store_namespace, entry.document_id)
        except Exception as exc:  # the next deletion of the id takes it
            log.warning("original_not_deleted", document_id=entry.document_id, error=repr(exc))
        await job.state.drop(entry.path)
        job.counts.deleted += 1

    async def _removed(self, record: SourceRecord, state: SourceState, job_id: str) -> None:
        """A source removed with its documents: each one it indexed is deleted, as one job,
        then its state and its record go."""
        seen = await state.seen()
        owed = [s for s in seen.values() if s.sha256 and s.document_id]
        await open_job(self.redis, job_id, self.settings.state_ttl_s, record.tenant)
        await self._seal(job_id, len(owed))
        job = _Run(
            record=record,
            state=state,
            job_id=job_id,
            reader=_NoReader(),
            listed={},
            seen={},
            limits=await self._limits(record.tenant),
        )
        for entry in owed:
            mark = Pending(
                job_id=job_id, op="delete", event_id=event_id(job_id, "delete", entry.path)
            )
            await self._delete(job, entry.model_copy(update={"pending": mark}))
        await state.forget()
        await self.registry.remove(record.tenant, record.name)
        log.info("source_removed", source=record.name, deleted=len(owed), job_id=job_id)


class _NoReader(NamedPaths):
    """The reader of a source being removed: nothing is read."""

    def listing(self, skipped: list[Skipped]) -> Iterator[Listed]:
        return iter(())

    def read(self, path: str) -> bytes:
        raise OSError("the source is being removed")


def _stale(seen: dict[str, Seen], marking: set[str]) -> list[Seen]:
    """Marks a sync killed while it planned left on paths the new plan owes nothing: cleared
    (a path it had only marked, never indexed, is forgotten by the next plan)."""
    return [
        s.model_copy(update={"pending": None})
        for path, s in seen.items()
        if s.pending is not None and path not in marking and s.sha256
    ]


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    if isinstance(exc, QuotaExceeded):
        return f"over the tenant's quota: {exc}"
    return str(exc)
