"""`ragbus user`: a tenant's users, over HTTP with the tenant's own key (`--token`, or
RAGBUS_API_TOKEN): what `/v1/users` does (`api.users`). A user's key is printed once, when the
user is made or its key rotated."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cli.common import DEFAULT_API, ApiUrl, Token, call_api, console, errors

user_app = typer.Typer(
    help="A tenant's users: each with its own API key and groups; documents name who may read "
    "them (`access`). Run with the tenant's own key (--token).",
    no_args_is_help=True,
)

Groups = Annotated[
    list[str] | None,
    typer.Option("--group", "-g", help="A group the user belongs to (repeat for more)."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]


def register(app: typer.Typer) -> None:
    app.add_typer(user_app, name="user")


def _show(user: dict[str, Any], as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(user))
        return
    groups = ", ".join(user.get("groups") or []) or "(no group)"
    state = "active" if user.get("active", True) else f"revoked {user.get('revoked_at')}"
    console.print(f"{user['user']}: {groups}; {state}")
    if user.get("api_key"):
        console.print(f"api key (shown this once): {user['api_key']}")


@user_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="1-64 lowercase letters, digits, '.', '_', '-'.")],
    group: Groups = None,
    as_json: AsJson = False,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Make a user; its API key is printed once."""
    _show(call_api(api, token, lambda c: c.create_user(name, group or [])), as_json)


@user_app.command("list")
def list_users(as_json: AsJson = False, api: ApiUrl = DEFAULT_API, token: Token = None) -> None:
    """The tenant's users, revoked ones too (never their keys)."""
    users = call_api(api, token, lambda c: c.users())
    if as_json:
        console.print_json(json.dumps(users))
        return
    if not users:
        errors.print("no users yet: `ragbus user create NAME --group GROUP`")
    for user in users:
        _show(user, False)


@user_app.command("groups")
def groups(
    name: str,
    group: Groups = None,
    as_json: AsJson = False,
    api: ApiUrl = DEFAULT_API,
    token: Token = None,
) -> None:
    """Set a user's groups (all replaced; none given: no group); from its next request."""
    _show(call_api(api, token, lambda c: c.set_user_groups(name, group or [])), as_json)


@user_app.command("revoke")
def revoke(
    name: str, as_json: AsJson = False, api: ApiUrl = DEFAULT_API, token: Token = None
) -> None:
    """Revoke a user: its keys stop at once; its name stays taken."""
    _show(call_api(api, token, lambda c: c.revoke_user(name)), as_json)


@user_app.command("rotate-key")
def rotate_key(
    name: str, as_json: AsJson = False, api: ApiUrl = DEFAULT_API, token: Token = None
) -> None:
    """A new API key for a user, printed once; its old keys stop now."""
    _show(call_api(api, token, lambda c: c.rotate_user_key(name)), as_json)
