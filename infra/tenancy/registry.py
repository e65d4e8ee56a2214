"""Tenant records and API keys in Redis.

An API key is shown once, when the tenant is created; Redis keeps only its SHA-256 (a key is
32 random bytes, so a fast hash is the right one: there is nothing to brute-force, and every
request looks one up). A tenant's NATS account is kept by its public key alone: its JWT is
signed again from the operator's keys whenever it is pushed (`infra.tenancy.accounts`), and
its users' credentials are shown once, like the API key.

- `ragbus:tenants`: hash, tenant name -> its record (JSON);
- `ragbus:tenant-keys`: hash, SHA-256 of an API key -> tenant name;
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any, Final

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.envelope import utcnow
from contracts.tenancy import RESERVED_TENANTS, TenantName, is_valid_tenant

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


LEGACY_FIELDS: Final = frozenset({"nats_user", "nats_password_bcrypt"})


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

    @model_validator(mode="before")
    @classmethod
    def _without_nats_users(cls, data: Any) -> Any:
        """A record of a ragbus whose tenants were NATS users of one account: those users are
        gone (`tenants.issue_creds` makes the tenant an account)."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in LEGACY_FIELDS}
        return data

    limits: Limits = Field(default_factory=Limits)

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def public(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "active": self.active,
            "nats_account": self.nats_account,
            "limits": self.limits.model_dump(exclude_none=True),
        }


class NewTenant(BaseModel):
    """`ragbus tenant create NAME --json`: the secrets, shown this once."""

    tenant: str
    api_key: str
    nats_account: str = Field(description="the public key of the tenant's own NATS account")
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
        api_key = API_KEY_PREFIX + secrets.token_urlsafe(32)
        tenant = Tenant(
            tenant=name,
            key_hashes=[key_hash(api_key)],
            nats_account=nats_account,
            limits=limits or Limits(),
        )
        if not await self.redis.hsetnx(TENANTS_KEY, name, tenant.model_dump_json()):
            raise TenantError(f"tenant {name!r} exists (revoked tenants keep their name)")
        await self.redis.hset(KEYS_KEY, key_hash(api_key), name)
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
        await self.redis.hset(TENANTS_KEY, name, tenant.model_dump_json())
        return tenant

    async def authenticate(self, api_key: str) -> Tenant | None:
        """The active tenant this key belongs to, or None."""
        if not api_key.startswith(API_KEY_PREFIX):
            return None
        name = await self.redis.hget(KEYS_KEY, key_hash(api_key))
        if name is None:
            return None
        tenant = await self.get(name.decode() if isinstance(name, bytes) else str(name))
        return tenant if tenant is not None and tenant.active else None
