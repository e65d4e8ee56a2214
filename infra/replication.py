"""Writes that matter, waited for on a replica: `replicated` runs a write and then `WAIT`s on
the same connection until the client's `WaitPolicy` is met (`infra.runtime.redis_client`
gives a client behind sentinels one). Here, outside `infra.runtime`, because the stores that
write such things (sessions, quotas, the tenant registry) are imported by engines too, which
load nothing of the bus.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import redis.asyncio as aioredis
from prometheus_client import Counter

from infra.logging import get_logger

log = get_logger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class WaitPolicy:
    """`WAIT replicas timeout_ms` after the writes that matter (`replicated`)."""

    replicas: int
    timeout_ms: int


UNREPLICATED_WRITES = Counter(
    "ragbus_redis_unreplicated_writes_total",
    "Writes that matter acknowledged by fewer replicas than RAGBUS_REDIS_WAIT_REPLICAS "
    "within RAGBUS_REDIS_WAIT_TIMEOUT_MS (a replica down or behind)",
)


PROBE_MS = 5
"""How long a write waits for a replica while the last one waited for none: long enough for a
replica that is there to answer (well under a millisecond on one network), short enough that
a primary left alone after a failover (its old peer dead for hours) costs a write 5 ms, not the
whole `WaitPolicy.timeout_ms`."""


class RagbusRedis(aioredis.Redis):
    """redis-py's client, told how many replicas a write that matters waits for, and whether
    the last such wait found them (`replicated`)."""

    wait_policy: WaitPolicy | None = None
    replica_missing: bool = False


async def replicated(
    redis: aioredis.Redis, write: Callable[[aioredis.Redis], Awaitable[T]], what: str
) -> T:
    """`write` (given the client to write with), then, when the client has a `WaitPolicy`,
    `WAIT` on the same connection until that many replicas hold it.

    A replica that does not answer in time is logged and counted, and the write stands: it is
    on the primary, and a replica that is down cannot be waited for without stopping every
    write. Until a replica answers again, writes wait `PROBE_MS` for one (a primary left alone
    after a failover would otherwise add the whole timeout to every write)."""
    policy: WaitPolicy | None = getattr(redis, "wait_policy", None)
    if policy is None:
        return await write(redis)
    missing = bool(getattr(redis, "replica_missing", False))
    async with redis.client() as connection:
        result = await write(connection)
        acknowledged = int(
            await connection.wait(policy.replicas, PROBE_MS if missing else policy.timeout_ms)
        )
    now_missing = acknowledged < policy.replicas
    if now_missing:
        UNREPLICATED_WRITES.inc()
        if not missing:
            log.warning(
                "redis_replica_missing",
                what=what,
                replicas=acknowledged,
                wanted=policy.replicas,
                waited_ms=policy.timeout_ms,
            )
    elif missing:
        log.info("redis_replica_back", what=what, replicas=acknowledged)
    if now_missing != missing:
        redis.replica_missing = now_missing  # type: ignore[attr-defined]
    return result
