"""Find the NATS and Redis the settings point at, or start local ones.

`ragbus up` and friends use what they are pointed at; only when nothing answers
there (and `RAGBUS_START_SERVICES` allows it) do they start a `nats-server -js` and a
`redis-server` with their data under the data directory, and stop them on exit.
The test fixtures start their own through the same functions, on free ports.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from infra.config.services import is_sentinel_url, nats_servers, sentinel_target
from infra.logging import get_logger
from infra.runtime.local_process import LocalService as LocalService
from infra.runtime.local_process import ServiceError as ServiceError
from infra.runtime.local_process import free_port as free_port
from infra.runtime.local_process import (
    port_free,
    redis_binary,
    server_binary,
    wait_until_ready,
    write_private,
)
from infra.runtime.local_process import redacted as redacted
from infra.runtime.parent_death import stop_with_parent
from infra.settings import Settings

if TYPE_CHECKING:
    from infra.tenancy.trust import Trust

log = get_logger(__name__)


@dataclass
class Services:
    settings: Settings
    started: list[LocalService] = field(default_factory=list)

    def started_service(self, name: str) -> LocalService | None:
        return next((s for s in self.started if s.name == name), None)

    def stop(self) -> None:
        for service in reversed(self.started):
            log.info("service_stopping", service=service.name, url=redacted(service.url))
            service.stop()
        self.started.clear()


def _host_port(url: str, default_port: int) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or default_port


def _greets(host: str, port: int, hello: bytes | None, expect: bytes, timeout: float = 1.0) -> bool:
    """A TCP peer that answers like the service we expect (not just any open port)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if hello:
                sock.sendall(hello)
            return sock.recv(64).startswith(expect)
    except OSError:
        return False


def nats_info(url: str, timeout: float = 1.0) -> dict[str, object] | None:
    """The INFO a NATS server greets with (its first line, JSON), or None when none answers."""
    host, port = _host_port(url, 4222)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            line = sock.makefile("rb").readline(64 * 1024)
    except OSError:
        return None
    if not line.startswith(b"INFO "):
        return None
    try:
        info = json.loads(line[5:])
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def nats_reachable(url: str) -> bool:
    """Any of the servers (`RAGBUS_NATS_URL` may list a cluster's nodes) greets like NATS."""
    return any(_greets(*_host_port(server, 4222), None, b"INFO") for server in nats_servers(url))


def redis_reachable(url: str) -> bool:
    """A Redis (or, for a `redis+sentinel://` URL, any of its sentinels) answers PING."""
    places = sentinel_target(url).sentinels if is_sentinel_url(url) else [_host_port(url, 6379)]
    return any(
        _greets(host, port, b"PING\r\n", b"+PONG") or _greets(host, port, b"PING\r\n", b"-NOAUTH")
        for host, port in places
    )


NATS_MAX_PAYLOAD = 8 * 1024 * 1024
"""A document message may carry up to 2 M characters; the server default is 1 MB."""


def start_nats(
    port: int,
    store_dir: Path,
    max_payload: int = NATS_MAX_PAYLOAD,
    *,
    trust: Trust | None = None,
    extra_config: str = "",
    name: str = "nats-server",
    with_parent: bool = False,
) -> LocalService:
    """A `nats-server -js` on `port`; with `trust`, in operator mode (`tenants`): it trusts
    that operator's accounts, pushed to its resolver (`<store>/jwt`), and takes no client
    without a user JWT. `extra_config` is appended to its configuration (a cluster node's name
    and routes: `infra.runtime.nats_cluster`)."""
    store_dir = store_dir.resolve()
    store_dir.mkdir(parents=True, exist_ok=True)
    log_path = store_dir / "nats-server.log"
    config = store_dir / "nats-server.conf"
    text = (
        f"host: 127.0.0.1\nport: {port}\nmax_payload: {max_payload}\n"
        f'jetstream {{ store_dir: "{store_dir}" }}\n{extra_config}'
    )
    if trust is not None:
        text += trust.server_config(store_dir / "jwt")
    write_private(config, text)
    process = subprocess.Popen(
        [server_binary("nats-server"), "-c", str(config), "-l", str(log_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=stop_with_parent if with_parent else None,
    )
    url = f"nats://127.0.0.1:{port}"
    wait_until_ready(lambda: nats_reachable(url), name, process, log_path)
    log.info("service_started", service=name, url=redacted(url), dir=str(store_dir))
    return LocalService(name, url, process, log_path)


def start_redis(
    port: int, data_dir: Path, persistent: bool = True, *, with_parent: bool = False
) -> LocalService:
    """A `redis-server` on `port` with its data in `data_dir`, behind a password made once per
    data directory and kept in `<data_dir>/password` (mode 0600): `requirepass`, handed over on
    its standard input rather than as `--requirepass`, so it is never in the process list. The
    URL it answers carries it (`redis://:PASSWORD@127.0.0.1:PORT/0`); a log line shows it
    redacted."""
    data_dir = data_dir.resolve()  # redis-server chdirs to --dir before opening its log file
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "redis-server.log"
    from infra.runtime.redis_client import started_redis_password, with_password

    password = started_redis_password(data_dir, create=True)
    assert password is not None
    persistence = (
        ["--appendonly", "yes", "--save", ""]
        if persistent
        else ["--appendonly", "no", "--save", ""]
    )
    process = subprocess.Popen(
        [
            redis_binary(),
            "-",  # the configuration's first lines from standard input: the password
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data_dir),
            "--logfile",
            str(log_path),
            *persistence,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=stop_with_parent if with_parent else None,
    )
    assert process.stdin is not None
    try:
        with process.stdin as config:
            config.write(f'requirepass "{password}"\n'.encode())
    except BrokenPipeError:
        pass  # it exited before reading: `wait_until_ready` says why
    url = with_password(f"redis://127.0.0.1:{port}/0", password)
    wait_until_ready(lambda: redis_reachable(url), "redis-server", process, log_path)
    log.info("service_started", service="redis-server", url=redacted(url), dir=str(data_dir))
    return LocalService("redis-server", url, process, log_path)


def _port_for(url: str, default: int) -> int:
    """The configured port when it is free, else any free port."""
    _, port = _host_port(url, default)
    return port if port_free(port) else free_port()


def refuse_nats_without_accounts(settings: Settings) -> None:
    """`tenants` mode on a NATS that takes clients without credentials would put every tenant
    in one account again: refused, in a sentence, before anything connects."""
    for server in settings.nats_servers:
        info = nats_info(server)
        if info is not None and not info.get("auth_required"):
            raise ServiceError(
                f"the NATS at {redacted(server)} takes clients without credentials, so its "
                "tenants would share one account; RAGBUS_AUTH_MODE=tenants needs a NATS that "
                "trusts ragbus's operator (add the lines of `ragbus tenant nats-config` to its "
                "configuration), or point RAGBUS_NATS_URL at a free port and ragbus starts one"
            )


def ensure_services_sync(settings: Settings, *, with_parent: bool = False) -> Services:
    """The services the settings point at, started where nothing answers and that is allowed.
    `with_parent`: what it starts stops when this process dies, SIGKILLed or not (call it from
    a thread that lives as long as the process: `infra.runtime.parent_death`)."""
    services = Services(settings)
    updates: dict[str, str] = {}
    try:
        if not nats_reachable(settings.nats_url):
            if not settings.start_services:
                raise ServiceError(
                    f"NATS is not reachable at {redacted(settings.nats_url)} (RAGBUS_NATS_URL) "
                    "and RAGBUS_START_SERVICES is false; start NATS there, point "
                    "RAGBUS_NATS_URL at a running server, or set RAGBUS_START_SERVICES=true"
                )
            if len(settings.nats_servers) > 1:
                raise ServiceError(
                    f"no node of the NATS cluster answers ({redacted(settings.nats_url)}); "
                    "ragbus starts a single local nats-server only for a single URL"
                )
            trust = None
            if settings.auth == "tenants":  # operator mode: an account per tenant
                from infra.tenancy.trust import load

                trust = load(settings.trust_dir, create=True)
                updates["nats_creds"] = str(trust.service_creds)
            nats = start_nats(
                _port_for(settings.nats_url, 4222),
                settings.data_dir / "nats",
                trust=trust,
                with_parent=with_parent,
            )
            services.started.append(nats)
            updates["nats_url"] = nats.url
        elif settings.auth == "tenants":
            refuse_nats_without_accounts(settings)
            if settings.nats_creds is None:
                # a NATS run elsewhere: the roles are the service account's user, whose
                # credentials `ragbus tenant nats-config` left in the trust directory
                creds = settings.trust_dir / "service.creds"
                if creds.exists():
                    updates["nats_creds"] = str(creds.resolve())
        from infra.runtime.redis_client import started_redis_url

        redis_dir = settings.data_dir / "redis"
        # a redis-server an earlier run of this data directory started, still running, asks
        # for the password that run made: the URL without one is given it
        redis_url = started_redis_url(settings.redis_url, redis_dir)
        if redis_url != settings.redis_url:
            updates["redis_url"] = redis_url
        if not redis_reachable(redis_url):
            if not settings.start_services:
                raise ServiceError(
                    f"Redis is not reachable at {redacted(settings.redis_url)} "
                    "(RAGBUS_REDIS_URL) and RAGBUS_START_SERVICES is false; start Redis there, "
                    "point RAGBUS_REDIS_URL at a running server, or set "
                    "RAGBUS_START_SERVICES=true"
                )
            if is_sentinel_url(settings.redis_url):
                # a primary, a replica and three sentinels, the sentinels on the URL's ports
                from infra.runtime.redis_sentinel import start_sentinel_set

                sentinels = start_sentinel_set(
                    settings.redis_url, redis_dir, with_parent=with_parent
                )
                services.started.extend(sentinels.services)
                updates["redis_url"] = sentinels.url
            else:
                redis = start_redis(
                    _port_for(settings.redis_url, 6379), redis_dir, with_parent=with_parent
                )
                services.started.append(redis)
                updates["redis_url"] = redis.url
    except BaseException:
        services.stop()
        raise
    services.settings = settings.model_copy(update=updates)
    return services


_STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="services")
"""The one thread that starts services for `ensure_services`: it lives as long as the process,
so the parent-death signal of what it starts fires when the process dies, not before."""


async def ensure_services(settings: Settings) -> Services:
    """`ensure_services_sync` off the event loop; what it starts stops with this process, so a
    SIGKILLed `ragbus up` leaves no nats-server or redis-server behind."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _STARTER, functools.partial(ensure_services_sync, settings, with_parent=True)
    )
