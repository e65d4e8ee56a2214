"""Ingestion job accounting in Redis: counts, seen documents, errors, and completion.

One Lua script per event makes "count this document, then maybe complete the job" atomic, so
documents and the seal may arrive in any order, on any replica, and a redelivered document
(same `event_id`, remembered in the `:seen` set) is never counted twice.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import redis.asyncio as aioredis

from contracts import subjects as sj
from contracts.ingest import IngestProgress, IngestProgressData
from contracts.tenancy import DEFAULT_TENANT
from infra.runtime.bus import Bus

Outcome = Literal["done", "failed", "unchanged"]

COUNTERS = (
    "documents_done",
    "documents_failed",
    "documents_unchanged",
    "duplicates",
    "chunks",
    "entities",
)

_FINISH = """
local function finish(job)
  local status = redis.call('HGET', job, 'status')
  local expected = redis.call('HGET', job, 'expected')
  if status ~= 'running' or not expected then return 0 end
  expected = tonumber(expected)
  local failed = tonumber(redis.call('HGET', job, 'documents_failed') or '0')
  local settled = tonumber(redis.call('HGET', job, 'documents_done') or '0')
    + tonumber(redis.call('HGET', job, 'documents_unchanged') or '0') + failed
  if settled < expected then return 0 end
  local final = 'completed'
  if expected > 0 and failed >= expected then final = 'failed' end
  redis.call('HSET', job, 'status', final)
  return 1
end
local function keep(ttl)
  for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ttl) end
end
"""

_RECORD = (
    _FINISH
    + """
-- KEYS: job, seen, errors; ARGV: event_id, counter, chunks, entities, document_id, error, ttl
local fresh = redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSETNX', KEYS[1], 'status', 'running')
if fresh == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('HINCRBY', KEYS[1], 'chunks', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'entities', ARGV[4])
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[3], ARGV[5], ARGV[6]) end
end
local completed = finish(KEYS[1])
keep(ARGV[7])
return {fresh, completed}
"""
)

_SEAL = (
    _FINISH
    + """
-- KEYS: job, seen, errors; ARGV: expected, duplicates, ttl
redis.call('HSETNX', KEYS[1], 'status', 'running')
redis.call('HSET', KEYS[1], 'expected', ARGV[1], 'duplicates', ARGV[2])
local completed = finish(KEYS[1])
keep(ARGV[3])
return {1, completed}
"""
)


def job_key(job_id: str) -> str:
    return f"ragbus:job:{job_id}"


def _keys(job_id: str) -> list[str]:
    base = job_key(job_id)
    return [base, f"{base}:seen", f"{base}:errors"]


class JobTracker:
    def __init__(self, redis: aioredis.Redis, ttl_s: int) -> None:
        self._redis = redis
        self._ttl = ttl_s
        self._record = redis.register_script(_RECORD)
        self._seal = redis.register_script(_SEAL)

    @property
    def redis(self) -> aioredis.Redis:
        return self._redis

    async def counted(self, job_id: str, event_id: str) -> bool:
        """Whether this document message was already counted (a redelivery)."""
        return bool(await self._redis.sismember(_keys(job_id)[1], event_id))

    async def record(
        self,
        job_id: str,
        event_id: str,
        outcome: Outcome,
        *,
        chunks: int = 0,
        entities: int = 0,
        document_id: str = "",
        error: str = "",
    ) -> bool:
        """Count one document; returns True when this call completed the job."""
        counter = f"documents_{outcome}"
        args: list[str | int] = [event_id, counter, chunks, entities, document_id, error, self._ttl]
        _fresh, completed = await self._record(keys=_keys(job_id), args=args)
        return bool(completed)

    async def requeue(self, job_id: str, event_id: str, limit: int) -> int | None:
        """Count one more fresh start of a document message; its number, or None when the
        message already had `limit` of them."""
        key = f"{job_key(job_id)}:requeues"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, event_id, 1)
            pipe.expire(key, self._ttl)
            count, _ = await pipe.execute()
        return int(count) if int(count) <= limit else None

    async def seal(self, job_id: str, expected: int, duplicates: int) -> bool:
        """Note how many documents the job holds; returns True when this call completed it."""
        _, completed = await self._seal(keys=_keys(job_id), args=[expected, duplicates, self._ttl])
        return bool(completed)


async def open_job(
    redis: aioredis.Redis,
    job_id: str,
    ttl_s: int,
    tenant: str = DEFAULT_TENANT,
    user: str | None = None,
) -> None:
    """Make a job known as `running`, and whose it is (its tenant, and the tenant's user who
    sent it, if one did), before its first message is published, so its status is readable
    at once (a worker may not have seen any of it yet)."""
    key = job_key(job_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hsetnx(key, "status", "running")
        pipe.hsetnx(key, "tenant", tenant)
        if user is not None:
            pipe.hsetnx(key, "user", user)
        pipe.expire(key, ttl_s)
        await pipe.execute()


async def read_job(redis: aioredis.Redis, job_id: str) -> dict[str, Any] | None:
    """A job as the API shows it, or None when Redis has never heard of it (or forgot it)."""
    base, _, errors_key = _keys(job_id)
    raw = cast(dict[str, str], await redis.hgetall(base))  # decode_responses=True
    if not raw:
        return None
    expected = raw.get("expected")
    return {
        "job_id": job_id,
        "tenant": raw.get("tenant", DEFAULT_TENANT),
        "user": raw.get("user"),
        "status": raw.get("status", "running"),
        "expected": int(expected) if expected is not None else None,
        **{name: int(raw.get(name, 0)) for name in COUNTERS},
        "errors": cast(dict[str, str], await redis.hgetall(errors_key)),
    }


async def publish_progress(
    bus: Bus,
    redis: aioredis.Redis,
    job_id: str,
    document_id: str | None = None,
    error: str | None = None,
    *,
    stage: Literal["parsed", "indexed", "waiting"] | None = None,
    pages: int | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    """Send the job's counts as they stand to its watchers; returns the job's state. `stage`
    and `pages` say what just happened to `document_id` (`parsed` into `pages` pages: a file
    made into its document, not yet counted; `waiting`, with the `detail` of why)."""
    state = await read_job(redis, job_id) or {"status": "running"}
    counts = {name: state[name] for name in ("status", "expected", *COUNTERS) if name in state}
    data = IngestProgressData(
        **counts, document_id=document_id, error=error, stage=stage, pages=pages, detail=detail
    )
    progress = IngestProgress(request_id=job_id, data=data)
    await bus.publish(progress, sj.ingest_events_subject(job_id), sj.STREAM_INGEST_EVENTS)
    return state
