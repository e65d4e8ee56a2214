"""When sources sync without being asked: on their schedule (`every_s`), and, for a watched
folder, when the OS says a file under it changed (inotify, through watchfiles: no polling).

Every sources worker runs a `Scheduler`; replicas share the work through Redis:
- a scheduled sync is published by the replica that claims its slot (`SET NX` on the slot,
  `floor(now / every_s)`), so each slot syncs once however many replicas run;
- a watched folder is watched by the replica that holds its lease (renewed every tick, so a
  dead replica's folders are taken over within `WATCH_LEASE_S`).
What either publishes is a `SyncSource` command like any other: the sync's own lock makes
a flood of changes one sync, and one more after it (`infra.sources.sync`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from pathlib import Path

import redis.asyncio as aioredis
import watchfiles

from contracts import subjects as sj
from contracts.envelope import new_request_id
from contracts.sources import SourceRecord, SyncReason, SyncSource
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.settings import Settings
from infra.sources.kinds import SourceRefused, allowed_folder
from infra.sources.registry import SourceRegistry

log = get_logger(__name__)

TICK_S = 1.0
CATCH_UP_AFTER_S = 0.5
"""How long after a watch starts its catch-up sync is asked for (the OS's watch stands by
then: watchfiles sets it up as the iteration begins)."""
WATCH_LEASE_S = 10.0

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""


async def request_sync(bus: Bus, record: SourceRecord, reason: SyncReason) -> str:
    """Publish a sync of `record`; the id of the ingest job it runs as."""
    job_id = new_request_id()
    command = SyncSource(request_id=job_id, tenant=record.tenant, source=record.name, reason=reason)
    await bus.publish(command, sj.SOURCES_SUBJECT, sj.STREAM_CMD)
    return job_id


class Scheduler:
    def __init__(self, bus: Bus, redis: aioredis.Redis, settings: Settings) -> None:
        self.bus, self.redis, self.settings = bus, redis, settings
        self.registry = SourceRegistry(redis)
        self.token = secrets.token_hex(16)
        self._renew = redis.register_script(_RENEW)
        self._task: asyncio.Task[None] | None = None
        self._watchers: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="sources-scheduler")

    async def stop(self) -> None:
        tasks = [task for task, _ in self._watchers.values()]
        for _, stop in self._watchers.values():
            stop.set()
        if self._task is not None:
            tasks.append(self._task)
            self._task.cancel()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._watchers.clear()

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis or NATS away a moment: the next tick tries again
                log.warning("sources_tick_failed", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(TICK_S)

    async def tick(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        records = [r for r in await self.registry.everywhere() if not r.removing]
        watched: set[str] = set()
        for record in records:
            key = f"{record.tenant}/{record.name}"
            if record.every_s:
                slot = int(now // record.every_s)
                claim = f"ragbus:source-slot:{key}:{slot}"
                ttl = max(1, int(record.every_s * 2))
                if await self.redis.set(claim, 1, nx=True, ex=ttl):
                    await request_sync(self.bus, record, "schedule")
            if record.watch and record.kind == "folder" and await self._leased(key):
                watched.add(key)
                if key not in self._watchers or self._watchers[key][0].done():
                    self._start_watch(key, record)
        for key in list(self._watchers):
            if key not in watched:
                task, stop = self._watchers.pop(key)
                stop.set()
                task.cancel()

    async def _leased(self, key: str) -> bool:
        lease = f"ragbus:source-watch:{key}"
        return bool(await self._renew(keys=[lease], args=[self.token, int(WATCH_LEASE_S * 1000)]))

    def _start_watch(self, key: str, record: SourceRecord) -> None:
        try:
            root = allowed_folder(record.location, record.tenant, self.settings.source_roots or ())
        except SourceRefused as exc:
            log.warning("source_not_watched", source=key, error=str(exc))
            return
        stop = asyncio.Event()
        task = asyncio.create_task(self._watch(record, root, stop), name=f"watch-{key}")
        self._watchers[key] = (task, stop)

    async def _watch(self, record: SourceRecord, root: Path, stop: asyncio.Event) -> None:
        if not await asyncio.to_thread(root.is_dir):
            log.warning("source_not_watched", source=record.name, error=f"{root} is not a folder")
            return
        log.info("source_watched", source=record.name, tenant=record.tenant, folder=str(root))
        debounce_ms = int(self.settings.source_watch_debounce_s * 1000)
        # what changed while no one watched (the source was just made, or its worker was
        # away) is synced once the watch stands: its listing comes after the OS's watch
        catch_up = asyncio.create_task(self._catch_up(record))
        async for changes in watchfiles.awatch(
            root,
            debounce=max(debounce_ms, 1),
            step=50,
            stop_event=stop,
            recursive=True,
            force_polling=False,
        ):
            log.info("source_changed", source=record.name, changes=len(changes))
            await request_sync(self.bus, record, "watch")
        catch_up.cancel()

    async def _catch_up(self, record: SourceRecord) -> None:
        await asyncio.sleep(CATCH_UP_AFTER_S)
        try:
            await request_sync(self.bus, record, "watch")
        except Exception as exc:  # the next change, or the next tick's watcher, syncs it
            log.warning("source_catch_up_failed", source=record.name, error=repr(exc))
