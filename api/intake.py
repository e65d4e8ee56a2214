"""A tenant's document batches over the bus (`tenants` mode).

A tenant's producer sends a batch, as the JSON body of `POST /v1/documents`, as a request to
`rag.documents` in its own NATS account. Its account imports that subject from the service
account as `rag.intake.<tenant>`, granted to it alone (`infra.tenancy.accounts`), so the
subject's last token names the tenant, and nobody else can send there. The API process
answers each request exactly as `POST /v1/documents` would (`api.documents.accept_batch`):
the same validation, the same rate and document limits, the same `Idempotency-Key` (a
header of the message), and the same job, followed by `GET /v1/ingest/{job_id}/events`.

The answer is JSON: `{"status": 202, "job": {...}, "replayed": false}`, or
`{"status": 4xx|5xx, "error": "..."}`.
"""

from __future__ import annotations

import json
from typing import Any, Final

import redis.asyncio as aioredis
from fastapi import HTTPException
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from api.auth import Caller
from api.documents import accept_batch
from api.idempotency import IDEMPOTENCY_HEADER, Idempotency
from api.schemas import DocumentsRequest
from contracts import subjects as sj
from contracts.tenancy import is_valid_tenant
from infra.logging import get_logger
from infra.runtime.bus import Bus
from infra.settings import Settings
from infra.tenancy.quotas import Quotas, effective
from infra.tenancy.registry import TenantRegistry

log = get_logger(__name__)

QUEUE: Final = "ragbus-intake"
MAX_KEY_CHARS: Final = 255


def _error(code: int, detail: str) -> dict[str, Any]:
    return {"status": code, "error": detail}


class Intake:
    """The API process's subscriber to every tenant's batches."""

    def __init__(self, nc: NATS, bus: Bus, redis: aioredis.Redis, settings: Settings) -> None:
        self.nc = nc
        self.bus = bus
        self.redis = redis
        self.settings = settings
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(f"{sj.INTAKE_PREFIX}.*", queue=QUEUE, cb=self._take)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def _take(self, msg: Msg) -> None:
        if not msg.reply:  # a batch nobody waits for could be neither confirmed nor refused
            log.warning("intake_without_reply", subject=msg.subject)
            return
        try:
            answer = await self.answer(msg)
        except Exception as exc:  # an answer, whatever happens: the producer must not hang
            log.exception("intake_failed", subject=msg.subject)
            answer = _error(500, f"{type(exc).__name__}: the batch was not queued")
        await msg.respond(json.dumps(answer).encode())

    async def answer(self, msg: Msg) -> dict[str, Any]:
        tenant_name = msg.subject.removeprefix(f"{sj.INTAKE_PREFIX}.")
        if not is_valid_tenant(tenant_name):
            return _error(400, f"no tenant in subject {msg.subject!r}")
        tenant = await TenantRegistry(self.redis).get(tenant_name)
        if tenant is None or not tenant.active:
            return _error(401, f"tenant {tenant_name!r} is unknown or revoked")
        try:
            body = DocumentsRequest.model_validate_json(msg.data)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
                for error in exc.errors()[:10]
            ]
            return _error(422, "invalid batch: " + "; ".join(problems))
        key = (msg.headers or {}).get(IDEMPOTENCY_HEADER)
        if key is not None and not 1 <= len(key) <= MAX_KEY_CHARS:
            return _error(422, f"{IDEMPOTENCY_HEADER} must be 1-{MAX_KEY_CHARS} characters")
        caller = Caller(tenant_name, effective(self.settings, tenant.limits))
        try:
            accepted, replayed = await accept_batch(
                caller,
                body,
                bus=self.bus,
                redis=self.redis,
                max_payload=self.nc.max_payload,
                settings=self.settings,
                quotas=Quotas(self.redis),
                idempotency=Idempotency(self.redis, self.settings.idempotency_ttl_s, tenant_name),
                idempotency_key=key,
            )
        except HTTPException as exc:
            return _error(exc.status_code, str(exc.detail))
        log.info("intake_accepted", tenant=tenant_name, job_id=accepted.job_id)
        return {"status": 202, "job": accepted.model_dump(), "replayed": replayed}
