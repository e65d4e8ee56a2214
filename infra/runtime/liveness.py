"""Is a request still running? One Redis command, for workers to ask before heavy work.

The orchestrator keeps every unfinished request in one sorted set, scored by its next
deadline (`orchestrator.store`): a request is added when it is recorded and removed when it
reaches a terminal status. So membership is exactly "known and not finished", and a command
for a request that does not exist (forged, or from another installation) or that already
ended (timed out while the command waited) is dropped before any model runs.
"""

from __future__ import annotations

import redis.asyncio as aioredis

DEADLINES_KEY = "ragbus:deadlines"


async def is_live(redis: aioredis.Redis, request_id: str) -> bool:
    return await redis.zscore(DEADLINES_KEY, request_id) is not None
