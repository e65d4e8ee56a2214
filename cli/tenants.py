"""`ragbus tenant create|list|revoke|rotate-key|tools|creds|nats-config`: tenants straight in Redis
(RAGBUS_REDIS_URL) and, in `tenants` mode, their NATS accounts pushed to the servers: the same
operations as the admin API; and the one-time operator configuration for a NATS that `ragbus
up` does not start."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.table import Table

from cli.common import console, errors, server_logging
from infra.settings import Settings

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from infra.tenancy.registry import NewTenant, Tenant

T = TypeVar("T")

tenant_app = typer.Typer(
    help="Tenants: their API keys, NATS accounts and limits.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(tenant_app, name="tenant")


AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _tenants() -> ModuleType:
    """`infra.tenancy.tenants`, loaded by a tenant command when it runs (it brings Redis's and
    NATS's clients, which no other command's start needs)."""
    from infra.tenancy import tenants

    return tenants


def _run(work: Callable[[aioredis.Redis, Settings], Awaitable[T]]) -> T:
    from infra.runtime.redis_client import connect_redis, started_redis_url
    from infra.tenancy.registry import TenantError

    tenants = _tenants()
    settings = Settings()
    server_logging(settings)  # on stderr: stdout is the command's own

    async def main() -> T:
        # the Redis `ragbus up` started for this data directory asks for its password
        redis = connect_redis(started_redis_url(settings.redis_url, settings.data_dir / "redis"))
        try:
            return await work(redis, settings)
        finally:
            await redis.aclose()

    try:
        return asyncio.run(main())
    except (TenantError, tenants.BusTenancyError, tenants.TrustError) as exc:
        errors.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc


@tenant_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="1-32 lowercase letters, digits or inner '-'.")],
    as_json: AsJson = False,
    rps: Annotated[float | None, typer.Option(help="Submissions per second.")] = None,
    burst: Annotated[int | None, typer.Option(help="Submissions at once.")] = None,
    max_documents: Annotated[int | None, typer.Option(help="Documents kept.")] = None,
    max_namespaces: Annotated[int | None, typer.Option(help="Namespaces filled.")] = None,
    max_bytes: Annotated[int | None, typer.Option(help="Document bytes kept.")] = None,
    max_sources: Annotated[int | None, typer.Option(help="Sources kept in sync.")] = None,
    creds_out: Annotated[
        Path | None,
        typer.Option("--creds-out", help="Also write its NATS credentials here (mode 0600)."),
    ] = None,
) -> None:
    """Create a tenant and print its API key and NATS credentials (shown this once). In
    `tenants` mode its NATS account is on every server when this returns."""
    from infra.tenancy.registry import Limits

    limits = Limits(
        requests_per_s=rps,
        burst=burst,
        documents=max_documents,
        namespaces=max_namespaces,
        bytes=max_bytes,
        sources=max_sources,
    )
    made: NewTenant = _run(lambda redis, settings: _tenants().create(redis, settings, name, limits))
    if creds_out is not None and made.nats_creds:
        _write_secret(creds_out, made.nats_creds)
    if as_json:
        print(json.dumps(made.model_dump()))
    else:
        for field, value in made.model_dump(exclude={"nats_creds"}).items():
            console.print(f"{field:18} {value}")
        if made.nats_creds and creds_out is None:
            console.print(made.nats_creds)
        console.print(
            "[dim]Keep the API key and the NATS credentials: they are not shown again.[/dim]"
        )


@tenant_app.command("list")
def list_tenants(as_json: AsJson = False) -> None:
    """Every tenant, revoked ones included (never their secrets)."""

    async def work(redis: aioredis.Redis, _: Settings) -> list[dict[str, Any]]:
        from infra.tenancy.registry import TenantRegistry

        return [tenant.public() for tenant in await TenantRegistry(redis).list()]

    listed = _run(work)
    if as_json:
        print(json.dumps(listed))
        return
    table = Table("tenant", "active", "created", "nats account", "limits")
    for t in listed:
        table.add_row(
            str(t["tenant"]),
            "yes" if t["active"] else "revoked",
            str(t["created_at"])[:19],
            str(t["nats_account"])[:12] + "…",
            json.dumps(t["limits"]) if t["limits"] else "defaults",
        )
    console.print(table)


@tenant_app.command("revoke")
def revoke(name: str, as_json: AsJson = False) -> None:
    """Revoke a tenant: its API key stops at once; in `tenants` mode its NATS connections are
    closed and refused on every server when this returns."""
    revoked = _run(lambda redis, settings: _tenants().revoke(redis, settings, name)).public()
    print(json.dumps(revoked)) if as_json else console.print(f"revoked {name}")


@tenant_app.command("rotate-key")
def rotate_key(name: str, as_json: AsJson = False) -> None:
    """A new API key for a tenant, shown this once; every key it had stops at once."""
    api_key = _run(lambda redis, _: _tenants().rotate_key(redis, name))
    if as_json:
        print(json.dumps({"tenant": name, "api_key": api_key}))
    else:
        console.print(f"{'api_key':18} {api_key}")
        console.print("[dim]Keep the API key: it is not shown again. The old one is refused.[/dim]")


@tenant_app.command("tools")
def tools(
    name: str,
    allow: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated MCP server names (RAGBUS_MCP_CONFIG's) whose tools its "
            "requests may use; replaces the list. An empty string allows none."
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Show, or with --allow set, which MCP servers' tools a tenant's requests may use (in
    `tenants` mode a tenant uses none until allowed)."""
    if allow is None:
        record = _run(lambda redis, _: _registry_get(redis, name))
    else:
        servers = [part.strip() for part in allow.split(",") if part.strip()]
        record = _run(lambda redis, _: _tenants().allow_mcp_servers(redis, name, servers))
    if as_json:
        print(json.dumps({"tenant": name, "mcp_servers": record.mcp_servers}))
    else:
        console.print(f"{'mcp_servers':18} {', '.join(record.mcp_servers) or '(none)'}")


async def _registry_get(redis: aioredis.Redis, name: str) -> Tenant:
    """The active tenant's record (`TenantError` names one that is not)."""
    from infra.tenancy.registry import TenantRegistry

    return await TenantRegistry(redis).active(name)


@tenant_app.command("creds")
def creds(
    name: str,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write them here (mode 0600), not to stdout.")
    ] = None,
    label: Annotated[
        str | None, typer.Option("--name", help="What they are for (the user JWT's name).")
    ] = None,
    listing: Annotated[
        bool, typer.Option("--list", help="List the tenant's credentials instead (no secret).")
    ] = False,
    revoke_user: Annotated[
        str | None,
        typer.Option(
            "--revoke",
            metavar="USER",
            help="Revoke the credential of this user public key (U…) alone instead.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """New NATS credentials for a tenant (`tenants` mode), shown this once: lost ones, a second
    client, or a tenant made before tenants had NATS accounts (it gets its account now). With
    --list, the credentials issued (their users' public keys, never a secret); with --revoke
    USER, that one credential is closed and refused on every node when this returns, and the
    tenant's others keep working."""
    if listing and revoke_user:
        errors.print("[red]--list and --revoke: one at a time[/red]")
        raise typer.Exit(2)
    if listing:
        users = _run(lambda redis, _: _tenants().list_creds(redis, name))
        _print_users(name, [user.public() for user in users], as_json)
        return
    if revoke_user is not None:
        user = revoke_user
        revoked = _run(
            lambda redis, settings: _tenants().revoke_creds(redis, settings, name, user)
        ).public()
        if as_json:
            print(json.dumps({"tenant": name, **revoked}))
        else:
            console.print(f"revoked {user} of {name}; its other credentials keep working")
        return
    text, issued = _run(
        lambda redis, settings: _tenants().issue_creds(redis, settings, name, label)
    )
    errors.print(f"nats_user {issued.user}")  # what revokes them alone: never on stdout
    if out is None:
        print(text, end="")
    else:
        _write_secret(out, text)
        errors.print(f"wrote {out}")


def _print_users(name: str, users: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"tenant": name, "nats_users": users}))
        return
    table = Table("user", "name", "issued", "revoked")
    for user in users:
        table.add_row(
            str(user["user"]),
            str(user["name"]),
            str(user["issued_at"] or "")[:19],
            str(user["revoked_at"] or "")[:19] or "-",
        )
    console.print(table)


@tenant_app.command("nats-config")
def nats_config(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write it here (mode 0600), not to stdout.")
    ] = None,
    resolver_dir: Annotated[
        str, typer.Option(help="Where each server keeps the account JWTs it is given.")
    ] = "/data/jwt",
) -> None:
    """The lines every nats-server of a `tenants` install needs, once: the operator, the
    system account and the account resolver (NATS's decentralized auth). Include them in each
    node's configuration; tenants made or revoked later reach every node through the
    resolver, with no file edited and no reload. The operator's keys are made on first use in
    RAGBUS_NATS_TRUST_DIR (default <data>/nats/trust); the roles connect with
    RAGBUS_NATS_CREDS=<that directory>/service.creds."""
    trust = _tenants().trust_for(Settings(), create=True)
    block = trust.server_config(resolver_dir)
    if out is None:
        print(block, end="")
    else:
        _write_secret(out, block)
        errors.print(f"wrote {out}")
    errors.print(
        f"connect the roles with RAGBUS_NATS_CREDS={trust.service_creds}; tenants are made "
        "with RAGBUS_NATS_TRUST_DIR pointing at that directory",
        soft_wrap=True,  # a path to copy, whole
    )


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
