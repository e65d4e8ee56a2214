"""A tenant's records and the order of its changes (on a real redis-server): an API key
rotated stops the old one at once; one NATS credential is revoked by its user's key alone;
changes to a tenant take its lock one at a time, and each account JWT is issued after the
one before it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from infra.runtime.services import LocalService
from infra.settings import Settings
from infra.tenancy import jwt
from infra.tenancy.accounts import TenantAccount, account_jwt, issue_user
from infra.tenancy.locking import TenantBusy, next_issued_at, tenant_lock
from infra.tenancy.registry import TENANTS_KEY, TenantError, TenantRegistry
from infra.tenancy.trust import load


@pytest.fixture
async def redis(redis_service: LocalService) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_service.url)

    async def forget() -> None:
        keys = [key async for key in client.scan_iter("ragbus:tenant*")]
        if keys:
            await client.delete(*keys)

    await forget()
    yield client
    await forget()
    await client.aclose()


async def test_a_rotated_key_replaces_every_earlier_one_at_once(redis: aioredis.Redis) -> None:
    registry = TenantRegistry(redis)
    _, first = await registry.create("acme", "A" * 56)
    tenant, second = await registry.rotate_key("acme")
    assert second != first and second.startswith("rbk_")
    assert await registry.authenticate(first) is None
    authenticated = await registry.authenticate(second)
    assert authenticated is not None and authenticated.tenant == "acme"
    assert tenant.key_hashes == authenticated.key_hashes  # one key, the new one
    await registry.revoke("acme")
    with pytest.raises(TenantError, match="no active tenant"):
        await registry.rotate_key("acme")
    assert await registry.authenticate(second) is None


async def test_one_credential_is_revoked_by_its_users_key_alone(redis: aioredis.Redis) -> None:
    registry = TenantRegistry(redis)
    await registry.create("acme", "A" * 56)
    users = [jwt.public(jwt.new_key("user")) for _ in range(3)]
    with pytest.raises(TenantError, match="not a NATS user's public key"):
        await registry.revoke_user("acme", jwt.public(jwt.new_key("account")))
    tenant, entry = await registry.revoke_user("acme", users[0])  # one never recorded
    assert entry.name == "(not recorded)" and entry.revoked_at is not None
    assert set(tenant.revoked_users()) == {users[0]}
    # a record of a ragbus that kept no credentials reads as one without any
    raw = json.loads(await redis.hget(TENANTS_KEY, "acme") or b"{}")
    raw.pop("nats_users")
    await redis.hset(TENANTS_KEY, "acme", json.dumps(raw))
    assert (await registry.get("acme")).nats_users == []  # type: ignore[union-attr]


def test_the_account_revokes_its_revoked_users_and_a_revoked_tenant_all(tmp_path: Path) -> None:
    trust = load(tmp_path / "trust", create=True)
    account = jwt.public(jwt.new_key("account"))
    kept, gone = (issue_user(trust, TenantAccount("acme", account))[1] for _ in range(2))
    active = TenantAccount("acme", account, revoked_users={gone: 1_800_000_000})
    claims = jwt.decode(account_jwt(trust, Settings(), active, issued_at=1_800_000_005))
    assert claims["nats"]["revocations"] == {gone: 1_800_000_000}
    assert claims["nats"]["limits"]["conn"] > 0 and kept not in claims["nats"]["revocations"]
    assert claims["iat"] == 1_800_000_005
    revoked = TenantAccount("acme", account, 1_800_000_009, {gone: 1_800_000_000})
    claims = jwt.decode(account_jwt(trust, Settings(), revoked))
    assert claims["nats"]["revocations"] == {gone: 1_800_000_000, "*": 1_800_000_009}


async def test_changes_to_one_tenant_take_its_lock_one_at_a_time(redis: aioredis.Redis) -> None:
    order: list[str] = []

    async def change(who: str, hold_s: float) -> None:
        async with tenant_lock(redis, "acme"):
            order.append(f"{who} in")
            await asyncio.sleep(hold_s)
            order.append(f"{who} out")

    first = asyncio.create_task(change("first", 0.3))
    await asyncio.sleep(0.05)
    await asyncio.gather(change("second", 0), first)
    assert order == ["first in", "first out", "second in", "second out"]
    async with tenant_lock(redis, "other"):  # another tenant's lock is another lock
        pass
    with pytest.raises(RuntimeError):  # a failed change lets the next one in
        async with tenant_lock(redis, "acme"):
            raise RuntimeError("boom")
    async with tenant_lock(redis, "acme", wait_s=0.1):
        with pytest.raises(TenantBusy, match="being changed by another command"):
            async with tenant_lock(redis, "acme", wait_s=0.2):
                pass


async def test_a_lock_whose_holder_died_expires(redis: aioredis.Redis) -> None:
    await redis.set("ragbus:tenant-lock:acme", "a-dead-holder", px=300)
    started = time.monotonic()
    async with tenant_lock(redis, "acme", wait_s=5):
        assert 0.2 < time.monotonic() - started < 2


async def test_each_account_jwt_is_issued_after_the_one_before(redis: aioredis.Redis) -> None:
    issued = [await next_issued_at(redis, "acme") for _ in range(4)]
    assert issued == sorted(set(issued)), issued  # strictly increasing, within one second too
    assert issued[0] >= int(time.time()) - 1
    assert await next_issued_at(redis, "other") <= issued[0] + 1
