"""Making and revoking a tenant: its record and API key in Redis, and in `tenants` mode its
NATS account, pushed to every server before the answer comes.

The admin API (`api.admin`), the CLI (`ragbus tenant`) and `ragbus up`'s start (which pushes
every account again) all go through here.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from contracts import subjects as sj
from infra.logging import get_logger
from infra.settings import Settings
from infra.tenancy import accounts, jwt
from infra.tenancy.accounts import BusTenancyError, TenantAccount
from infra.tenancy.registry import Limits, NewTenant, Tenant, TenantError, TenantRegistry
from infra.tenancy.trust import Trust, TrustError, load

log = get_logger(__name__)


def _on_the_bus(settings: Settings) -> Trust | None:
    """The operator's keys where tenants have accounts on the bus (`tenants` mode)."""
    return load(settings.trust_dir) if settings.auth == "tenants" else None


def _account(tenant: Tenant) -> TenantAccount:
    assert tenant.nats_account is not None, tenant.tenant
    revoked = int(tenant.revoked_at.timestamp()) if tenant.revoked_at is not None else None
    return TenantAccount(tenant.tenant, tenant.nats_account, revoked)


async def create(
    redis: aioredis.Redis, settings: Settings, name: str, limits: Limits | None = None
) -> NewTenant:
    """A new tenant. In `tenants` mode its account is on every NATS server, with its stream,
    when this returns; if the bus refuses it, the tenant is revoked again and the error
    raised (its name stays taken, as every revoked tenant's does)."""
    trust = _on_the_bus(settings)  # before anything is written: no keys, no tenant
    registry = TenantRegistry(redis)
    account_key = jwt.new_key("account")
    record, api_key = await registry.create(name, jwt.public(account_key), limits)
    creds = None
    if trust is not None:
        account = _account(record)
        try:
            await accounts.publish_account(trust, settings, account, with_stream=True)
        except BusTenancyError:
            await registry.revoke(name)
            raise
        creds = accounts.user_creds(trust, account)
    log.info("tenant_created", tenant=name, nats_account=record.nats_account, bus=bool(trust))
    return NewTenant(
        tenant=name,
        api_key=api_key,
        nats_account=jwt.public(account_key),
        nats_creds=creds,
        events_subject=accounts.events_filter(name),
        events_stream=accounts.TENANT_STREAM,
        documents_subject=sj.TENANT_DOCUMENTS,
    )


async def revoke(redis: aioredis.Redis, settings: Settings, name: str) -> Tenant:
    """Its API keys stop at once; in `tenants` mode its NATS connections are closed and
    refused on every server when this returns."""
    revoked = await TenantRegistry(redis).revoke(name)
    trust = _on_the_bus(settings)
    if trust is not None and revoked.nats_account is not None:
        await accounts.publish_account(trust, settings, _account(revoked))
    log.info("tenant_revoked", tenant=name, bus=bool(trust))
    return revoked


async def reconcile(redis: aioredis.Redis, settings: Settings, trust: Trust) -> int:
    """Push the service account and every tenant's account again, and declare the active
    tenants' streams: what `ragbus up` does when it starts in `tenants` mode, so a server
    with a new resolver directory (or a ragbus with new exports) is brought up to date."""
    tenants = [t for t in await TenantRegistry(redis).list() if t.nats_account is not None]
    await accounts.reconcile(trust, settings, [_account(t) for t in tenants])
    return len(tenants)


async def issue_creds(redis: aioredis.Redis, settings: Settings, name: str) -> str:
    """New NATS credentials for an active tenant (lost ones, or a rotation: the earlier ones
    keep working until the tenant is revoked); a tenant made before tenants had accounts
    gets its account first. `tenants` mode only."""
    trust = _on_the_bus(settings)
    if trust is None:
        raise TenantError("NATS credentials exist in tenants mode only (RAGBUS_AUTH_MODE=tenants)")
    registry = TenantRegistry(redis)
    tenant = await registry.get(name)
    if tenant is None or not tenant.active:
        raise TenantError(f"no active tenant {name!r}")
    if tenant.nats_account is None:
        tenant = await registry.set_account(name, jwt.public(jwt.new_key("account")))
        await accounts.publish_account(trust, settings, _account(tenant), with_stream=True)
        log.info("tenant_account_made", tenant=name, nats_account=tenant.nats_account)
    return accounts.user_creds(trust, _account(tenant))


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
    "reconcile",
    "revoke",
    "trust_for",
]
