"""`Idempotency-Key` on the POSTs that start work, the way payment APIs do it: the same key with
the same body gives the same request (or job) id and never a second run; the same key with
another body is refused.

A key is claimed in Redis (`SET NX`) before anything is recorded or published, together with
the id the work will have and a fingerprint of the body, and kept for
`RAGBUS_IDEMPOTENCY_TTL_S`. Keys live per endpoint (`queries` covers `/v1/queries` and
`/v1/chat`, which submit the same thing).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

import redis.asyncio as aioredis
from fastapi import Depends, Header, HTTPException, status
from pydantic import BaseModel, Field

from api.auth import CallerDep
from api.deps import RedisDep, SettingsDep
from contracts.tenancy import DEFAULT_TENANT
from infra.replication import replicated

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="Makes retrying this POST safe: the same key with the same body answers "
        "with the same id and starts nothing new (printable ASCII, up to 255 characters).",
    ),
]

Scope = Literal["queries", "documents"]


class Claim(BaseModel):
    """What a key stands for: the id its work has, and the body it was first sent with."""

    work_id: str
    fingerprint: str
    receipt: dict[str, Any] | None = Field(
        default=None, description="the 202 body, once the work was accepted"
    )


def fingerprint(body: BaseModel) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


class Idempotency:
    """One tenant's keys: two tenants who pick the same key never meet."""

    def __init__(self, redis: aioredis.Redis, ttl_s: int, tenant: str = DEFAULT_TENANT) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self.tenant = tenant

    def _key(self, scope: Scope, key: str) -> str:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return f"ragbus:idem:{self.tenant}:{scope}:{digest}"

    async def claim(self, scope: Scope, key: str, claim: Claim) -> Claim | None:
        """Claim `key` for `claim`; None when it is ours, else the earlier claim (checked to be
        for the same body: a different one is a 422)."""
        redis_key = self._key(scope, key)
        taken = await replicated(
            self.redis,
            lambda client: client.set(redis_key, claim.model_dump_json(), nx=True, ex=self.ttl_s),
            "idempotency_claim",
        )
        if taken:
            return None
        raw = await self.redis.get(redis_key)
        if raw is None:  # expired between the two commands: claim it again
            return await self.claim(scope, key, claim)
        earlier = Claim.model_validate_json(raw)
        if earlier.fingerprint != claim.fingerprint:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"this {IDEMPOTENCY_HEADER} was already used with a different body",
            )
        return earlier

    async def accepted(self, scope: Scope, key: str, claim: Claim) -> None:
        """Remember the answer, so a retry gets it as it was."""
        redis_key = self._key(scope, key)
        await replicated(
            self.redis,
            lambda client: client.set(redis_key, claim.model_dump_json(), ex=self.ttl_s),
            "idempotency_accepted",
        )

    async def kept(self, scope: Scope, key: str) -> str | None:
        """The id of the work `key` was claimed for, or None when Redis holds no such claim
        (for checks: `ragbus chaos` asks it of every key a client was answered under)."""
        raw = await self.redis.get(self._key(scope, key))
        return Claim.model_validate_json(raw).work_id if raw else None

    async def release(self, scope: Scope, key: str) -> None:
        """Forget a claim whose work was not accepted, so a retry starts afresh."""
        await self.redis.delete(self._key(scope, key))


async def kept_query_key(redis: aioredis.Redis, key: str) -> str | None:
    """The request a `POST /v1/queries` key of the default tenant names now (`kept`)."""
    return await Idempotency(redis, 0).kept("queries", key)


async def get_idempotency(caller: CallerDep, redis: RedisDep, settings: SettingsDep) -> Idempotency:
    # a user's keys are its own: another user of the tenant replaying one gets nothing of it
    return Idempotency(redis, settings.idempotency_ttl_s, caller.space)


IdempotencyDep = Annotated[Idempotency, Depends(get_idempotency)]
