"""Redis with failover on one machine: a primary, a replica and three sentinels on loopback
ports, for `ragbus up`, the tests and the chaos run, each process killable (SIGKILL) and
restartable on its port and storage.

Production runs the same topology on three machines (docs/operations.md, "Redis with
failover"); ragbus reaches either the same way, through the sentinels named by a
`redis+sentinel://` URL (`infra.runtime.redis_client`).

- Every process reads a configuration file of its own (mode 0600, it holds the password), made
  once: Sentinel rewrites its own file and a promoted replica's as the topology changes, so a
  process started again comes back as what it last was, not as what it began as.
- One password, made once per directory (`<root>/password`), guards the two servers and the
  three sentinels; the servers also use it to replicate from each other (`masterauth`).
- Sentinel declares the primary down after `DOWN_AFTER_MS` without an answer; two sentinels of
  three must agree (`QUORUM`), so one sentinel lost changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from infra.config.services import DEFAULT_SERVICE, SENTINEL_SCHEME, sentinel_target
from infra.logging import get_logger
from infra.runtime.local_process import (
    LocalService,
    ServiceError,
    free_port,
    port_free,
    redacted,
    redis_binary,
    wait_until_ready,
    write_private,
)
from infra.runtime.parent_death import stop_with_parent
from infra.runtime.redis_client import started_redis_password

log = get_logger(__name__)

QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 10_000
READY_TIMEOUT_S = 30.0


@dataclass
class RedisProcess:
    """One process of the set: a server (`redis-a`, `redis-b`) or a sentinel (`sentinel-N`)."""

    name: str
    port: int
    directory: Path
    sentinel: bool = False
    service: LocalService | None = None

    @property
    def config(self) -> Path:
        return self.directory / ("sentinel.conf" if self.sentinel else "redis.conf")

    @property
    def alive(self) -> bool:
        return self.service is not None and self.service.process.poll() is None


@dataclass
class RedisSentinelSet:
    """Two servers (the first starts as the primary) and three sentinels under `root`."""

    root: Path
    servers: list[RedisProcess] = field(default_factory=list)
    sentinels: list[RedisProcess] = field(default_factory=list)
    service: str = DEFAULT_SERVICE
    with_parent: bool = False

    @classmethod
    def create(
        cls,
        root: Path,
        sentinel_ports: list[int] | None = None,
        service: str = DEFAULT_SERVICE,
        *,
        with_parent: bool = False,
    ) -> RedisSentinelSet:
        """The set's processes on free ports (the sentinels on `sentinel_ports` where given
        and free); started by `start`."""
        root = root.resolve()
        ports = sentinel_ports or []

        def port(directory: Path, config: str, wanted: int | None) -> int:
            # a set started before in this directory keeps its ports: its files name them
            kept = _configured_port(directory / config)
            if kept is not None:
                return kept
            return wanted if wanted is not None and port_free(wanted) else free_port()

        sentinels = [
            RedisProcess(
                f"sentinel-{index + 1}",
                port(
                    root / f"sentinel-{index + 1}",
                    "sentinel.conf",
                    ports[index] if index < len(ports) else None,
                ),
                root / f"sentinel-{index + 1}",
                sentinel=True,
            )
            for index in range(3)
        ]
        servers = [
            RedisProcess(name, port(root / name, "redis.conf", None), root / name)
            for name in ("redis-a", "redis-b")
        ]
        return cls(root, servers, sentinels, service, with_parent)

    @property
    def password(self) -> str:
        password = started_redis_password(self.root, create=True)
        assert password is not None
        return password

    @property
    def url(self) -> str:
        """What `RAGBUS_REDIS_URL` takes: the sentinels, the service, database 0."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"{SENTINEL_SCHEME}://:{self.password}@{hosts}/{self.service}/0"

    def start(self) -> None:
        """Start every process that is not running, servers first, and wait until the replica
        has synced and every sentinel sees the primary, the replica and the other two."""
        primary = self.servers[0]
        for process in [*self.servers, *self.sentinels]:
            process.directory.mkdir(parents=True, exist_ok=True)
        for server in self.servers:
            if not server.config.exists():
                self._write_server_config(server, None if server is primary else primary)
        for sentinel in self.sentinels:
            if not sentinel.config.exists():
                self._write_sentinel_config(sentinel, primary)
        try:
            for process in [*self.servers, *self.sentinels]:
                if not process.alive:
                    self._spawn(process)
            self.until_settled()
        except BaseException:
            self.stop()  # what did start is stopped, not left behind
            raise
        log.info("service_started", service="redis-sentinel", url=redacted(self.url))

    def _write_server_config(self, server: RedisProcess, primary: RedisProcess | None) -> None:
        lines = [
            f"port {server.port}",
            "bind 127.0.0.1",
            f'dir "{server.directory}"',
            f'logfile "{server.directory / "redis-server.log"}"',
            f'requirepass "{self.password}"',
            f'masterauth "{self.password}"',
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
        ]
        if primary is not None:
            lines.append(f"replicaof 127.0.0.1 {primary.port}")
        write_private(server.config, "\n".join(lines) + "\n")

    def _write_sentinel_config(self, sentinel: RedisProcess, primary: RedisProcess) -> None:
        name = self.service
        lines = [
            f"port {sentinel.port}",
            "bind 127.0.0.1",
            f'dir "{sentinel.directory}"',
            f'logfile "{sentinel.directory / "sentinel.log"}"',
            f'requirepass "{self.password}"',
            f"sentinel monitor {name} 127.0.0.1 {primary.port} {QUORUM}",
            f'sentinel auth-pass {name} "{self.password}"',
            f'sentinel sentinel-pass "{self.password}"',
            f"sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {name} 1",
        ]
        write_private(sentinel.config, "\n".join(lines) + "\n")

    def _spawn(self, process: RedisProcess) -> None:
        log_path = process.directory / ("sentinel.log" if process.sentinel else "redis-server.log")
        argv = [redis_binary(), str(process.config)]
        if process.sentinel:
            argv.append("--sentinel")
        popen = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=stop_with_parent if self.with_parent else None,
        )
        url = f"redis://:{self.password}@127.0.0.1:{process.port}/0"
        wait_until_ready(lambda: self._answers(process), process.name, popen, log_path)
        process.service = LocalService(process.name, url, popen, log_path)

    def _client(self, process: RedisProcess, timeout: float = 1.0) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=process.port,
            password=self.password,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            decode_responses=True,
        )

    def _answers(self, process: RedisProcess) -> bool:
        try:
            with self._client(process) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def primary(self) -> RedisProcess | None:
        """The server the live sentinels' majority names as the primary now."""
        votes: dict[int, int] = {}
        for sentinel in self.sentinels:
            if not sentinel.alive:
                continue
            with contextlib.suppress(redis.RedisError), self._client(sentinel) as client:
                address = client.execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
                )
                if address:
                    port = int(address[1])
                    votes[port] = votes.get(port, 0) + 1
        if not votes:
            return None
        port, count = max(votes.items(), key=lambda item: item[1])
        if count < QUORUM:
            return None
        return next((s for s in self.servers if s.port == port), None)

    def settled(self) -> bool:
        """The sentinels agree on a live primary that a live replica follows, in sync, and each
        live sentinel knows the other live ones."""
        primary = self.primary()
        if primary is None or not primary.alive:
            return False
        try:
            with self._client(primary) as client:
                info = client.info("replication")
            if info.get("role") != "master" or int(info.get("connected_slaves", 0)) < sum(
                s.alive for s in self.servers if s is not primary
            ):
                return False
            for index in range(int(info.get("connected_slaves", 0))):
                replica = info.get(f"slave{index}") or {}
                if replica.get("state") != "online":
                    return False
            live = [s for s in self.sentinels if s.alive]
            for sentinel in live:
                with self._client(sentinel) as client:
                    state = client.execute_command("SENTINEL", "MASTER", self.service)
                fields = state if isinstance(state, dict) else {}  # redis-py parses it
                if int(fields.get("num-other-sentinels", 0)) < len(live) - 1:
                    return False
                flags = set(str(fields.get("flags", "")).split(","))
                if "master" not in flags or flags & {"s_down", "o_down"}:
                    return False
        except (redis.RedisError, ValueError):
            return False
        return True

    def until_settled(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.settled():
                return
            time.sleep(0.2)
        raise ServiceError(
            f"the Redis sentinel set under {self.root} did not settle within {timeout_s:g} s"
        )

    def kill(self, name: str) -> None:
        """SIGKILL one process of the set (a server or a sentinel)."""
        process = self._named(name)
        if process.service is not None and process.alive:
            os.kill(process.service.process.pid, signal.SIGKILL)
            process.service.process.wait(10)

    def restart(self, name: str) -> None:
        """Start a process of the set again, from the configuration it last had."""
        process = self._named(name)
        if not process.alive:
            self._spawn(process)

    def _named(self, name: str) -> RedisProcess:
        for process in [*self.servers, *self.sentinels]:
            if process.name == name:
                return process
        raise KeyError(name)

    @property
    def services(self) -> list[LocalService]:
        """The running processes, servers first (stopped last to first: the sentinels, then
        the servers, so stopping starts no failover)."""
        return [p.service for p in [*self.servers, *self.sentinels] if p.service is not None]

    def stop(self) -> None:
        for process in [*self.sentinels, *reversed(self.servers)]:
            if process.service is not None:
                process.service.stop()


def _configured_port(config: Path) -> int | None:
    if not config.exists():
        return None
    for line in config.read_text().splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "port" and value.strip().isdigit():
            return int(value)
    return None


def start_sentinel_set(url: str, root: Path, *, with_parent: bool = False) -> RedisSentinelSet:
    """The set `ragbus up` starts when `RAGBUS_REDIS_URL` names sentinels and none answers:
    the sentinels on the URL's ports where free, its service name, under `root`."""
    target = sentinel_target(url)
    started = RedisSentinelSet.create(
        root,
        [port for _, port in target.sentinels],
        target.service,
        with_parent=with_parent,
    )
    started.start()
    return started
