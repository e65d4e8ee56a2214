"""Who is calling: the auth modes, and the caller every `/v1` route acts for.

- `none`: everyone is the default tenant.
- `token`: one shared bearer token (`RAGBUS_API_TOKEN`); its holder is the default tenant.
- `tenants`: each tenant's own API key (`ragbus tenant create`); the caller is that tenant,
  and every request, event, document, namespace, job and Idempotency-Key is its own.

The admin API (`/v1/admin`) is behind its own key, `RAGBUS_ADMIN_TOKEN`, in every mode.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from api.deps import RedisDep, SettingsDep
from contracts.tenancy import DEFAULT_TENANT
from infra.tenancy.quotas import Effective, effective
from infra.tenancy.registry import TenantRegistry

_bearer = HTTPBearer(
    auto_error=False,
    description="The tenant's API key (RAGBUS_AUTH_MODE=tenants) or RAGBUS_API_TOKEN (token).",
)
TOKEN_COOKIE = "ragbus_token"
_cookie = APIKeyCookie(
    name=TOKEN_COOKIE,
    auto_error=False,
    description="The same key or token, for GET requests only: a browser's EventSource cannot "
    "send an Authorization header. The web page sets it with SameSite=Strict.",
)
SAFE_METHODS = frozenset({"GET", "HEAD"})
_admin_bearer = HTTPBearer(
    auto_error=False, scheme_name="AdminKey", description="RAGBUS_ADMIN_TOKEN."
)


@dataclass(frozen=True)
class Caller:
    tenant: str
    limits: Effective


def _unauthorized(what: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=what, headers={"WWW-Authenticate": "Bearer"}
    )


def _same(offered: str, expected: str) -> bool:
    return secrets.compare_digest(offered.encode(), expected.encode())


async def authenticate(
    request: Request,
    settings: SettingsDep,
    redis: RedisDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> Caller:
    offered = credentials.credentials if credentials else ""
    if not offered and cookie and request.method in SAFE_METHODS:
        # Never for a method that changes something: a cookie rides along with requests
        # other sites make (SameSite aside), a header does not.
        offered = cookie
    mode = settings.auth
    if mode == "none":
        return Caller(DEFAULT_TENANT, effective(settings))
    if mode == "token":
        if not _same(offered, settings.api_token or ""):
            raise _unauthorized("missing or invalid bearer token")
        return Caller(DEFAULT_TENANT, effective(settings))
    tenant = await TenantRegistry(redis).authenticate(offered) if offered else None
    if tenant is None:
        raise _unauthorized("missing, invalid or revoked API key")
    return Caller(tenant.tenant, effective(settings, tenant.limits))


async def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)],
) -> None:
    expected = settings.admin_token
    if not expected:  # no key can be right: the same 401 as a wrong one, with the reason
        raise _unauthorized("the admin API is off: set RAGBUS_ADMIN_TOKEN to use it")
    offered = credentials.credentials if credentials else ""
    if not _same(offered, expected):
        raise _unauthorized("missing or invalid admin key")


CallerDep = Annotated[Caller, Depends(authenticate)]
