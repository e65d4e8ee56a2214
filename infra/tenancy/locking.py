"""One change to a tenant's account at a time, and its versions in order.

Every command that changes what a tenant's account JWT says (made, revoked, a credential
revoked, pushed again when `ragbus up` starts) reads the tenant's record, builds the JWT and
pushes it while it holds the tenant's lock in Redis. A JWT built from a record read before
another command's change can then never reach the servers after that change's JWT: a
revocation is never overwritten by an older view of the tenant.

The servers keep, of two versions of an account, the one issued later (`iat`, in seconds)
when their resolvers compare notes; so each version pushed is issued at least a second after
the one before it (`next_issued_at`), even when two changes fall in one second.

- `ragbus:tenant-lock:<tenant>`: the lock, a random token with an expiry (`HOLD_S`);
- `ragbus:tenant-jwt-iat`: hash, tenant -> the `iat` of its latest account JWT.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import redis.asyncio as aioredis

from infra.tenancy.registry import TenantError

LOCK_PREFIX: Final = "ragbus:tenant-lock:"
ISSUED_AT_KEY: Final = "ragbus:tenant-jwt-iat"
HOLD_S: Final = 60.0
"""How long a lock outlives a holder that died: longer than a push and its checks take."""
WAIT_S: Final = 60.0
"""How long a command waits for another one's change to the same tenant."""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class TenantBusy(TenantError):
    """Another command held the tenant's lock for longer than `WAIT_S`."""


@asynccontextmanager
async def tenant_lock(
    redis: aioredis.Redis, tenant: str, *, hold_s: float = HOLD_S, wait_s: float = WAIT_S
) -> AsyncIterator[None]:
    """Hold the tenant's lock for the block; wait (up to `wait_s`) while another holds it."""
    key, token = LOCK_PREFIX + tenant, secrets.token_hex(16)
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while not await redis.set(key, token, nx=True, px=int(hold_s * 1000)):
        if time.monotonic() >= deadline:
            raise TenantBusy(
                f"tenant {tenant!r} is being changed by another command (its lock {key} is "
                f"held for over {wait_s:g} s); try again"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)
    try:
        yield
    finally:
        await redis.eval(_RELEASE, 1, key, token)


async def next_issued_at(redis: aioredis.Redis, tenant: str) -> int:
    """The `iat` of the tenant's next account JWT: now, or a second after the last one's if
    that is later. Call it while holding the tenant's lock."""
    last = await redis.hget(ISSUED_AT_KEY, tenant)
    issued_at = max(int(time.time()), int(last) + 1 if last is not None else 0)
    await redis.hset(ISSUED_AT_KEY, tenant, issued_at)
    return issued_at
