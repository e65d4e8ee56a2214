"""Making and revoking a tenant, its API key and its NATS credentials: its record in Redis,
and in `tenants` mode its NATS account, on every node before the answer comes.

The admin API (`api.admin`), the CLI (`ragbus tenant`) and `ragbus up`'s start (which pushes
every account again) all go through here. Every change to what a tenant's account JWT says
happens under the tenant's lock (`infra.tenancy.locking`): the record is read, changed, and
its JWT built and pushed before another command may touch that tenant, so a JWT built from
an older view of the tenant never reaches the servers after a newer one.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from contracts import subjects as sj
from contracts.envelope import utcnow
from infra.logging import get_logger
from infra.settings import Settings
from infra.tenancy import accounts, jwt, spread
from infra.tenancy.accounts import BusTenancyError, TenantAccount
from infra.tenancy.locking import next_issued_at, tenant_lock
from infra.tenancy.registry import (
    Limits,
    NatsUser,
    NewTenant,
    Tenant,
    TenantError,
    TenantRegistry,
)
from infra.tenancy.trust import Trust, TrustError, load

log = get_logger(__name__)


def _on_the_bus(settings: Settings) -> Trust | None:
    """The operator's keys where tenants have accounts on the bus (`tenants` mode)."""
    return load(settings.trust_dir) if settings.auth == "tenants" else None


def _bus_only(settings: Settings) -> Trust:
    trust = _on_the_bus(settings)
    if trust is None:
        raise TenantError("NATS credentials exist in tenants mode only (RAGBUS_AUTH_MODE=tenants)")
    return trust


def _account(tenant: Tenant) -> TenantAccount:
    assert tenant.nats_account is not None, tenant.tenant
    revoked = int(tenant.revoked_at.timestamp()) if tenant.revoked_at is not None else None
    return TenantAccount(tenant.tenant, tenant.nats_account, revoked, tenant.revoked_users())


async def _publish(redis: aioredis.Redis, settings: Settings, trust: Trust, tenant: Tenant) -> None:
    """The tenant's account as `tenant` says, on every node and checked there
    (`infra.tenancy.spread`). Call it holding the tenant's lock."""
    account = _account(tenant)
    text = accounts.account_jwt(
        trust, settings, account, issued_at=await next_issued_at(redis, tenant.tenant)
    )
    try:
        async with spread.nodes(trust, settings) as reached:
            await spread.settle(trust, reached, account, text)
    except BusTenancyError:
        raise
    except Exception as exc:
        raise BusTenancyError(
            f"NATS did not take tenant {tenant.tenant!r}'s account: {type(exc).__name__}: {exc}"
        ) from exc


async def _declare_stream(trust: Trust, settings: Settings, tenant: Tenant) -> None:
    try:
        await accounts.declare_stream(trust, settings, _account(tenant))
    except Exception as exc:
        raise BusTenancyError(
            f"NATS did not take tenant {tenant.tenant!r}'s stream: {type(exc).__name__}: {exc}"
        ) from exc


def _recorded(user: str, name: str) -> NatsUser:
    return NatsUser(user=user, name=name, issued_at=utcnow())


async def create(
    redis: aioredis.Redis, settings: Settings, name: str, limits: Limits | None = None
) -> NewTenant:
    """A new tenant. In `tenants` mode its account is on every NATS node, with its stream,
    when this returns; if the bus refuses it, the tenant is revoked again and the error
    raised (its name stays taken, as every revoked tenant's does)."""
    trust = _on_the_bus(settings)  # before anything is written: no keys, no tenant
    registry = TenantRegistry(redis)
    account_key = jwt.new_key("account")
    record, api_key = await registry.create(name, jwt.public(account_key), limits)
    creds = user = None
    if trust is not None:
        try:
            async with tenant_lock(redis, name):
                record = await registry.active(name)  # as it is now: revoked meanwhile?
                await _publish(redis, settings, trust, record)
            await _declare_stream(trust, settings, record)
            async with tenant_lock(redis, name):
                creds, user = accounts.issue_user(trust, _account(record))
                await registry.add_users(name, [_recorded(user, name)])
        except BusTenancyError:
            async with tenant_lock(redis, name):
                await registry.revoke(name)
            raise
    log.info("tenant_created", tenant=name, nats_account=record.nats_account, bus=bool(trust))
    return NewTenant(
        tenant=name,
        api_key=api_key,
        nats_account=jwt.public(account_key),
        nats_user=user,
        nats_creds=creds,
        events_subject=accounts.events_filter(name),
        events_stream=accounts.TENANT_STREAM,
        documents_subject=sj.TENANT_DOCUMENTS,
    )


async def revoke(redis: aioredis.Redis, settings: Settings, name: str) -> Tenant:
    """Its API keys stop at once; in `tenants` mode its NATS connections are closed, and its
    credentials refused, on every node when this returns."""
    async with tenant_lock(redis, name):
        revoked = await TenantRegistry(redis).revoke(name)
        trust = _on_the_bus(settings)
        if trust is not None and revoked.nats_account is not None:
            await _publish(redis, settings, trust, revoked)
    log.info("tenant_revoked", tenant=name, bus=bool(trust))
    return revoked


async def allow_mcp_servers(redis: aioredis.Redis, name: str, servers: list[str]) -> Tenant:
    """Which of the operator's MCP servers the tenant's requests may use from now on (the
    workers read it within `infra.tenancy.tool_access.CACHE_S`)."""
    async with tenant_lock(redis, name):
        tenant = await TenantRegistry(redis).allow_mcp_servers(name, servers)
    log.info("tenant_mcp_servers", tenant=name, servers=tenant.mcp_servers)
    return tenant


async def rotate_key(redis: aioredis.Redis, name: str) -> str:
    """A new API key for an active tenant, shown this once; its earlier keys stop at once."""
    async with tenant_lock(redis, name):
        _, api_key = await TenantRegistry(redis).rotate_key(name)
    log.info("tenant_key_rotated", tenant=name)
    return api_key


async def reconcile(redis: aioredis.Redis, settings: Settings, trust: Trust) -> int:
    """Push the service account and every tenant's account again, and declare the active
    tenants' streams: what `ragbus up` does when it starts in `tenants` mode, so a server
    with a new resolver directory (or a ragbus with new exports) is brought up to date.
    Each tenant is read again under its lock, right before its JWT is built and pushed: a
    tenant revoked since the list was read is pushed revoked."""
    registry = TenantRegistry(redis)
    names = [t.tenant for t in await registry.list() if t.nats_account is not None]
    active: list[Tenant] = []
    async with spread.nodes(trust, settings) as reached:
        await spread.push_to_each(reached, trust.service_jwt())
        for name in names:
            async with tenant_lock(redis, name):
                tenant = await registry.get(name)
                if tenant is None or tenant.nats_account is None:
                    continue
                text = accounts.account_jwt(
                    trust, settings, _account(tenant), issued_at=await next_issued_at(redis, name)
                )
                await spread.push_to_each(reached, text)
            if tenant.active:
                active.append(tenant)
    for tenant in active:
        await accounts.declare_stream(trust, settings, _account(tenant))
    return len(names)


async def issue_creds(
    redis: aioredis.Redis, settings: Settings, name: str, label: str | None = None
) -> tuple[str, NatsUser]:
    """New NATS credentials for an active tenant (lost ones, a second client, a rotation),
    and the record of its user (whose key revokes it alone: `revoke_creds`); a tenant made
    before tenants had accounts gets its account first. `tenants` mode only."""
    trust = _bus_only(settings)
    registry = TenantRegistry(redis)
    made_account = False
    async with tenant_lock(redis, name):
        tenant = await registry.active(name)
        if tenant.nats_account is None:
            tenant = await registry.set_account(name, jwt.public(jwt.new_key("account")))
            await _publish(redis, settings, trust, tenant)
            made_account = True
            log.info("tenant_account_made", tenant=name, nats_account=tenant.nats_account)
        text, user = accounts.issue_user(trust, _account(tenant), label)
        entry = _recorded(user, label or name)
        await registry.add_users(name, [entry])
    if made_account:
        await _declare_stream(trust, settings, tenant)
    log.info("tenant_creds_issued", tenant=name, user=user)
    return text, entry


async def list_creds(redis: aioredis.Redis, name: str) -> list[NatsUser]:
    """The credentials ragbus issued the tenant (and those revoked by key), never a seed."""
    tenant = await TenantRegistry(redis).get(name)
    if tenant is None:
        raise TenantError(f"no tenant {name!r}")
    return tenant.nats_users


async def revoke_creds(redis: aioredis.Redis, settings: Settings, name: str, user: str) -> NatsUser:
    """Revoke one NATS credential of an active tenant by its user's public key: its
    connections close and it is refused on every node when this returns; the tenant's other
    credentials, its API key and its data are untouched."""
    trust = _bus_only(settings)
    registry = TenantRegistry(redis)
    async with tenant_lock(redis, name):
        if (await registry.active(name)).nats_account is None:
            raise TenantError(f"tenant {name!r} has no NATS account yet (`ragbus tenant creds`)")
        tenant, entry = await registry.revoke_user(name, user)
        await _publish(redis, settings, trust, tenant)
    log.info("tenant_creds_revoked", tenant=name, user=user)
    return entry


def trust_for(settings: Settings, *, create: bool = False) -> Trust:
    """The operator's keys, made on first use when `create` (`ragbus tenant nats-config`,
    and `ragbus up` for the server it starts)."""
    return load(settings.trust_dir, create=create)


__all__ = [
    "BusTenancyError",
    "TenantError",
    "TrustError",
    "create",
    "issue_creds",
    "list_creds",
    "reconcile",
    "revoke",
    "revoke_creds",
    "rotate_key",
    "trust_for",
]
