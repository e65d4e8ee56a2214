"""Credentials one at a time, on real servers.

On a nats-server in operator mode (and a redis-server), driving `infra.tenancy.tenants`:

- a revocation that lands between `reconcile` reading the tenants and pushing their accounts
  is not overwritten by the older view (each tenant is read again under its lock);
- one NATS credential of a tenant is revoked alone: its connection closes and it is refused,
  while another credential of the same tenant stays connected and connects anew.

Through a real `ragbus up` in `tenants` mode (its own nats-server and redis-server), over
HTTP and the CLI:

- a tenant's API key is rotated, and the old one is refused from that answer on;
- credentials are issued, listed and revoked one by one;
- wrong keys from one address get it 429 with Retry-After, even for a right key, while the
  same key from another address works (uvicorn takes `X-Forwarded-For` from 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NATS

from infra.runtime.services import free_port, start_nats, start_redis
from infra.settings import Settings
from infra.tenancy import tenants
from infra.tenancy.accounts import connect_with_creds
from infra.tenancy.registry import TenantRegistry
from infra.tenancy.trust import load
from tests.up_process import ragbus_cli, ragbus_up, tenants_env

pytestmark = pytest.mark.integration

ADMIN = "admin-key-of-the-credentials-suite-0123456789"
FAILURE_LIMIT = 5


async def _quiet(_: Exception) -> None:
    """No traceback from nats-py for a refusal a test expects."""


async def refused(url: str, creds: str) -> str | None:
    """Why the server refuses these credentials; None if it takes them."""
    try:
        nc = await connect_with_creds(
            [url], creds, allow_reconnect=False, max_reconnect_attempts=0, error_cb=_quiet
        )
    except Exception as exc:
        return str(exc)
    await nc.close()
    return None


async def closed_within(nc: NATS, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while nc.is_connected and time.monotonic() < deadline:  # noqa: ASYNC110 (nats-py's state)
        await asyncio.sleep(0.05)
    return not nc.is_connected


# -- the tenancy on a nats-server in operator mode -----------------------------------------


@dataclass
class Bus:
    settings: Settings
    redis: aioredis.Redis

    @property
    def url(self) -> str:
        return self.settings.nats_url


@pytest.fixture(scope="module")
async def bus(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bus]:
    root = tmp_path_factory.mktemp("credentials")
    trust = load(root / "trust", create=True)
    nats_service = start_nats(free_port(), root / "nats", trust=trust)
    redis_service = start_redis(free_port(), root / "redis", persistent=False)
    settings = Settings(
        nats_url=nats_service.url,
        redis_url=redis_service.url,
        data_dir=root / "data",
        auth_mode="tenants",
        nats_trust_dir=root / "trust",
        nats_creds=trust.service_creds,
        log_level="WARNING",
    )
    redis = aioredis.from_url(settings.redis_url)
    try:
        yield Bus(settings, redis)
    finally:
        await redis.aclose()
        redis_service.stop()
        nats_service.stop()


async def test_a_revocation_between_reconciles_read_and_its_push_is_not_overwritten(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = await tenants.create(bus.redis, bus.settings, "race")
    assert made.nats_creds is not None
    assert await refused(bus.url, made.nats_creds) is None
    read_tenants = TenantRegistry.list

    async def read_then_revoke(registry: TenantRegistry) -> Any:
        listed = await read_tenants(registry)  # what reconcile read: "race" active …
        monkeypatch.setattr(TenantRegistry, "list", read_tenants)
        await tenants.revoke(bus.redis, bus.settings, "race")  # … revoked before it pushes
        return listed

    monkeypatch.setattr(TenantRegistry, "list", read_then_revoke)
    trust = tenants.trust_for(bus.settings)
    await tenants.reconcile(bus.redis, bus.settings, trust)
    assert "Authorization" in (await refused(bus.url, made.nats_creds) or "taken")
    await tenants.reconcile(bus.redis, bus.settings, trust)  # and every push after it agrees
    assert "Authorization" in (await refused(bus.url, made.nats_creds) or "taken")


async def test_one_credential_is_revoked_alone_and_the_tenants_others_keep_working(
    bus: Bus,
) -> None:
    made = await tenants.create(bus.redis, bus.settings, "pair")
    assert made.nats_creds is not None and made.nats_user is not None
    laptop, laptop_user = await tenants.issue_creds(bus.redis, bus.settings, "pair", "laptop")
    assert laptop_user.user != made.nats_user
    first = await connect_with_creds([bus.url], made.nats_creds, error_cb=_quiet)
    second = await connect_with_creds([bus.url], laptop)
    try:
        revoked = await tenants.revoke_creds(bus.redis, bus.settings, "pair", made.nats_user)
        assert revoked.revoked_at is not None
        # when the command returns, its connection is closing and it is refused anew …
        assert await closed_within(first, 2.0)
        assert "Authorization" in (await refused(bus.url, made.nats_creds) or "taken")
        # … while the tenant's other credential stays connected, and connects anew
        assert second.is_connected
        await second.flush(timeout=2)
        assert await refused(bus.url, laptop) is None
    finally:
        await first.close()
        await second.close()
    listed = {user.user: user for user in await tenants.list_creds(bus.redis, "pair")}
    assert listed[made.nats_user].revoked_at is not None
    assert listed[laptop_user.user].revoked_at is None and listed[laptop_user.user].name == "laptop"
    tenant = await TenantRegistry(bus.redis).get("pair")
    assert tenant is not None and tenant.active  # the tenant itself is untouched


# -- through a real `ragbus up` --------------------------------------------------------------


@dataclass
class Stack:
    url: str
    nats_url: str
    env: dict[str, str]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return ragbus_cli(self.env, *args)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("credentials-up")
    nats_port, api_port = free_port(), free_port()
    env = tenants_env(
        root,
        api_port,
        nats_port,
        ADMIN,
        AUTH_FAILURE_LIMIT=str(FAILURE_LIMIT),
        UP_PROCESSES="1",
    )
    env.pop("FORWARDED_ALLOW_IPS", None)  # uvicorn's default: X-Forwarded-For from 127.0.0.1
    url = f"http://127.0.0.1:{api_port}"
    with ragbus_up(env, root / "up.log", url):
        yield Stack(url, f"nats://127.0.0.1:{nats_port}", env)


def admin(**headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}", **headers}


def bearer(key: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers}


def make_tenant(stack: Stack, name: str) -> dict[str, Any]:
    made = httpx.post(f"{stack.url}/v1/admin/tenants", json={"tenant": name}, headers=admin())
    assert made.status_code == 201, made.text
    return dict(made.json())


def test_a_rotated_api_key_stops_the_old_one_at_once(stack: Stack) -> None:
    first = make_tenant(stack, "turn")["api_key"]
    whoami = f"{stack.url}/v1/whoami"
    assert httpx.get(whoami, headers=bearer(first)).status_code == 200
    rotated = httpx.post(f"{stack.url}/v1/admin/tenants/turn/api-key", headers=admin())
    assert rotated.status_code == 200, rotated.text
    second = rotated.json()["api_key"]
    assert second != first
    assert httpx.get(whoami, headers=bearer(first)).status_code == 401  # from this answer on
    assert httpx.get(whoami, headers=bearer(second)).json()["tenant"] == "turn"
    done = stack.cli("tenant", "rotate-key", "turn", "--json")
    assert done.returncode == 0, done.stderr
    third = json.loads(done.stdout)["api_key"]
    assert httpx.get(whoami, headers=bearer(second)).status_code == 401
    assert httpx.get(whoami, headers=bearer(third)).status_code == 200
    missing = httpx.post(f"{stack.url}/v1/admin/tenants/nobody/api-key", headers=admin())
    assert missing.status_code == 404
    assert "api_key" not in httpx.get(f"{stack.url}/v1/admin/tenants/turn", headers=admin()).text


async def test_credentials_are_issued_listed_and_revoked_one_by_one(stack: Stack) -> None:
    made = await asyncio.to_thread(make_tenant, stack, "duo")
    base = f"{stack.url}/v1/admin/tenants/duo/nats-creds"
    async with httpx.AsyncClient(headers=admin(), timeout=30) as http:
        issued = await http.post(base, json={"name": "laptop"})
        assert issued.status_code == 200, issued.text
        laptop = issued.json()
        listed = (await http.get(base)).json()["nats_users"]
        assert {u["user"] for u in listed} == {made["nats_user"], laptop["nats_user"]}
        assert {u["name"] for u in listed} == {"duo", "laptop"}
        assert "-----BEGIN" not in json.dumps(listed)  # no secret in the list
        gone = await http.delete(f"{base}/{laptop['nats_user']}")
        assert gone.status_code == 200, gone.text
        assert gone.json()["revoked_at"] is not None
        assert (await http.delete(f"{base}/not-a-key")).status_code == 422
    assert "Authorization" in (await refused(stack.nats_url, laptop["nats_creds"]) or "taken")
    assert await refused(stack.nats_url, made["nats_creds"]) is None  # the other one works
    # the CLI: the list, and revoking the credential the tenant was made with
    listing = await asyncio.to_thread(stack.cli, "tenant", "creds", "duo", "--list", "--json")
    assert listing.returncode == 0, listing.stderr
    states = {u["user"]: u["active"] for u in json.loads(listing.stdout)["nats_users"]}
    assert states == {made["nats_user"]: True, laptop["nats_user"]: False}
    done = await asyncio.to_thread(
        stack.cli, "tenant", "creds", "duo", "--revoke", made["nats_user"], "--json"
    )
    assert done.returncode == 0, done.stderr
    assert "Authorization" in (await refused(stack.nats_url, made["nats_creds"]) or "taken")
    fresh = await asyncio.to_thread(stack.cli, "tenant", "creds", "duo", "--name", "ci")
    assert fresh.returncode == 0, fresh.stderr
    assert await refused(stack.nats_url, fresh.stdout) is None  # the tenant itself is live
    assert "nats_user U" in fresh.stderr
    async with httpx.AsyncClient() as http:
        whoami = await http.get(f"{stack.url}/v1/whoami", headers=bearer(made["api_key"]))
    assert whoami.status_code == 200  # and its API key untouched


def test_wrong_keys_slow_their_address_and_no_other(stack: Stack) -> None:
    key = make_tenant(stack, "target")["api_key"]
    whoami = f"{stack.url}/v1/whoami"
    attacker = {"X-Forwarded-For": "203.0.113.50"}
    for guess in range(FAILURE_LIMIT + 1):
        wrong = httpx.get(whoami, headers=bearer(f"rbk_guess-{guess}", **attacker))
        assert wrong.status_code == 401
    shut = httpx.get(whoami, headers=bearer(key, **attacker))  # the right key, now
    assert shut.status_code == 429, shut.text
    assert int(shut.headers["Retry-After"]) >= 1
    assert httpx.get(f"{stack.url}/v1/admin/tenants", headers=admin(**attacker)).status_code == 429
    # the tenant, from its own address, and the operator are not locked out
    assert httpx.get(whoami, headers=bearer(key)).json()["tenant"] == "target"
    other = {"X-Forwarded-For": "198.51.100.60"}
    assert httpx.get(f"{stack.url}/v1/admin/tenants", headers=admin(**other)).status_code == 200
