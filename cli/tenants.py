"""`ragbus tenant create|list|revoke|nats-config`: tenants straight in Redis
(RAGBUS_REDIS_URL), the same operations as the admin API, and the NATS users for a nats-server
that `ragbus up` does not start."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from cli.common import console, errors
from infra.runtime.redis_client import connect_redis
from infra.settings import Settings
from infra.tenancy.nats_auth import (
    PASSWORD_FILE,
    SERVICE_USER,
    render,
    service_password,
    wait_applied,
)
from infra.tenancy.registry import Limits, NewTenant, TenantError, TenantRegistry, bcrypt_hash

T = TypeVar("T")

tenant_app = typer.Typer(
    help="Tenants: their API keys, NATS users and limits.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(tenant_app, name="tenant")


AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _run(work: Callable[[TenantRegistry], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = connect_redis(Settings().redis_url)
        try:
            return await work(TenantRegistry(redis))
        finally:
            await redis.aclose()

    try:
        return asyncio.run(main())
    except TenantError as exc:
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
) -> None:
    """Create a tenant and print its API key and NATS credentials (shown this once)."""
    limits = Limits(
        requests_per_s=rps,
        burst=burst,
        documents=max_documents,
        namespaces=max_namespaces,
        bytes=max_bytes,
    )

    async def work(registry: TenantRegistry) -> tuple[NewTenant, bool]:
        made = await registry.create(name, limits)
        return made, await wait_applied(registry.redis, await registry.version(), timeout_s=5.0)

    made, applied = _run(work)
    if as_json:
        print(json.dumps(made.model_dump()))
    else:
        for field, value in made.model_dump().items():
            console.print(f"{field:15} {value}")
        console.print(
            "[dim]Keep the API key and the NATS password: they are not shown again.[/dim]"
        )
    if not applied:
        errors.print(
            "[yellow]no nats-server started by `ragbus up` in tenants mode took the NATS user "
            "within 5 s; a server run elsewhere needs its users from its operator[/yellow]"
        )


@tenant_app.command("list")
def list_tenants(as_json: AsJson = False) -> None:
    """Every tenant, revoked ones included (never their secrets)."""

    async def work(registry: TenantRegistry) -> list[dict[str, Any]]:
        return [tenant.public() for tenant in await registry.list()]

    tenants = _run(work)
    if as_json:
        print(json.dumps(tenants))
        return
    table = Table("tenant", "active", "created", "nats user", "limits")
    for t in tenants:
        table.add_row(
            str(t["tenant"]),
            "yes" if t["active"] else "revoked",
            str(t["created_at"])[:19],
            str(t["nats_user"]),
            json.dumps(t["limits"]) if t["limits"] else "defaults",
        )
    console.print(table)


@tenant_app.command("revoke")
def revoke(name: str, as_json: AsJson = False) -> None:
    """Revoke a tenant: its API key stops at once, its NATS user with the next reload."""

    async def work(registry: TenantRegistry) -> dict[str, Any]:
        return (await registry.revoke(name)).public()

    revoked = _run(work)
    print(json.dumps(revoked)) if as_json else console.print(f"revoked {name}")


@tenant_app.command("nats-config")
def nats_config(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write it here (mode 0600), not to stdout.")
    ] = None,
) -> None:
    """The nats-server `authorization` block for every active tenant, for a nats-server that
    `ragbus up` does not start (docker-compose, a cluster): include it in the server's
    configuration and reload it (`nats-server --signal reload`). The roles connect as user
    `ragbus` with the password in `<data>/nats/service-password`."""
    settings = Settings()
    nats_dir = settings.data_dir / "nats"
    hashed = bcrypt_hash(service_password(nats_dir))

    async def work(registry: TenantRegistry) -> str:
        return render(hashed, await registry.list())

    block = _run(work)
    if out is None:
        print(block, end="")
        return
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(block)
    errors.print(
        f"wrote {out}; connect the roles with RAGBUS_NATS_URL=nats://{SERVICE_USER}:<the "
        f"password in {nats_dir / PASSWORD_FILE}>@<host>:4222"
    )
