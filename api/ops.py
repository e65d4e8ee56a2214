"""Operational endpoints: liveness and readiness (never behind auth: orchestrators probe them)
and Prometheus metrics (behind an operator key in `tenants` mode, or once RAGBUS_METRICS_TOKEN
is set: `api.auth.require_metrics_key`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable

from fastapi import APIRouter, Depends, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from api.auth import require_metrics_key
from api.deps import BusDep, JetStreamDep, NatsDep, RedisDep, SettingsDep
from api.schemas import ErrorResponse, Health, Readiness
from infra.runtime.readiness import QUERY_ROLES, ready_processes
from infra.runtime.topology import stream_specs

CHECK_TIMEOUT_S = 2.0
MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess folder; `ragbus up` sets one per run (`cli.entry`)."""

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    return Health()


async def _check(probe: Awaitable[str | None]) -> str:
    """`ok`, or the reason the probe failed (its message, or what it raised)."""
    try:
        problem = await asyncio.wait_for(probe, CHECK_TIMEOUT_S)
    except TimeoutError:
        return f"no answer within {CHECK_TIMEOUT_S:g} s"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return problem or "ok"


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness}},
    summary="NATS connected, Redis answering, every stream declared, and a process with its "
    "models loaded in every role a question needs",
)
async def readyz(
    settings: SettingsDep, nc: NatsDep, js: JetStreamDep, bus: BusDep, redis: RedisDep
) -> JSONResponse:
    async def nats_ok() -> str | None:
        if not nc.is_connected:
            return "events connection is down"
        return None if await bus.broker.ping(timeout=CHECK_TIMEOUT_S) else "broker is down"

    async def redis_ok() -> str | None:
        await redis.ping()
        return None

    async def streams_ok() -> str | None:
        names = {info.config.name for info in await js.streams_info()}
        missing = [spec.name for spec in stream_specs(settings) if spec.name not in names]
        return f"missing {', '.join(missing)}" if missing else None

    async def roles_ok() -> str | None:
        counts = await ready_processes(redis, QUERY_ROLES)
        missing = [role for role, n in counts.items() if n == 0]
        return f"no ready process for: {', '.join(missing)}" if missing else None

    checks = dict(
        zip(
            ("nats", "redis", "streams", "roles"),
            await asyncio.gather(
                _check(nats_ok()), _check(redis_ok()), _check(streams_ok()), _check(roles_ok())
            ),
            strict=True,
        )
    )
    ready = all(result == "ok" for result in checks.values())
    body = Readiness(status="ready" if ready else "unavailable", checks=checks)
    code = status.HTTP_200_OK if ready else status.HTTP_503_SERVICE_UNAVAILABLE
    return JSONResponse(body.model_dump(), status_code=code)


@router.get(
    "/metrics",
    response_class=Response,
    dependencies=[Depends(require_metrics_key)],
    responses={401: {"model": ErrorResponse, "description": "No or a wrong operator key."}},
    summary="Prometheus metrics",
)
async def metrics() -> Response:
    """This process's metrics; under `ragbus up`, every process's, summed (`cli.entry`). In
    `tenants` mode, and in every mode once RAGBUS_METRICS_TOKEN is set, it needs a bearer
    operator key: RAGBUS_METRICS_TOKEN or RAGBUS_ADMIN_TOKEN."""
    if os.environ.get(MULTIPROC_VARIABLE):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
