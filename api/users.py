"""`/v1/users`: a tenant's users, administered with the tenant's own key (`contracts.access`).

A user's key is shown once, when the user is made or its key rotated. Revoking a user stops
its keys at once; its name stays taken, so documents that name it never reach someone else
given the same name later.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel, ConfigDict, Field

from api.auth import TenantKeyDep
from api.deps import RedisDep
from api.schemas import ErrorResponse
from contracts.access import MAX_USER_GROUPS, PRINCIPAL_PATTERN, PrincipalName
from infra.logging import get_logger
from infra.tenancy.users import UserError, UserRegistry

log = get_logger(__name__)

router = APIRouter(
    prefix="/v1/users",
    tags=["users"],
    responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 422, 429, 503)},
)

UserPath = Annotated[str, Path(pattern=PRINCIPAL_PATTERN, description="The user's name.")]
Groups = Annotated[
    list[PrincipalName],
    Field(
        max_length=MAX_USER_GROUPS,
        description="The groups the user belongs to: documents that name one of them in their "
        "`access` are the user's to read.",
    ),
]


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: PrincipalName = Field(
        description="1-64 lowercase letters, digits and inner `.`, `_` or `-`; never reused."
    )
    groups: Groups = Field(default_factory=list)


class UserGroups(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groups: Groups


class UserView(BaseModel):
    user: str
    groups: list[str]
    created_at: str
    revoked_at: str | None
    active: bool


class NewUserKey(UserView):
    api_key: str = Field(description="The user's API key: shown this once.")


def _not_found(exc: UserError) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, str(exc))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=NewUserKey,
    summary="Make a user of the caller's tenant; its API key is in this answer only",
)
async def create_user(body: UserCreate, caller: TenantKeyDep, redis: RedisDep) -> NewUserKey:
    try:
        user, api_key = await UserRegistry(redis).create(caller.tenant, body.user, body.groups)
    except UserError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    log.info("user_created", tenant=caller.tenant, user=user.user, groups=user.groups)
    return NewUserKey.model_validate({**user.public(), "api_key": api_key})


@router.get("", response_model=list[UserView], summary="The tenant's users, revoked ones too")
async def list_users(caller: TenantKeyDep, redis: RedisDep) -> list[UserView]:
    users = await UserRegistry(redis).every(caller.tenant)
    return [UserView.model_validate(user.public()) for user in users]


@router.get("/{user}", response_model=UserView, summary="A user of the tenant")
async def get_user(user: UserPath, caller: TenantKeyDep, redis: RedisDep) -> UserView:
    found = await UserRegistry(redis).get(caller.tenant, user)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no user {user!r}")
    return UserView.model_validate(found.public())


@router.patch(
    "/{user}",
    response_model=UserView,
    summary="Set a user's groups (all replaced); its next request reads with them",
)
async def set_groups(
    user: UserPath, body: UserGroups, caller: TenantKeyDep, redis: RedisDep
) -> UserView:
    try:
        found = await UserRegistry(redis).set_groups(caller.tenant, user, body.groups)
    except UserError as exc:
        raise _not_found(exc) from exc
    log.info("user_groups_set", tenant=caller.tenant, user=user, groups=found.groups)
    return UserView.model_validate(found.public())


@router.delete(
    "/{user}",
    response_model=UserView,
    summary="Revoke a user: its keys stop at once, its name stays taken",
)
async def revoke_user(user: UserPath, caller: TenantKeyDep, redis: RedisDep) -> UserView:
    try:
        found = await UserRegistry(redis).revoke(caller.tenant, user)
    except UserError as exc:
        raise _not_found(exc) from exc
    log.info("user_revoked", tenant=caller.tenant, user=user)
    return UserView.model_validate(found.public())


@router.post(
    "/{user}/key",
    response_model=NewUserKey,
    summary="A new API key for a user; its old keys stop now (the new one is shown this once)",
)
async def rotate_key(user: UserPath, caller: TenantKeyDep, redis: RedisDep) -> NewUserKey:
    try:
        found, api_key = await UserRegistry(redis).rotate_key(caller.tenant, user)
    except UserError as exc:
        raise _not_found(exc) from exc
    log.info("user_key_rotated", tenant=caller.tenant, user=user)
    return NewUserKey.model_validate({**found.public(), "api_key": api_key})
