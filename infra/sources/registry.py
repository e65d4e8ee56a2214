"""The sources each tenant declared, in Redis:

- `ragbus:sources:<tenant>`: hash, source name -> its record (`contracts.sources.SourceRecord`);
- `ragbus:sources`: set of `<tenant>/<name>`, every source of every tenant, which the sources
  workers' scheduler walks.

A source counts against its tenant's `RAGBUS_QUOTA_SOURCES` (or the tenant's own limit).
"""

from __future__ import annotations

from typing import Final

import redis.asyncio as aioredis

from contracts.sources import SourceRecord

ALL_SOURCES_KEY: Final = "ragbus:sources"

_CREATE = """
-- KEYS: the tenant's sources, every source; ARGV: name, record, limit, member
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 'exists' end
local limit = tonumber(ARGV[3])
if limit > 0 and redis.call('HLEN', KEYS[1]) >= limit then return 'full' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[4])
return 'ok'
"""


def sources_key(tenant: str) -> str:
    return f"ragbus:sources:{tenant}"


class SourceError(ValueError):
    """A source that cannot be made or found, said plainly."""


class SourceRegistry:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._create = redis.register_script(_CREATE)

    async def create(self, record: SourceRecord, limit: int) -> None:
        """Keep a new source; `SourceError` for a name taken or a tenant at its limit."""
        member = f"{record.tenant}/{record.name}"
        outcome = await self._create(
            keys=[sources_key(record.tenant), ALL_SOURCES_KEY],
            args=[record.name, record.stored_json(), limit, member],
        )
        outcome = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
        if outcome == "exists":
            raise SourceError(f"source {record.name!r} exists: remove it first, or pick a name")
        if outcome == "full":
            raise SourceError(
                f"the tenant keeps {limit} sources, its limit (RAGBUS_QUOTA_SOURCES): remove one"
            )

    async def get(self, tenant: str, name: str) -> SourceRecord | None:
        raw = await self.redis.hget(sources_key(tenant), name)
        return SourceRecord.model_validate_json(raw) if raw else None

    async def every(self, tenant: str) -> list[SourceRecord]:
        raw = await self.redis.hgetall(sources_key(tenant))
        return sorted(
            (SourceRecord.model_validate_json(value) for value in raw.values()),
            key=lambda record: record.name,
        )

    async def mark_removing(self, tenant: str, name: str) -> SourceRecord | None:
        """The source, marked as being removed (it syncs no more); None when there is none."""
        try:
            return await self.update(tenant, name, {"removing": True})
        except SourceError:
            return None

    async def update(self, tenant: str, name: str, changes: dict[str, object]) -> SourceRecord:
        """The source with `changes` made (atomically); `SourceError` when there is none, or
        it is being removed."""
        key = sources_key(tenant)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    raw = await pipe.hget(key, name)
                    found = SourceRecord.model_validate_json(raw) if raw else None
                    if found is None or found.removing:
                        await pipe.reset()
                        raise SourceError(f"no source {name!r}")
                    record = SourceRecord.model_validate({**found.model_dump(), **changes})
                    pipe.multi()
                    pipe.hset(key, name, record.stored_json())
                    await pipe.execute()
                    return record
                except aioredis.WatchError:
                    continue

    async def remove(self, tenant: str, name: str) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(sources_key(tenant), name)
            pipe.srem(ALL_SOURCES_KEY, f"{tenant}/{name}")
            removed, _ = await pipe.execute()
        return bool(removed)

    async def everywhere(self) -> list[SourceRecord]:
        """Every tenant's sources (the scheduler's walk)."""
        found = []
        for member in sorted(await self.redis.smembers(ALL_SOURCES_KEY)):
            text = member.decode() if isinstance(member, bytes) else str(member)
            tenant, _, name = text.partition("/")
            record = await self.get(tenant, name)
            if record is not None:
                found.append(record)
        return found
