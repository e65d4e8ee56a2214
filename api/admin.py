"""The admin API: tenants, behind `RAGBUS_ADMIN_TOKEN` (the same operations as
`ragbus tenant create|list|revoke`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, status

from api.auth import require_admin
from api.deps import RedisDep, SettingsDep
from api.schemas import ErrorResponse, TenantCreate
from contracts.tenancy import TENANT_PATTERN
from infra.logging import get_logger
from infra.tenancy.nats_auth import APPLIED_KEY, wait_applied
from infra.tenancy.quotas import Quotas, effective
from infra.tenancy.registry import NewTenant, TenantError, TenantRegistry

router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 422, 503)},
)

TenantPath = Annotated[str, Path(pattern=TENANT_PATTERN)]

log = get_logger(__name__)

BUS_WAIT_S = 5.0


async def _until_the_bus_follows(registry: TenantRegistry) -> None:
    """Answer once the nats-server that follows the registry (`ragbus up`'s own, in `tenants`
    mode) has reloaded its users, so the new NATS password works, or the revoked one stops,
    when the answer comes. A bus nobody follows the registry for (no `APPLIED_KEY`) is not
    waited for; one that takes longer than `BUS_WAIT_S` is logged."""
    if not await registry.redis.exists(APPLIED_KEY):
        return
    version = await registry.version()
    if not await wait_applied(registry.redis, version, timeout_s=BUS_WAIT_S):
        log.warning("nats_users_not_reloaded_yet", version=version, waited_s=BUS_WAIT_S)


@router.post(
    "/tenants",
    status_code=status.HTTP_201_CREATED,
    response_model=NewTenant,
    summary="Create a tenant; its API key and NATS password are in this answer only",
)
async def create_tenant(body: TenantCreate, redis: RedisDep) -> NewTenant:
    registry = TenantRegistry(redis)
    try:
        made = await registry.create(body.tenant, body.limits)
    except TenantError as exc:
        conflict = "exists" in str(exc)
        code = status.HTTP_409_CONFLICT if conflict else status.HTTP_422_UNPROCESSABLE_CONTENT
        raise HTTPException(code, str(exc)) from exc
    await _until_the_bus_follows(registry)
    return made


@router.get("/tenants", summary="Every tenant, revoked ones included (never their secrets)")
async def list_tenants(redis: RedisDep) -> list[dict[str, Any]]:
    return [tenant.public() for tenant in await TenantRegistry(redis).list()]


@router.get("/tenants/{tenant}", summary="A tenant, its limits in force and its usage")
async def get_tenant(tenant: TenantPath, redis: RedisDep, settings: SettingsDep) -> dict[str, Any]:
    record = await TenantRegistry(redis).get(tenant)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no tenant {tenant!r}")
    limits = effective(settings, record.limits)
    return {
        **record.public(),
        "limits_in_force": limits.__dict__,
        "usage": await Quotas(redis).usage(tenant),
    }


@router.delete("/tenants/{tenant}", summary="Revoke a tenant: its keys stop working at once")
async def revoke_tenant(tenant: TenantPath, redis: RedisDep) -> dict[str, Any]:
    registry = TenantRegistry(redis)
    try:
        revoked = await registry.revoke(tenant)
    except TenantError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    await _until_the_bus_follows(registry)
    return revoked.public()
