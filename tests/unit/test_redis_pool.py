"""A burst of commands waits for a pooled connection rather than failing (issue 54: redis-py's
default pool refused the 101st concurrent command, and the API answered 503 to everyone)."""

from __future__ import annotations

import asyncio

from infra.runtime.redis_client import POOL_CONNECTIONS, connect_redis
from infra.runtime.services import LocalService


async def test_more_concurrent_commands_than_connections_all_succeed(
    redis_service: LocalService,
) -> None:
    client = connect_redis(redis_service.url)
    try:
        # each holds its connection for 50 ms: twice the pool's connections at once
        burst = [
            client.blpop([f"ragbus:test:none:{i}"], timeout=0.05)
            for i in range(2 * POOL_CONNECTIONS)
        ]
        results = await asyncio.gather(*burst, return_exceptions=True)
        assert [r for r in results if isinstance(r, Exception)] == []
        assert client.connection_pool.max_connections == POOL_CONNECTIONS
    finally:
        await client.aclose()
