"""A tenant's users in Redis: their records, their groups and their API keys.

A tenant's own key administers its users (`api.users`, `ragbus user`); each user gets a key of
their own, shown once. Redis keeps only the key's SHA-256, as it does a tenant's
(`infra.tenancy.registry`: 32 random bytes, nothing to brute-force).

- `ragbus:users:<tenant>`: hash, user name -> its record (JSON);
- `ragbus:user-keys`: hash, SHA-256 of a user's API key -> `<tenant>/<user>`.

A revoked user's key stops at once and its name stays taken: documents that name a user keep
naming that one person, never a later user given the same name.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Final

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field

from contracts.access import MAX_USER_GROUPS, PrincipalName, Reader, unique_names
from contracts.envelope import utcnow
from infra.replication import replicated
from infra.tenancy.registry import key_hash

USER_KEYS_KEY: Final = "ragbus:user-keys"
USER_KEY_PREFIX: Final = "rbu_"
MAX_USERS_PER_TENANT: Final = 10_000


def users_key(tenant: str) -> str:
    return f"ragbus:users:{tenant}"


class UserError(ValueError):
    """A user that cannot be made, found or changed, said plainly."""


class TenantUser(BaseModel):
    """A user's record: never its key, only the key's hash."""

    model_config = ConfigDict(extra="forbid")

    user: PrincipalName
    groups: list[PrincipalName] = Field(default_factory=list, max_length=MAX_USER_GROUPS)
    created_at: datetime = Field(default_factory=utcnow)
    revoked_at: datetime | None = None
    key_hashes: list[str] = Field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def reader(self) -> Reader:
        return Reader(user=self.user, groups=tuple(self.groups))

    def public(self) -> dict[str, object]:
        return {
            "user": self.user,
            "groups": self.groups,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "active": self.active,
        }


class UserKey(BaseModel):
    """Who an accepted user key belongs to."""

    tenant: str
    user: TenantUser


def new_user_key() -> str:
    return USER_KEY_PREFIX + secrets.token_urlsafe(32)


class UserRegistry:
    """One tenant's users (`tenant`), and the key lookup every request makes (`authenticate`)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def create(self, tenant: str, name: str, groups: list[str]) -> tuple[TenantUser, str]:
        """A new user of `tenant`, and its API key (shown this once); `UserError` for a name
        taken (a revoked user's too)."""
        if await self.redis.hlen(users_key(tenant)) >= MAX_USERS_PER_TENANT:
            raise UserError(f"a tenant has at most {MAX_USERS_PER_TENANT:,} users")
        api_key = new_user_key()
        user = TenantUser(user=name, groups=unique_names(groups), key_hashes=[key_hash(api_key)])
        if not await self.redis.hsetnx(users_key(tenant), name, user.model_dump_json()):
            raise UserError(f"user {name!r} exists (revoked users keep their name)")
        await replicated(
            self.redis,
            lambda client: client.hset(USER_KEYS_KEY, key_hash(api_key), f"{tenant}/{name}"),
            "user_key",
        )
        return user, api_key

    async def get(self, tenant: str, name: str) -> TenantUser | None:
        raw = await self.redis.hget(users_key(tenant), name)
        return TenantUser.model_validate_json(raw) if raw else None

    async def every(self, tenant: str) -> list[TenantUser]:
        raw = await self.redis.hgetall(users_key(tenant))
        return sorted(
            (TenantUser.model_validate_json(value) for value in raw.values()),
            key=lambda u: u.user,
        )

    async def _active(self, tenant: str, name: str) -> TenantUser:
        user = await self.get(tenant, name)
        if user is None or not user.active:
            raise UserError(f"no active user {name!r}")
        return user

    async def set_groups(self, tenant: str, name: str, groups: list[str]) -> TenantUser:
        """The user's groups, all replaced; its next request reads with them."""
        key = users_key(tenant)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    user = await self._active(tenant, name)
                    user.groups = unique_names(groups)
                    pipe.multi()
                    pipe.hset(key, name, user.model_dump_json())
                    await pipe.execute()
                    return user
                except aioredis.WatchError:
                    continue

    async def revoke(self, tenant: str, name: str) -> TenantUser:
        """Its keys stop at once; its record (and its name) stay."""
        user = await self.get(tenant, name)
        if user is None:
            raise UserError(f"no user {name!r}")
        if user.revoked_at is None:
            user.revoked_at = utcnow()
        old, user.key_hashes = user.key_hashes, []
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(users_key(tenant), name, user.model_dump_json())
            if old:
                pipe.hdel(USER_KEYS_KEY, *old)
            await pipe.execute()
        return user

    async def rotate_key(self, tenant: str, name: str) -> tuple[TenantUser, str]:
        """A new key for an active user; its old ones stop in the same transaction."""
        user = await self._active(tenant, name)
        api_key = new_user_key()
        old, user.key_hashes = user.key_hashes, [key_hash(api_key)]
        async with self.redis.pipeline(transaction=True) as pipe:
            if old:
                pipe.hdel(USER_KEYS_KEY, *old)
            pipe.hset(USER_KEYS_KEY, key_hash(api_key), f"{tenant}/{name}")
            pipe.hset(users_key(tenant), name, user.model_dump_json())
            await pipe.execute()
        return user, api_key

    async def authenticate(self, api_key: str) -> UserKey | None:
        """The active user this key belongs to, with its tenant, or None."""
        if not api_key.startswith(USER_KEY_PREFIX):
            return None
        hashed = key_hash(api_key)
        found = await self.redis.hget(USER_KEYS_KEY, hashed)
        if found is None:
            return None
        owner = found.decode() if isinstance(found, bytes) else str(found)
        tenant, _, name = owner.partition("/")
        user = await self.get(tenant, name)
        if user is None or not user.active or hashed not in user.key_hashes:
            return None
        return UserKey(tenant=tenant, user=user)
