"""FastAPI dependencies: the connections the lifespan opened, and bearer auth.

Every route reaches the outside world only through these, so a test swaps any of them
with `app.dependency_overrides` and never needs a broker or a Redis.
"""

from __future__ import annotations

import secrets
from typing import Annotated

import redis.asyncio as aioredis
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from api.idempotency import Idempotency
from infra.runtime.bus import Bus
from infra.settings import Settings
from orchestrator.store import StateStore


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_bus(request: Request) -> Bus:
    return request.app.state.bus


async def get_store(request: Request) -> StateStore:
    return request.app.state.store


async def get_redis(request: Request) -> aioredis.Redis:
    return request.app.state.redis


async def get_idempotency(
    redis: Annotated[aioredis.Redis, Depends(get_redis)],
    settings: Annotated[Settings, Depends(get_settings)],
) -> Idempotency:
    return Idempotency(redis, settings.idempotency_ttl_s)


async def get_nats(request: Request) -> NATS:
    return request.app.state.nc


async def get_jetstream(request: Request) -> JetStreamContext:
    return request.app.state.js


_bearer = HTTPBearer(auto_error=False, description="Needed when RAGBUS_API_TOKEN is set.")


async def require_token(
    settings: Annotated[Settings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Let everyone in when no token is configured; otherwise demand exactly that token."""
    expected = settings.api_token
    if not expected:
        return
    offered = credentials.credentials if credentials else ""
    if not secrets.compare_digest(offered.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing or invalid bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )


SettingsDep = Annotated[Settings, Depends(get_settings)]
BusDep = Annotated[Bus, Depends(get_bus)]
StoreDep = Annotated[StateStore, Depends(get_store)]
RedisDep = Annotated[aioredis.Redis, Depends(get_redis)]
IdempotencyDep = Annotated[Idempotency, Depends(get_idempotency)]
NatsDep = Annotated[NATS, Depends(get_nats)]
JetStreamDep = Annotated[JetStreamContext, Depends(get_jetstream)]
