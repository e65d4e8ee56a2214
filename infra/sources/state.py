"""What each source's syncs have seen, in JetStream KV (`RAG_SOURCES`), so that any replica of
the sources worker can continue a sync another began.

Keys, under `<tenant>.<source>` (both are KV key tokens: lowercase, digits and `-`):
- `….f.<sha256 of the path, 40 hex>`: one per path the source has (`Seen`): its version (what
  a stat says of it), size, the SHA-256 of its bytes, the document id it is indexed under,
  and, while a sync is under way, the operation that sync owes it (`Pending`);
- `….run`: the last sync (`contracts.sources.SyncRun`).

A sync writes every operation it owes as a pending mark before it publishes any of them, and
clears each mark once its message is on the bus: a sync that is killed is resumed from the
marks, with the same job and the same event ids, so the broker and the job's count drop what
was already sent, and nothing is indexed twice (`infra.sources.sync`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal, TypeVar

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue
from pydantic import BaseModel

from contracts import subjects as sj
from contracts.sources import SyncRun
from infra.logging import get_logger
from infra.runtime.bus import until_jetstream_answers
from infra.settings import Settings

log = get_logger(__name__)

T = TypeVar("T")

WRITES_AT_ONCE = 64
READ_TRIES = 5
"""KV writes in flight at once while a sync marks or clears its operations."""


class Pending(BaseModel):
    """An operation a sync owes a path: `put` (index its bytes now) or `delete`."""

    job_id: str
    op: Literal["put", "delete"]
    event_id: str


class Seen(BaseModel):
    """One path of a source, as its last completed sync left it (and what is pending)."""

    path: str
    version: str = ""
    size: int = 0
    sha256: str = ""
    """Empty for a path never indexed yet (only a pending put)."""
    document_id: str = ""
    failed: str = ""
    """Why this version of the path made no document (empty, too large): not tried again
    until the path changes."""
    pending: Pending | None = None


def _prefix(tenant: str, source: str) -> str:
    return f"{tenant}.{source}"


def path_key(tenant: str, source: str, path: str) -> str:
    return f"{_prefix(tenant, source)}.f.{hashlib.sha256(path.encode()).hexdigest()[:40]}"


def bucket_config(settings: Settings) -> api.KeyValueConfig:
    tags = settings.placement_tags
    return api.KeyValueConfig(
        bucket=sj.SOURCES_BUCKET,
        description="ragbus: what each source's syncs have seen",
        history=1,
        storage=api.StorageType.FILE,
        replicas=settings.stream_replicas,
        placement=api.Placement(tags=tags) if tags else None,
    )


async def sources_bucket(js: JetStreamContext, settings: Settings) -> KeyValue:
    """`RAG_SOURCES`, made when missing (by whichever process asks first); a cluster electing
    the bucket's leader is waited out."""
    return await until_jetstream_answers(
        lambda: _bucket(js, settings),
        settings.publish_retry_s,
        first_delay_s=0.2,
        max_delay_s=2.0,
        event="source_state_read_retried",
    )


async def _bucket(js: JetStreamContext, settings: Settings) -> KeyValue:
    try:
        return await js.key_value(sj.SOURCES_BUCKET)
    except nats.js.errors.BucketNotFoundError:
        pass
    try:
        return await js.create_key_value(bucket_config(settings))
    except nats.js.errors.BadRequestError:  # made meanwhile, by another process
        return await js.key_value(sj.SOURCES_BUCKET)


class SourceState:
    """One source's entries and last run in the bucket. Every call waits out a bucket without
    a leader (a cluster electing one after losing a node) for up to `retry_s`, as publishing
    does (`infra.runtime.bus.until_jetstream_answers`)."""

    def __init__(
        self,
        kv: KeyValue,
        tenant: str,
        source: str,
        retry_s: float = 30.0,
        js: JetStreamContext | None = None,
    ) -> None:
        self.kv, self.tenant, self.source, self.js = kv, tenant, source, js
        self.retry_s = retry_s
        self._run_key = f"{_prefix(tenant, source)}.run"

    async def _retried(self, call: Callable[[], Awaitable[T]], event: str) -> T:
        return await until_jetstream_answers(
            call, self.retry_s, first_delay_s=0.2, max_delay_s=2.0, event=event
        )

    async def seen(self) -> dict[str, Seen]:
        """Every path the source has, by path: read in one pass of an ordered consumer, and
        checked against the number of keys the stream holds under the source (nats-py's
        watcher ends its first pass early when the consumer reports nothing pending before
        its first message: on a cluster a resumed sync once read no marks at all, and
        finished a job it had not sent). A short read is read again."""
        for attempt in range(READ_TRIES):
            expected = await self._retried(self._keys_held, "source_state_read_retried")
            found, read = await self._retried(self._seen, "source_state_read_retried")
            if read >= expected:
                return found
            log.warning("source_state_read_short", source=self.source, read=read, expected=expected)
            await asyncio.sleep(0.2 * (attempt + 1))
        raise nats.errors.TimeoutError  # transient: the sync's command is delivered again

    async def _keys_held(self) -> int:
        """Keys (values and deletion markers alike) the bucket holds under the source."""
        if self.js is None:
            return 0
        stream = f"KV_{sj.SOURCES_BUCKET}"
        info = await self.js.stream_info(
            stream,
            subjects_filter=f"$KV.{sj.SOURCES_BUCKET}.{_prefix(self.tenant, self.source)}.f.*",
        )
        return len(info.state.subjects or {})

    async def _seen(self) -> tuple[dict[str, Seen], int]:
        found: dict[str, Seen] = {}
        read = 0
        watcher = await self.kv.watch(f"{_prefix(self.tenant, self.source)}.f.*")
        try:
            async for entry in watcher:
                if entry is None:
                    break
                read += 1
                if entry.value and entry.operation is None:
                    seen = Seen.model_validate_json(entry.value)
                    found[seen.path] = seen
        finally:
            await watcher.stop()
        return found, read

    async def put(self, seen: Seen) -> None:
        key, value = path_key(self.tenant, self.source, seen.path), seen.model_dump_json().encode()
        await self._retried(lambda: self.kv.put(key, value), "source_state_write_retried")

    async def drop(self, path: str) -> None:
        key = path_key(self.tenant, self.source, path)
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            await self._retried(lambda: self.kv.purge(key), "source_state_write_retried")

    async def put_all(self, entries: Iterable[Seen]) -> None:
        """Write many entries, `WRITES_AT_ONCE` in flight at a time."""
        batch: list[Seen] = []
        for seen in entries:
            batch.append(seen)
            if len(batch) == WRITES_AT_ONCE:
                await asyncio.gather(*(self.put(s) for s in batch))
                batch = []
        if batch:
            await asyncio.gather(*(self.put(s) for s in batch))

    async def run(self) -> SyncRun | None:
        try:
            entry = await self._retried(
                lambda: self.kv.get(self._run_key), "source_state_read_retried"
            )
        except nats.js.errors.KeyNotFoundError:
            return None
        return SyncRun.model_validate_json(entry.value) if entry.value else None

    async def set_run(self, run: SyncRun) -> None:
        value = run.model_dump_json().encode()
        await self._retried(lambda: self.kv.put(self._run_key, value), "source_state_write_retried")

    async def forget(self) -> None:
        """Every key of the source (it was removed, and its documents deleted)."""
        for path in list(await self.seen()):
            await self.drop(path)
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            await self._retried(lambda: self.kv.purge(self._run_key), "source_state_write_retried")
