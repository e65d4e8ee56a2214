"""`FairSlots`: a few slots of work (parsers) shared among tenants, handed out in turn.

A tenant waits for a slot with `async with slots.slot(tenant) as index:`. A free slot goes to
the waiting tenant served longest ago (one never served first, then in the order they
asked): a tenant that floods the queue gets a slot after every other waiting tenant had one.
Work conserving: a slot never stays free while anyone waits. Each tenant's lane holds at most
one message at a time in a process (`infra.runtime.tenant_lanes`), so a tenant has at most one
waiter here and at most one running slot, and with two slots or more one tenant alone can never
hold them all: another tenant's file starts as soon as it is fetched.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(order=True)
class _Waiter:
    last_served: float
    arrived: int
    tenant: str = field(compare=False)
    granted: asyncio.Future[int] = field(compare=False)


class FairSlots:
    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("at least one slot")
        self.count = count
        self._free = list(range(count))
        self._waiting: list[_Waiter] = []
        self._last_served: dict[str, float] = {}
        self._arrivals = itertools.count()
        self.running: dict[int, str] = {}
        """Which tenant holds each busy slot."""

    def waiting(self) -> list[str]:
        return [waiter.tenant for waiter in sorted(self._waiting)]

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[int]:
        """A slot's index, held until the block ends."""
        index = await self._acquire(tenant)
        try:
            yield index
        finally:
            self._release(index)

    async def _acquire(self, tenant: str) -> int:
        if self._free and not self._waiting:
            return self._grant(tenant, self._free.pop(0))
        loop = asyncio.get_running_loop()
        waiter = _Waiter(
            last_served=self._last_served.get(tenant, float("-inf")),
            arrived=next(self._arrivals),
            tenant=tenant,
            granted=loop.create_future(),
        )
        self._waiting.append(waiter)
        try:
            return await waiter.granted
        except asyncio.CancelledError:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.granted.done() and not waiter.granted.cancelled():
                self._release(waiter.granted.result())  # granted as it was cancelled
            raise

    def _grant(self, tenant: str, index: int) -> int:
        self._last_served[tenant] = time.monotonic()
        self.running[index] = tenant
        return index

    def _release(self, index: int) -> None:
        self.running.pop(index, None)
        while self._waiting:
            waiter = min(self._waiting)
            self._waiting.remove(waiter)
            if not waiter.granted.done():
                waiter.granted.set_result(self._grant(waiter.tenant, index))
                return
        self._free.append(index)
        self._free.sort()
