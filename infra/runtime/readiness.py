"""Which roles have a process ready to take work, across processes and hosts.

A process announces its roles (`orchestrator`, worker kinds) only after it has loaded what they
need and started consuming, and keeps announcing every `BEAT_S`: each role is a sorted set in
Redis whose members are processes, scored by when their announcement lapses. A process that
stops takes itself out; one that dies lapses after `LAPSE_S`. The API's `/readyz` reads it,
so "ready" means a question can be answered, not only that the API is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Iterable

import redis.asyncio as aioredis

from infra.logging import get_logger

log = get_logger(__name__)

BEAT_S = 5.0
LAPSE_S = 15.0
QUERY_ROLES = ("orchestrator", "classify", "search", "fuse", "generate", "critic")
"""Without a ready process in each of these, no question can be answered."""


def role_key(role: str) -> str:
    return f"ragbus:ready:{role}"


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Beacon:
    """Announces this process's roles until stopped."""

    def __init__(self, redis: aioredis.Redis, roles: Iterable[str]) -> None:
        self.redis = redis
        self.roles = list(roles)
        self.member = process_name()
        self._task: asyncio.Task[None] | None = None

    async def announce(self) -> None:
        lapses = time.time() + LAPSE_S
        async with self.redis.pipeline(transaction=False) as pipe:
            for role in self.roles:
                pipe.zadd(role_key(role), {self.member: lapses})
            await pipe.execute()

    async def start(self) -> None:
        if not self.roles:
            return
        await self.announce()
        self._task = asyncio.create_task(self._beat(), name="readiness-beacon")
        log.info("roles_ready", roles=self.roles, process=self.member)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(BEAT_S)
            try:
                await self.announce()
            except Exception as exc:  # Redis away: announce again on the next beat
                log.warning("readiness_beat_failed", error=str(exc))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):  # lapses by itself if Redis is away
            async with self.redis.pipeline(transaction=False) as pipe:
                for role in self.roles:
                    pipe.zrem(role_key(role), self.member)
                await pipe.execute()


async def ready_processes(redis: aioredis.Redis, roles: Iterable[str]) -> dict[str, int]:
    """How many processes announce each role now."""
    now = time.time()
    names = list(roles)
    async with redis.pipeline(transaction=False) as pipe:
        for role in names:
            pipe.zcount(role_key(role), now, "+inf")
        counts = await pipe.execute()
    return {role: int(n) for role, n in zip(names, counts, strict=True)}
