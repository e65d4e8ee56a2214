"""The admin API: tenants, behind `RAGBUS_ADMIN_TOKEN` (the same operations as
`ragbus tenant create|list|revoke|rotate-key|creds`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Path, status
from pydantic import BaseModel, ConfigDict, Field

from api.auth import require_admin
from api.deps import RedisDep, SettingsDep
from api.schemas import ErrorResponse, TenantCreate
from contracts.tenancy import TENANT_PATTERN
from infra.tenancy import tenants
from infra.tenancy.quotas import Quotas, effective
from infra.tenancy.registry import NewTenant, TenantError, TenantRegistry

router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 422, 429, 503)},
)

TenantPath = Annotated[str, Path(pattern=TENANT_PATTERN)]
UserPath = Annotated[
    str, Path(pattern=r"^U[A-Z2-7]{55}$", description="The credential's user public key (U…).")
]


class CredsCreate(BaseModel):
    """`POST /v1/admin/tenants/{tenant}/nats-creds` (optional)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="What the credential is for (its user JWT's name); default: the tenant's.",
    )


class McpServersAllowed(BaseModel):
    """`PUT /v1/admin/tenants/{tenant}/mcp-servers`."""

    model_config = ConfigDict(extra="forbid")

    servers: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")]] = Field(
        max_length=64,
        description="The names the tool workers' configuration gives the MCP servers "
        "(RAGBUS_MCP_CONFIG); their tools are the tenant's to use. Empty: none.",
    )


def _bus_unavailable(exc: Exception) -> HTTPException:
    return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc))


@router.post(
    "/tenants",
    status_code=status.HTTP_201_CREATED,
    response_model=NewTenant,
    summary="Create a tenant; its API key and NATS credentials are in this answer only",
    description="In `tenants` mode the tenant's NATS account is on every server, with its "
    "stream, when the answer comes; 503 when the bus did not take it (the name stays taken, "
    "revoked).",
)
async def create_tenant(body: TenantCreate, redis: RedisDep, settings: SettingsDep) -> NewTenant:
    try:
        return await tenants.create(redis, settings, body.tenant, body.limits)
    except TenantError as exc:
        conflict = "exists" in str(exc)
        code = status.HTTP_409_CONFLICT if conflict else status.HTTP_422_UNPROCESSABLE_CONTENT
        raise HTTPException(code, str(exc)) from exc
    except (tenants.BusTenancyError, tenants.TrustError) as exc:
        raise _bus_unavailable(exc) from exc


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


def _tenant_error(exc: TenantError) -> HTTPException:
    code = status.HTTP_404_NOT_FOUND if "no active" in str(exc) else status.HTTP_409_CONFLICT
    return HTTPException(code, str(exc))


@router.post(
    "/tenants/{tenant}/nats-creds",
    summary="New NATS credentials for a tenant (tenants mode); in this answer only",
    description="For lost credentials, a second client, or a tenant made before tenants had "
    "NATS accounts, which gets its account now. Earlier credentials keep working until they "
    "are revoked (`DELETE …/nats-creds/{user}`, `nats_user` here) or the tenant is.",
)
async def issue_nats_creds(
    tenant: TenantPath,
    redis: RedisDep,
    settings: SettingsDep,
    body: Annotated[CredsCreate | None, Body()] = None,
) -> dict[str, str]:
    try:
        text, user = await tenants.issue_creds(redis, settings, tenant, body.name if body else None)
    except TenantError as exc:
        raise _tenant_error(exc) from exc
    except (tenants.BusTenancyError, tenants.TrustError) as exc:
        raise _bus_unavailable(exc) from exc
    return {"tenant": tenant, "nats_user": user.user, "nats_creds": text}


@router.get(
    "/tenants/{tenant}/nats-creds",
    summary="A tenant's NATS credentials: their users' public keys, names and dates",
)
async def list_nats_creds(tenant: TenantPath, redis: RedisDep) -> dict[str, Any]:
    try:
        users = await tenants.list_creds(redis, tenant)
    except TenantError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    return {"tenant": tenant, "nats_users": [user.public() for user in users]}


@router.delete(
    "/tenants/{tenant}/nats-creds/{user}",
    summary="Revoke one NATS credential of a tenant; its other credentials keep working",
    description="Its connections close and it is refused on every node when the answer comes "
    "(the account JWT's revocations); the tenant, its API key and its data are untouched.",
)
async def revoke_nats_creds(
    tenant: TenantPath, user: UserPath, redis: RedisDep, settings: SettingsDep
) -> dict[str, Any]:
    try:
        revoked = await tenants.revoke_creds(redis, settings, tenant, user)
    except TenantError as exc:
        raise _tenant_error(exc) from exc
    except (tenants.BusTenancyError, tenants.TrustError) as exc:
        raise _bus_unavailable(exc) from exc
    return {"tenant": tenant, **revoked.public()}


@router.post(
    "/tenants/{tenant}/api-key",
    summary="Rotate a tenant's API key: the new one is in this answer only, the old one stops",
    description="Every key the tenant had is refused from the moment this answers.",
)
async def rotate_api_key(tenant: TenantPath, redis: RedisDep) -> dict[str, str]:
    try:
        api_key = await tenants.rotate_key(redis, tenant)
    except TenantError as exc:
        raise _tenant_error(exc) from exc
    return {"tenant": tenant, "api_key": api_key}


@router.put(
    "/tenants/{tenant}/mcp-servers",
    summary="Which MCP servers' tools a tenant's requests may use (none until set)",
    description="Replaces the tenant's allowlist; the workers apply it within seconds.",
)
async def allow_mcp_servers(
    tenant: TenantPath, body: McpServersAllowed, redis: RedisDep
) -> dict[str, Any]:
    try:
        record = await tenants.allow_mcp_servers(redis, tenant, body.servers)
    except TenantError as exc:
        raise _tenant_error(exc) from exc
    return record.public()


@router.delete(
    "/tenants/{tenant}",
    summary="Revoke a tenant: its keys stop working at once, and its NATS connections close",
)
async def revoke_tenant(
    tenant: TenantPath, redis: RedisDep, settings: SettingsDep
) -> dict[str, Any]:
    try:
        revoked = await tenants.revoke(redis, settings, tenant)
    except TenantError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except (tenants.BusTenancyError, tenants.TrustError) as exc:
        raise _bus_unavailable(exc) from exc
    return revoked.public()
