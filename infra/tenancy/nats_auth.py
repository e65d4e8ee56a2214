"""The authorization of the nats-server the project starts itself in `tenants` mode.

nats-server 2.9 has no auth callout, so the users are in its configuration: an included
`auth.conf` that `NatsAuthorizer` rewrites from the tenant registry and reloads (SIGHUP)
whenever a tenant is created or revoked.

- The service user (`ragbus`) runs every role and may do anything. Its password is made once
  per data directory and kept in `<data>/nats/service-password` (mode 0600).
- A tenant's user may only subscribe to its own caller events, `rag.events.<tenant>.>`, and to
  its own inbox prefix (`_INBOX_<tenant>.>`, which its client must use), and may create
  JetStream consumers on RAG_EVENTS only through the API subject that names the filter
  (`$JS.API.CONSUMER.CREATE.RAG_EVENTS.<name>.rag.events.<tenant>.…`, which nats-server checks
  against the consumer's own filter). So it can follow and replay its requests and nothing
  else: no publishing on `rag.>`, no other tenant's events, no wildcard above its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
from pathlib import Path
from typing import Final

import redis.asyncio as aioredis

from contracts import subjects as sj
from infra.logging import get_logger
from infra.tenancy.registry import Tenant, TenantRegistry, nats_inbox_prefix

log = get_logger(__name__)

SERVICE_USER: Final = "ragbus"
AUTH_FILE: Final = "auth.conf"
PASSWORD_FILE: Final = "service-password"
APPLIED_KEY: Final = "ragbus:tenants:nats-applied"
POLL_S: Final = 1.0
RELOADED_LINE: Final = b"Reloaded server configuration"
"""What nats-server (2.9 and 2.12 alike) logs once a SIGHUP's reload has taken."""
RELOAD_WAIT_S: Final = 5.0


def tenant_permissions(tenant: str) -> dict[str, object]:
    events = f"{sj.tenant_events_prefix(tenant)}.>"
    return {
        "publish": {
            "allow": [
                f"$JS.API.CONSUMER.CREATE.{sj.STREAM_EVENTS}.*.{events}",
                "$JS.FC.>",
            ]
        },
        "subscribe": {"allow": [events, f"{nats_inbox_prefix(tenant)}.>"]},
    }


def render(service_password_bcrypt: str, tenants: list[Tenant]) -> str:
    """The `authorization` block (JSON is valid nats-server configuration)."""
    users: list[dict[str, object]] = [
        {
            "user": SERVICE_USER,
            "password": service_password_bcrypt,
            "permissions": {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}},
        }
    ]
    users += [
        {
            "user": tenant.nats_user,
            "password": tenant.nats_password_bcrypt,
            "permissions": tenant_permissions(tenant.tenant),
        }
        for tenant in tenants
        if tenant.active
    ]
    return "authorization " + json.dumps({"users": users}, indent=2) + "\n"


def service_password(nats_dir: Path) -> str:
    """The service user's password for this data directory, made on first use."""
    path = nats_dir / PASSWORD_FILE
    if path.exists():
        return path.read_text().strip()
    nats_dir.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def write_auth(nats_dir: Path, service_password_bcrypt: str, tenants: list[Tenant]) -> Path:
    path = nats_dir / AUTH_FILE
    staged = path.with_suffix(".tmp")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(render(service_password_bcrypt, tenants))
    staged.replace(path)
    return path


class NatsAuthorizer:
    """Keeps a started nats-server's users equal to the registry's active tenants."""

    def __init__(
        self,
        redis: aioredis.Redis,
        nats_dir: Path,
        process: subprocess.Popen[bytes],
        service_password_bcrypt: str,
        log_path: Path | None = None,
    ) -> None:
        self.registry = TenantRegistry(redis)
        self.redis = redis
        self.nats_dir = nats_dir
        self.process = process
        self.service_hash = service_password_bcrypt
        self.log_path = log_path
        """The server's log, where it says that a reload took (none: trusted at once)."""
        self.applied = -1
        self._task: asyncio.Task[None] | None = None

    async def sync(self) -> bool:
        """Rewrite and reload if the registry moved on; True when the server took it. The
        registry's version counts as applied (`APPLIED_KEY`, which `wait_applied` reads) only
        once the server has said so: a SIGHUP returns before the server has read its users,
        and a tenant's first connection in between was refused."""
        version = await self.registry.version()
        if version == self.applied:
            return False
        tenants = await self.registry.list()
        await asyncio.to_thread(write_auth, self.nats_dir, self.service_hash, tenants)
        if self.process.poll() is None:
            logged = self._log_size()
            self.process.send_signal(signal.SIGHUP)
            if not await self._reloaded_since(logged):
                log.warning(
                    "nats_users_reload_unconfirmed", version=version, log=str(self.log_path)
                )
                return False  # the next poll writes and signals again
        self.applied = version
        await self.redis.set(APPLIED_KEY, version)
        log.info("nats_users_reloaded", tenants=sum(t.active for t in tenants), version=version)
        return True

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size if self.log_path is not None else 0
        except OSError:
            return 0

    async def _reloaded_since(self, offset: int) -> bool:
        """Whether the server logged a finished reload after `offset` of its log, within
        `RELOAD_WAIT_S`."""
        if self.log_path is None:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RELOAD_WAIT_S
        while loop.time() < deadline:
            if RELOADED_LINE in await asyncio.to_thread(_read_from, self.log_path, offset):
                return True
            await asyncio.sleep(0.02)
        return False

    async def run(self) -> None:
        while True:
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: the users stay as they are until it is back
                log.warning("nats_users_sync_failed", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(POLL_S)

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="nats-authorizer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as log_file:
            log_file.seek(offset)
            return log_file.read()
    except OSError:
        return b""


async def wait_applied(redis: aioredis.Redis, version: int, timeout_s: float = 10.0) -> bool:
    """Whether a started nats-server took the registry at `version` within the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if int(await redis.get(APPLIED_KEY) or -1) >= version:
            return True
        await asyncio.sleep(0.1)
    return False
