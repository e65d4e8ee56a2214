"""FastAPI dependencies: the connections the lifespan opened (auth is `api.auth`).

Every route reaches the outside world only through these, so a test swaps any of them
with `app.dependency_overrides` and never needs a broker or a Redis.
"""

from __future__ import annotations

from typing import Annotated

import redis.asyncio as aioredis
from fastapi import Depends, Request
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from api.event_hub import EventHub
from api.submission import Submitter
from infra.runtime.bus import Bus
from infra.settings import Settings
from infra.tenancy.quotas import Quotas
from orchestrator.store import StateStore


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_bus(request: Request) -> Bus:
    return request.app.state.bus


async def get_store(request: Request) -> StateStore:
    return request.app.state.store


async def get_submitter(request: Request, bus: Annotated[Bus, Depends(get_bus)]) -> Submitter:
    """How a question reaches the saga: in this process when the lifespan was given the
    orchestrator that runs here, else over the bus (`api.submission`)."""
    return Submitter(bus, getattr(request.app.state, "saga", None))


async def get_redis(request: Request) -> aioredis.Redis:
    return request.app.state.redis


async def get_quotas(redis: Annotated[aioredis.Redis, Depends(get_redis)]) -> Quotas:
    return Quotas(redis)


async def get_nats(request: Request) -> NATS:
    return request.app.state.nc


async def get_jetstream(request: Request) -> JetStreamContext:
    return request.app.state.js


async def get_event_hub(request: Request) -> EventHub | None:
    """The process's shared consumer of caller events; None: each stream reads its own."""
    return getattr(request.app.state, "event_hub", None)


SettingsDep = Annotated[Settings, Depends(get_settings)]
BusDep = Annotated[Bus, Depends(get_bus)]
StoreDep = Annotated[StateStore, Depends(get_store)]
RedisDep = Annotated[aioredis.Redis, Depends(get_redis)]
NatsDep = Annotated[NATS, Depends(get_nats)]
JetStreamDep = Annotated[JetStreamContext, Depends(get_jetstream)]
EventHubDep = Annotated[EventHub | None, Depends(get_event_hub)]
QuotasDep = Annotated[Quotas, Depends(get_quotas)]
SubmitterDep = Annotated[Submitter, Depends(get_submitter)]
