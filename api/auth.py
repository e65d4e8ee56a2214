"""Who is calling: the auth modes, and the caller every `/v1` route acts for.

- `none`: everyone is the default tenant.
- `token`: one shared bearer token (`RAGBUS_API_TOKEN`); its holder is the default tenant.
- `tenants`: each tenant's own API key (`ragbus tenant create`); the caller is that tenant,
  and every request, event, document, namespace, job and Idempotency-Key is its own.

In `token` and `tenants` modes a tenant's users (`api.users`) have keys of their own: the caller
is then that user of its tenant (`Caller.user`), who reads only the documents it may
(`contracts.access`) and sees only its own requests, events, sessions and jobs. The tenant's
own key (the shared token, in `token` mode) is the tenant's administrator, and sees everything
of the tenant.

The admin API (`/v1/admin`) is behind its own key, `RAGBUS_ADMIN_TOKEN`, in every mode. The
operator surfaces take an operator key (`RAGBUS_METRICS_TOKEN`, or the admin token): `/metrics`
in `tenants` mode and wherever a metrics token is set (`require_metrics_key`), and
`/openapi.json` in `tenants` mode (`require_reference_key`); `/healthz` and `/readyz` stay
open, for orchestrators' probes.

Every wrong key counts against the address that sent it (`infra.tenancy.attempts`): past
`RAGBUS_AUTH_FAILURE_LIMIT` in a window, the address's keys are answered 429 with
`Retry-After`, for longer after each further wrong one, before they are checked. The address
is the request's client as uvicorn gives it (behind a reverse proxy that uvicorn trusts,
`FORWARDED_ALLOW_IPS`, the client the proxy names).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from api.deps import RedisDep, SettingsDep
from contracts.access import Reader, session_space
from contracts.tenancy import DEFAULT_TENANT
from infra.logging import get_logger
from infra.runtime.redis_client import UNAVAILABLE_ERRORS
from infra.settings import Settings
from infra.tenancy.attempts import Attempts
from infra.tenancy.quotas import Effective, effective
from infra.tenancy.registry import TenantRegistry
from infra.tenancy.users import USER_KEY_PREFIX, TenantUser, UserRegistry

log = get_logger(__name__)

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
    user: TenantUser | None = None
    """The tenant's user who called; None: the tenant's own key, its administrator."""

    @cached_property
    def reader(self) -> Reader | None:
        """What the caller's questions may read: None, everything of the tenant (made once
        a caller: the catalogue asks it of every document it lists)."""
        return self.user.reader() if self.user is not None else None

    @property
    def space(self) -> str:
        """Where the caller's sessions and memories are kept (`session_space`)."""
        return session_space(self.tenant, self.reader)

    @property
    def user_name(self) -> str | None:
        return self.user.user if self.user is not None else None

    def owns(self, tenant: str | None, user: str | None) -> bool:
        """Whether something of `tenant`, made by `user` (None: the tenant's key), is the
        caller's to see: the tenant's key sees all of its tenant's, a user only its own."""
        if tenant != self.tenant:
            return False
        return self.user is None or user == self.user.user


def _unauthorized(what: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=what, headers={"WWW-Authenticate": "Bearer"}
    )


def _same(offered: str, expected: str) -> bool:
    return secrets.compare_digest(offered.encode(), expected.encode())


class _WrongKeys:
    """The wrong-key count of the request's address: none where the app has no Redis (a
    test's app without its lifespan) or `RAGBUS_AUTH_FAILURE_LIMIT` is 0."""

    def __init__(self, request: Request, *, fail_open: bool = False) -> None:
        settings: Settings = request.app.state.settings
        redis = getattr(request.app.state, "redis", None)
        self.attempts = (
            Attempts(redis, settings.auth_failure_limit, settings.auth_failure_window_s)
            if redis is not None and settings.auth_failure_limit > 0
            else None
        )
        self.address = request.client.host if request.client else None
        self.path = request.url.path
        self.fail_open = fail_open  # an operator surface: /metrics answers while Redis is out

    async def before(self) -> None:
        """429 while the address is shut out, whatever key it offers."""
        if self.attempts is None:
            return
        try:
            wait_s = await self.attempts.wait_s(self.address)
        except UNAVAILABLE_ERRORS:
            if self.fail_open:
                return
            raise
        if wait_s:
            raise HTTPException(
                status.HTTP_429_TOO_MANY_REQUESTS,
                detail=f"too many wrong keys from this address: try again in {wait_s} s",
                headers={"Retry-After": str(wait_s)},
            )

    async def failed(self, what: str) -> HTTPException:
        """Count the wrong key; the 401 to raise."""
        if self.attempts is not None:
            try:
                shut_s = await self.attempts.failed(self.address)
            except UNAVAILABLE_ERRORS:
                if not self.fail_open:
                    raise
                shut_s = 0
            if shut_s:
                log.warning(
                    "auth_failures", address=self.address, path=self.path, shut_out_s=shut_s
                )
        return _unauthorized(what)


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
    wrong = (
        "missing or invalid bearer token"
        if mode == "token"
        else "missing, invalid or revoked API key"
    )
    if not offered:  # nothing guessed: not counted
        raise _unauthorized(wrong)
    wrong_keys = _WrongKeys(request)
    await wrong_keys.before()
    if offered.startswith(USER_KEY_PREFIX):
        caller = await _user_caller(redis, settings, offered)
        if caller is None:
            raise await wrong_keys.failed(wrong)
        return caller
    if mode == "token":
        if not _same(offered, settings.api_token or ""):
            raise await wrong_keys.failed(wrong)
        return Caller(DEFAULT_TENANT, effective(settings))
    tenant = await TenantRegistry(redis).authenticate(offered)
    if tenant is None:
        raise await wrong_keys.failed(wrong)
    return Caller(tenant.tenant, effective(settings, tenant.limits))


async def _user_caller(redis: RedisDep, settings: Settings, offered: str) -> Caller | None:
    """The user an offered user key is, of an active tenant (in `token` mode, the default
    tenant's users only), or None."""
    found = await UserRegistry(redis).authenticate(offered)
    if found is None:
        return None
    if settings.auth == "token":
        if found.tenant != DEFAULT_TENANT:
            return None
        return Caller(DEFAULT_TENANT, effective(settings), found.user)
    tenant = await TenantRegistry(redis).get(found.tenant)
    if tenant is None or not tenant.active:
        return None
    return Caller(tenant.tenant, effective(settings, tenant.limits), found.user)


async def require_tenant_key(caller: Annotated[Caller, Depends(authenticate)]) -> Caller:
    """The caller, when it is the tenant's own key (its administrator); 403 for a user."""
    if caller.user is not None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "only the tenant's own key administers the tenant: its users and its sources",
        )
    return caller


async def require_admin(
    request: Request,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)],
) -> None:
    expected = settings.admin_token
    if not expected:  # no key can be right: the same 401 as a wrong one, with the reason
        raise _unauthorized("the admin API is off: set RAGBUS_ADMIN_TOKEN to use it")
    offered = credentials.credentials if credentials else ""
    if not offered:
        raise _unauthorized("missing or invalid admin key")
    wrong_keys = _WrongKeys(request)
    await wrong_keys.before()
    if not _same(offered, expected):
        raise await wrong_keys.failed("missing or invalid admin key")


def metrics_key_needed(settings: Settings) -> bool:
    """`/metrics` asks for an operator key in `tenants` mode, and in every mode once
    RAGBUS_METRICS_TOKEN is set; otherwise it is open, as an unauthenticated install's is."""
    return settings.auth == "tenants" or bool(settings.metrics_token)


async def check_operator(request: Request, settings: Settings, offered: str, what: str) -> None:
    """The offered bearer key is the metrics token or the admin token, or 401 (429 while
    the address is shut out for wrong keys)."""
    keys = [key for key in (settings.metrics_token, settings.admin_token) if key]
    if not keys:  # no key can be right: the same 401 as a wrong one, with the reason
        raise _unauthorized(
            f"{what} needs an operator key: set RAGBUS_METRICS_TOKEN or RAGBUS_ADMIN_TOKEN"
        )
    if not offered:
        raise _unauthorized(f"{what}: missing or invalid operator key")
    wrong_keys = _WrongKeys(request, fail_open=True)
    await wrong_keys.before()
    matches = [_same(offered, key) for key in keys]  # each compared, whichever matches
    if not any(matches):
        raise await wrong_keys.failed(f"{what}: missing or invalid operator key")


def _offered_key(request: Request) -> str:
    """The bearer key sent, read here rather than through `HTTPBearer`: the OpenAPI document
    then declares no security scheme for a route that asks for a key only in some modes (one
    declared but not enforced is a defect to a schema-driven client, or to Schemathesis)."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""


async def require_metrics_key(request: Request, settings: SettingsDep) -> None:
    if metrics_key_needed(settings):
        await check_operator(request, settings, _offered_key(request), "/metrics")


async def require_reference_key(request: Request, settings: SettingsDep) -> None:
    """`/openapi.json`: open in `none` and `token` modes, an operator's in `tenants` mode."""
    if settings.auth == "tenants":
        await check_operator(request, settings, _offered_key(request), "/openapi.json")


CallerDep = Annotated[Caller, Depends(authenticate)]
TenantKeyDep = Annotated[Caller, Depends(require_tenant_key)]


async def caller_of(request: Request) -> Caller:
    """The caller of a request that no FastAPI route serves (a door mounted as an ASGI app:
    MCP's streamable HTTP): the same bearer key, the same modes, the same wrong-key count as
    every `/v1` route; raises the same `HTTPException`s."""
    key = _offered_key(request)
    credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=key) if key else None
    state = request.app.state
    return await authenticate(request, state.settings, state.redis, credentials, None)
