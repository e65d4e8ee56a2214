"""Tenant records and API keys in Redis.

An API key is shown once, when the tenant is created; Redis keeps only its SHA-256 (a key is
32 random bytes, so a fast hash is the right one: there is nothing to brute-force, and every
request looks one up). A tenant's NATS account is kept by its public key alone: its JWT is
signed again from the operator's keys whenever it is pushed (`infra.tenancy.accounts`), and
its users' credentials are shown once, like the API key: the record keeps each user's public
key, name and dates, so one credential can be revoked alone (the account JWT's
`revocations`).

- `ragbus:tenants`: hash, tenant name -> its record (JSON);
- `ragbus:tenant-keys`: hash, SHA-256 of an API key -> tenant name;

A record is changed only under the tenant's lock (`infra.tenancy.locking`, taken by
`infra.tenancy.tenants`): read, changed and written whole, two changes never lose one.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.envelope import utcnow
from contracts.tenancy import RESERVED_TENANTS, TenantName, is_valid_tenant
from infra.replication import replicated
from infra.tenancy import jwt

TENANTS_KEY: Final = "ragbus:tenants"
KEYS_KEY: Final = "ragbus:tenant-keys"
API_KEY_PREFIX: Final = "rbk_"


class TenantError(ValueError):
    """A tenant that cannot be created or found, said plainly."""


class Limits(BaseModel):
    """A tenant's own limits; unset ones are the settings' (`RAGBUS_QUOTA_*`)."""

    model_config = ConfigDict(extra="forbid")

    requests_per_s: float | None = Field(default=None, ge=0)
    burst: int | None = Field(default=None, ge=1)
    documents: int | None = Field(default=None, ge=0)
    namespaces: int | None = Field(default=None, ge=0)
    bytes: int | None = Field(default=None, ge=0)
    sources: int | None = Field(default=None, ge=0)


LEGACY_FIELDS: Final = frozenset({"nats_user", "nats_password_bcrypt"})


class NatsUser(BaseModel):
    """One NATS credential of a tenant's account: its user's public key (never its seed)."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(description="the user's public key (U…), the credential's name on NATS")
    name: str = Field(description="the name the user JWT carries")
    issued_at: datetime | None = Field(
        None, description="null for a credential issued before ragbus kept them"
    )
    revoked_at: datetime | None = None

    def public(self) -> dict[str, object]:
        return {
            "user": self.user,
            "name": self.name,
            "issued_at": self.issued_at.isoformat() if self.issued_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "active": self.revoked_at is None,
        }


def is_user_key(text: str) -> bool:
    """A NATS user's public key (U…, with a valid checksum)."""
    return jwt.is_public_key(text, "user")


class Tenant(BaseModel):
    """What Redis keeps of a tenant (never its keys or passwords in the clear)."""

    model_config = ConfigDict(extra="forbid")

    tenant: TenantName
    created_at: datetime = Field(default_factory=utcnow)
    revoked_at: datetime | None = None
    key_hashes: list[str] = Field(default_factory=list)
    nats_account: str | None = Field(
        None,
        description="the public key of the tenant's NATS account; none for a tenant made "
        "before tenants had accounts, until `ragbus tenant creds` gives it one",
    )
    nats_users: list[NatsUser] = Field(
        default_factory=list,
        description="the NATS credentials ragbus issued (and those revoked by their key)",
    )

    @model_validator(mode="before")
    @classmethod
    def _without_nats_users(cls, data: Any) -> Any:
        """A record of a ragbus whose tenants were NATS users of one account: those users are
        gone (`tenants.issue_creds` makes the tenant an account)."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in LEGACY_FIELDS}
        return data

    limits: Limits = Field(default_factory=Limits)
    mcp_servers: list[str] = Field(
        default_factory=list,
        description="the operator's MCP servers whose tools its requests may use (`ragbus "
        "tenant tools NAME --allow ...`); none until allowed",
    )

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def revoked_users(self) -> dict[str, int]:
        """User public key -> when it was revoked (Unix seconds): the account JWT's
        `revocations`, which refuse every JWT of that user issued then or before (never
        before its issue, even where the clock of the host that revoked it lags)."""
        return {
            u.user: int(max(u.revoked_at, u.issued_at or u.revoked_at).timestamp())
            for u in self.nats_users
            if u.revoked_at
        }

    def public(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "active": self.active,
            "nats_account": self.nats_account,
            "nats_users": [user.public() for user in self.nats_users],
            "limits": self.limits.model_dump(exclude_none=True),
            "mcp_servers": self.mcp_servers,
        }


class NewTenant(BaseModel):
    """`ragbus tenant create NAME --json`: the secrets, shown this once."""

    tenant: str
    api_key: str
    nats_account: str = Field(description="the public key of the tenant's own NATS account")
    nats_user: str | None = Field(
        None,
        description="the public key of the user in `nats_creds`: what revokes that credential "
        "alone (`ragbus tenant creds NAME --revoke USER`)",
    )
    nats_creds: str | None = Field(
        None,
        description="a `.creds` file's text (user JWT and nkey seed) for the tenant's NATS "
        "account; null where the bus runs without tenancy (auth mode not `tenants`)",
    )
    events_subject: str = Field(description="its events, live, in its own account")
    events_stream: str = Field(description="its own JetStream stream of them, to replay")
    documents_subject: str = Field(description="where its account sends document batches")


def key_hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


class TenantRegistry:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def create(
        self, name: str, nats_account: str, limits: Limits | None = None
    ) -> tuple[Tenant, str]:
        """The tenant's record, and its API key (shown this once)."""
        if not is_valid_tenant(name):
            raise TenantError(
                f"invalid tenant name {name!r}: use 1-32 lowercase letters, digits or inner '-'"
            )
        if name in RESERVED_TENANTS:
            raise TenantError(f"the tenant name {name!r} is reserved")
        api_key = new_api_key()
        tenant = Tenant(
            tenant=name,
            key_hashes=[key_hash(api_key)],
            nats_account=nats_account,
            limits=limits or Limits(),
        )
        if not await replicated(
            self.redis,
            lambda client: client.hsetnx(TENANTS_KEY, name, tenant.model_dump_json()),
            "tenant_create",
        ):
            raise TenantError(f"tenant {name!r} exists (revoked tenants keep their name)")
        await replicated(
            self.redis, lambda client: client.hset(KEYS_KEY, key_hash(api_key), name), "tenant_key"
        )
        return tenant, api_key

    async def get(self, name: str) -> Tenant | None:
        raw = await self.redis.hget(TENANTS_KEY, name)
        return Tenant.model_validate_json(raw) if raw else None

    async def list(self) -> list[Tenant]:
        raw = await self.redis.hgetall(TENANTS_KEY)
        return sorted(
            (Tenant.model_validate_json(value) for value in raw.values()),
            key=lambda t: t.tenant,
        )

    async def revoke(self, name: str) -> Tenant:
        """Its keys stop working at once (its NATS account is revoked by
        `infra.tenancy.tenants`); its data stays (a revoked tenant's name is never given to
        another)."""
        tenant = await self.get(name)
        if tenant is None:
            raise TenantError(f"no tenant {name!r}")
        if tenant.revoked_at is None:
            tenant.revoked_at = utcnow()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(TENANTS_KEY, name, tenant.model_dump_json())
            if tenant.key_hashes:
                pipe.hdel(KEYS_KEY, *tenant.key_hashes)
            await pipe.execute()
        return tenant

    async def set_account(self, name: str, nats_account: str) -> Tenant:
        """Give a tenant made before tenants had NATS accounts its account."""
        tenant = await self.get(name)
        if tenant is None:
            raise TenantError(f"no tenant {name!r}")
        tenant.nats_account = nats_account
        await self.save(tenant)
        return tenant

    async def save(self, tenant: Tenant) -> None:
        await self.redis.hset(TENANTS_KEY, tenant.tenant, tenant.model_dump_json())

    async def active(self, name: str) -> Tenant:
        tenant = await self.get(name)
        if tenant is None or not tenant.active:
            raise TenantError(f"no active tenant {name!r}")
        return tenant

    async def rotate_key(self, name: str) -> tuple[Tenant, str]:
        """A new API key for an active tenant; every key it had stops in the same
        transaction (the new one is shown this once)."""
        tenant = await self.active(name)
        api_key = new_api_key()
        old, tenant.key_hashes = tenant.key_hashes, [key_hash(api_key)]
        async with self.redis.pipeline(transaction=True) as pipe:
            if old:
                pipe.hdel(KEYS_KEY, *old)
            pipe.hset(KEYS_KEY, key_hash(api_key), name)
            pipe.hset(TENANTS_KEY, name, tenant.model_dump_json())
            await pipe.execute()
        return tenant, api_key

    async def allow_mcp_servers(self, name: str, servers: Iterable[str]) -> Tenant:
        """Set which MCP servers' tools an active tenant's requests may use (all it had
        before are replaced; an empty list allows none)."""
        tenant = await self.active(name)
        tenant.mcp_servers = sorted(set(servers))
        await self.save(tenant)
        return tenant

    async def add_users(self, name: str, users: Iterable[NatsUser]) -> Tenant:
        """Record credentials issued to the tenant (their public keys, never their seeds)."""
        tenant = await self.active(name)
        tenant.nats_users.extend(users)
        await self.save(tenant)
        return tenant

    async def revoke_user(self, name: str, user: str) -> tuple[Tenant, NatsUser]:
        """Mark one credential of an active tenant revoked; one ragbus did not record (issued
        before it kept them) is recorded now by its key, so its account JWT revokes it too."""
        if not is_user_key(user):
            raise TenantError(f"{user!r} is not a NATS user's public key (U…)")
        tenant = await self.active(name)
        entry = next((u for u in tenant.nats_users if u.user == user), None)
        if entry is None:
            entry = NatsUser(user=user, name="(not recorded)")
            tenant.nats_users.append(entry)
        if entry.revoked_at is None:
            entry.revoked_at = utcnow()
        await self.save(tenant)
        return tenant, entry

    async def authenticate(self, api_key: str) -> Tenant | None:
        """The active tenant this key belongs to, or None."""
        if not api_key.startswith(API_KEY_PREFIX):
            return None
        name = await self.redis.hget(KEYS_KEY, key_hash(api_key))
        if name is None:
            return None
        tenant = await self.get(name.decode() if isinstance(name, bytes) else str(name))
        return tenant if tenant is not None and tenant.active else None
