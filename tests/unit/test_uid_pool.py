"""Two tool workers on one host draw sandbox user ids from the same range, and a run's end
kills every process of its id: an id is only ever leased by one of them at a time."""

from __future__ import annotations

import asyncio

from workers.tool import sandbox_procs
from workers.tool.sandbox_procs import UidPool

IDS = range(sandbox_procs.SANDBOX_UID_BASE + 60, sandbox_procs.SANDBOX_UID_BASE + 62)


async def test_two_pools_never_lease_the_same_id_at_once() -> None:
    got: list[int] = []

    async def run(pool: UidPool) -> None:
        async with pool.lease() as uid:
            got.append(uid)
            await asyncio.sleep(0.3)

    first = asyncio.ensure_future(run(UidPool(IDS)))
    second = asyncio.ensure_future(run(UidPool(IDS)))
    await asyncio.sleep(0.1)
    assert sorted(got) == list(IDS), "each pool took an id the other does not hold"
    third = asyncio.ensure_future(run(UidPool(IDS)))
    await asyncio.sleep(0.1)
    assert len(got) == 2, "both ids are leased: a third run waits"
    await asyncio.wait_for(asyncio.gather(first, second, third), 5)
    assert len(got) == 3 and got[2] in IDS
