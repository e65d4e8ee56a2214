"""The tools the tool workers run, published in Redis for the processes that offer them to a
model (the generate worker lives in another process, often on another host).

Each tool worker keeps its whole registry (name, description, parameters, and the MCP server
a tool belongs to) under a key of its own, `ragbus:tools:<host>:<pid>:<n>`, as JSON, written
at start, again every `REFRESH_S` and at once when its registry changes (an MCP server came,
went or changed its tools), lapsing `TTL_S` after its last write: a worker that dies takes its
tools with it within that time, one that stops takes them at once. The keys are listed in a
set, `ragbus:tool-workers`, so `read_catalog` reads as many keys as there are workers, never
scanning the keyspace (the saga's states share it); a worker's key that lapsed leaves the set
at the next read. `read_catalog` is the union of what every worker publishes, one entry a name.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from typing import Final

import redis.asyncio as aioredis
from pydantic import ValidationError

from contracts.tools import CatalogTool
from infra.logging import get_logger
from infra.runtime.readiness import process_name

log = get_logger(__name__)

KEY_PREFIX: Final = "ragbus:tools:"
WORKERS_KEY: Final = "ragbus:tool-workers"
"""The set of the workers' catalog keys."""
TTL_S: Final = 30.0
REFRESH_S: Final = 10.0
_numbers = itertools.count(1)


def catalog_key(worker: str) -> str:
    return f"{KEY_PREFIX}{worker}"


class CatalogPublisher:
    """Keeps one tool worker's tools (`tools()`, read at each write) in Redis until stopped."""

    def __init__(
        self,
        redis: aioredis.Redis,
        tools: Callable[[], list[CatalogTool]],
        *,
        worker: str | None = None,
        refresh_s: float = REFRESH_S,
        ttl_s: float = TTL_S,
    ) -> None:
        self.redis = redis
        self.tools = tools
        self.key = catalog_key(worker or f"{process_name()}:{next(_numbers)}")
        self.refresh_s = refresh_s
        self.ttl_s = ttl_s
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def changed(self) -> None:
        """The registry changed: publish it now (a registry listener)."""
        self._changed.set()

    async def publish(self) -> None:
        body = json.dumps([tool.model_dump(mode="json") for tool in self.tools()])
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.key, body, px=int(self.ttl_s * 1000))
            pipe.sadd(WORKERS_KEY, self.key)
            await pipe.execute()

    async def _publish_logged(self) -> None:
        try:
            await self.publish()
        except Exception as exc:  # Redis away: the next write tries again
            log.warning("tool_catalog_not_published", key=self.key, error=str(exc))

    async def start(self) -> None:
        if self._task is not None:
            return
        self._changed.clear()
        await self._publish_logged()
        self._task = asyncio.create_task(self._run(), name="tool-catalog")

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.refresh_s)
            self._changed.clear()
            await self._publish_logged()

    async def stop(self) -> None:
        """Stop publishing and take the tools back (nothing when it never started)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        with contextlib.suppress(Exception):  # lapses by itself if Redis is away
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(self.key)
                pipe.srem(WORKERS_KEY, self.key)
                await pipe.execute()


async def read_catalog(redis: aioredis.Redis) -> list[CatalogTool]:
    """Every tool some tool worker publishes, one a name (the first worker's, in key order,
    where two disagree), sorted by name. An entry that does not read is skipped."""
    keys = sorted(str(key) for key in await redis.smembers(WORKERS_KEY))
    if not keys:
        return []
    found: dict[str, CatalogTool] = {}
    lapsed: list[str] = []
    for key, raw in zip(keys, await redis.mget(keys), strict=True):
        if raw is None:  # its worker died (or stopped while Redis was away)
            lapsed.append(key)
            continue
        try:
            entries = json.loads(raw)
            tools = [CatalogTool.model_validate(entry) for entry in entries]
        except (ValueError, TypeError, ValidationError) as exc:
            log.warning("tool_catalog_unreadable", key=str(key), error=str(exc)[:300])
            continue
        for tool in tools:
            found.setdefault(tool.name, tool)
    if lapsed:
        await redis.srem(WORKERS_KEY, *lapsed)
    return [found[name] for name in sorted(found)]
