"""Wrong keys slow their sender down, and only their sender (on a real redis-server): past
RAGBUS_AUTH_FAILURE_LIMIT wrong keys an address waits 1 s, then 2, 4 … up to the window, and
while it waits every key it offers, the right one too, is answered 429 with Retry-After; a
tenant's right key from another address still works, and a request without a key is never
counted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from api.app import create_app
from infra.runtime.services import LocalService
from infra.settings import Settings
from infra.tenancy.attempts import KEY_PREFIX, Attempts, client_key
from infra.tenancy.registry import TenantRegistry

ADMIN = "an-admin-key-that-is-32-characters-or-more"
METRICS = "a-metrics-key-that-is-32-characters-or-more"
ATTACKER, VICTIM = "203.0.113.7", "198.51.100.2"


@pytest.fixture
async def redis(redis_service: LocalService) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_service.url)

    async def forget() -> None:
        keys = [key async for key in client.scan_iter(f"{KEY_PREFIX}*")]
        keys += [key async for key in client.scan_iter("ragbus:tenant*")]
        if keys:
            await client.delete(*keys)

    await forget()
    yield client
    await forget()
    await client.aclose()


async def test_an_address_waits_twice_as_long_after_each_wrong_key_past_the_limit(
    redis: aioredis.Redis,
) -> None:
    attempts = Attempts(redis, limit=3, window_s=60)
    assert [await attempts.failed(ATTACKER) for _ in range(3)] == [0, 0, 0]
    assert await attempts.wait_s(ATTACKER) == 0
    assert [await attempts.failed(ATTACKER) for _ in range(4)] == [1, 2, 4, 8]
    assert await attempts.wait_s(ATTACKER) == 8
    assert await attempts.wait_s(VICTIM) == 0  # another address: untouched
    capped = Attempts(redis, limit=1, window_s=5)
    assert [await capped.failed("192.0.2.9") for _ in range(6)] == [0, 1, 2, 4, 5, 5]
    assert await Attempts(redis, limit=0, window_s=60).failed("192.0.2.10") == 0  # 0 = off


def test_an_ipv6_client_counts_by_its_64_and_a_mapped_ipv4_as_ipv4() -> None:
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:ffff::9")
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:203.0.113.7") == "203.0.113.7"
    assert client_key(None) == "unknown"


def _client(app: object, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://ragbus")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_flood_of_wrong_keys_shuts_out_its_address_and_no_one_else(
    redis: aioredis.Redis,
) -> None:
    settings = Settings(
        auth_mode="tenants",
        admin_token=ADMIN,
        metrics_token=METRICS,
        auth_failure_limit=3,
        auth_failure_window_s=60,
    )
    app = create_app(settings)
    app.state.redis = redis  # what the lifespan would open; no bus is needed here
    _, key = await TenantRegistry(redis).create("acme", "A" * 56)
    async with _client(app, ATTACKER) as attacker, _client(app, VICTIM) as victim:
        for _ in range(5):  # no key: nothing guessed, nothing counted
            assert (await attacker.get("/v1/whoami")).status_code == 401
        assert (await attacker.get("/v1/whoami", headers=bearer(key))).status_code == 200
        for guess in ("rbk_guess-1", "rbk_guess-2", ADMIN[:-1] + "x"):
            assert (await attacker.get("/v1/whoami", headers=bearer(guess))).status_code == 401
        fourth = await attacker.get("/v1/admin/tenants", headers=bearer("not-the-admin-key"))
        assert fourth.status_code == 401  # this one shuts it out
        for path, right in (
            ("/v1/whoami", key),  # even the right key: a right guess must look like a wrong one
            ("/v1/admin/tenants", ADMIN),
            ("/metrics", METRICS),
        ):
            shut = await attacker.get(path, headers=bearer(right))
            assert shut.status_code == 429, (path, shut.text)
            assert shut.json()["error"]["code"] == "too_many_requests"
            assert 1 <= int(shut.headers["Retry-After"]) <= 1
        # the tenant itself, from where it works, is not locked out by the attacker
        assert (await victim.get("/v1/whoami", headers=bearer(key))).json()["tenant"] == "acme"
        assert (await victim.get("/v1/admin/tenants", headers=bearer(ADMIN))).status_code == 200
        await asyncio.sleep(1.1)  # the wait is over: the right key works again …
        assert (await attacker.get("/v1/whoami", headers=bearer(key))).status_code == 200
        assert (await attacker.get("/v1/whoami", headers=bearer("rbk_x"))).status_code == 401
        again = await attacker.get("/v1/whoami", headers=bearer(key))
        assert again.status_code == 429  # … and the next wrong one doubles it
        assert int(again.headers["Retry-After"]) == 2
