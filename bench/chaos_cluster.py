"""The chaos run's cluster: every role in its own process (`ROLES`: two of every role that can
have two) on a nats-server and a redis-server (AOF on) started on free ports with temporary
storage, each process killable with SIGKILL and restartable, both servers too, under settings
whose deadlines outlast a restart (`SETTINGS_ENV`); and waiting for the API to be ready.

With `nats_nodes=3` NATS is a three-node JetStream cluster (`infra.runtime.nats_cluster`)
whose streams keep three replicas, and `nats_node_outage` kills one node at a time (a stream's
leader, or any node) and brings it back once it has been down a while.

With `redis_sentinel`, Redis is a primary, a replica and three sentinels
(`infra.runtime.redis_sentinel`), and `redis_primary_outage` SIGKILLs whichever server is the
primary, waits for the sentinels to promote the other, and brings the killed one back as its
replica."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.chaos_ingest import wait_job
from client import RagbusClient
from infra.runtime.nats_cluster import (
    NatsCluster,
    stream_leader,
    streams_current,
    until_streams_current,
)
from infra.runtime.redis_sentinel import RedisSentinelSet
from infra.runtime.services import LocalService, free_port, start_nats, start_redis

ROLES: dict[str, tuple[list[str], int]] = {
    # The API with a saga beside it, as `ragbus up` runs them: its questions take their first
    # step in that process (`api.submission`), so a kill there can fall between that step's
    # commit and its publish.
    "api": (["api", "--orchestrator"], 1),
    "orchestrator": (["orchestrator"], 2),
    # Two of every role that can have two: a kill then takes one process of a role, never the
    # role. The embedded stores belong to one process, so that role has one; it keeps the
    # conversations' memories too (`memory`: a session's question searches them, and waits
    # out its search deadline where no memory worker answers).
    "classify": (["worker", "classify"], 2),
    "stores": (["worker", "search", "fuse", "tool", "ingest", "memory"], 1),
    "answer": (["worker", "generate", "critic"], 2),
}
SETTINGS_ENV = {
    # A killed worker is back within seconds, but loading its models on two busy cores can
    # take a while: deadlines that outlast a restart, so that a kill delays and degrades.
    "RAGBUS_REQUEST_TIMEOUT_S": "90",
    "RAGBUS_CLASSIFY_TIMEOUT_S": "30",
    "RAGBUS_SEARCH_TIMEOUT_S": "30",
    "RAGBUS_FUSE_TIMEOUT_S": "30",
    "RAGBUS_GENERATE_TIMEOUT_S": "45",
    "RAGBUS_CRITIC_TIMEOUT_S": "30",
    "RAGBUS_TOOL_TIMEOUT_S": "30",
    "RAGBUS_ACK_WAIT_S": "6",
    "RAGBUS_RETRY_DELAY_S": "0.5",
    "RAGBUS_SWEEP_INTERVAL_S": "30",
    "RAGBUS_LOG_LEVEL": "WARNING",
    "RAGBUS_START_SERVICES": "false",
    "RAGBUS_UP_PROCESSES": "1",
}
CLUSTER_SETTINGS_ENV = {
    # Beside three nats-server nodes on the same cores, the store-owning process takes up to a
    # minute to load its models after a kill (the first 600 s run on a cluster timed out 10 of
    # 767 requests in fusion at 30 s, each while that process was reloading).
    "RAGBUS_REQUEST_TIMEOUT_S": "110",
    "RAGBUS_SEARCH_TIMEOUT_S": "60",
    "RAGBUS_FUSE_TIMEOUT_S": "60",
    "RAGBUS_GENERATE_TIMEOUT_S": "60",
}
READY_TIMEOUT_S = 240.0
SAMPLE = Path(__file__).parent / "sample"


@dataclass
class Role:
    name: str
    args: list[str]
    processes: list[subprocess.Popen[bytes] | None]


class Cluster:
    """The services and the role processes, each killable and restartable."""

    def __init__(
        self,
        root: Path,
        nats_nodes: int = 1,
        roles: dict[str, tuple[list[str], int]] | None = None,
        env: dict[str, str] | None = None,
        *,
        redis_sentinel: bool = False,
    ) -> None:
        self.root = root
        self.nats_port, self.redis_port, self.api_port = free_port(), free_port(), free_port()
        self.nats: LocalService | None = None
        self.nats_cluster = NatsCluster(root / "nats", nats_nodes) if nats_nodes > 1 else None
        self.redis: LocalService | None = None
        self.sentinels = RedisSentinelSet.create(root / "redis") if redis_sentinel else None
        self.primary_kills = 0
        self.failover_s: list[float] = []
        """Seconds from a primary's SIGKILL until the sentinels named another."""
        self.roles = {
            name: Role(name, args, [None] * n) for name, (args, n) in (roles or ROLES).items()
        }
        self.node_kills: Counter[str] = Counter()
        self.crash_restarts: Counter[str] = Counter()
        self.node_outages_skipped = 0
        self._killed: set[tuple[str, int]] = set()
        self._outage = asyncio.Lock()
        nats_env = (
            {
                **CLUSTER_SETTINGS_ENV,
                "RAGBUS_NATS_URL": self.nats_cluster.url,
                "RAGBUS_STREAM_REPLICAS": str(min(3, nats_nodes)),
            }
            if self.nats_cluster is not None
            else {"RAGBUS_NATS_URL": f"nats://127.0.0.1:{self.nats_port}"}
        )
        self.env = {
            **os.environ,
            **SETTINGS_ENV,
            **nats_env,
            # without its password until `start_services` has started it
            "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "RAGBUS_DATA_DIR": str(root / "data"),
            "RAGBUS_API_PORT": str(self.api_port),
            "RAGBUS_API_TOKEN": "",
            # every role process shares the machine's cores: each sizes its pools to its share
            "RAGBUS_HOST_PROCESSES": str(sum(len(role.processes) for role in self.roles.values())),
            **(env or {}),
        }
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.kills: Counter[str] = Counter()
        self._logs = (root / "roles.log").open("ab")

    def start_services(self) -> None:
        if self.nats_cluster is not None:
            self.nats_cluster.start()
        else:
            self.nats = start_nats(self.nats_port, self.root / "nats")
        if self.sentinels is not None:
            self.sentinels.start()
            self.env["RAGBUS_REDIS_URL"] = self.sentinels.url
            return
        self.redis = start_redis(self.redis_port, self.root / "redis", persistent=True)
        # its URL carries the password made for its data directory (the same after a restart)
        self.env["RAGBUS_REDIS_URL"] = self.redis.url

    async def redis_primary_outage(self, down_s: float = 5.0) -> str | None:
        """SIGKILL the Redis primary, wait until the sentinels promote the replica, keep the
        killed server down for `down_s`, start it again, and wait until it follows the new
        primary: one server down at a time. The killed server's name, or None when the set
        had not settled since the last outage (nothing killed)."""
        sentinels = self.sentinels
        assert sentinels is not None, "a primary outage needs redis_sentinel"
        if not await asyncio.to_thread(sentinels.settled):
            return None
        primary = await asyncio.to_thread(sentinels.primary)
        assert primary is not None
        killed_at = time.monotonic()
        await asyncio.to_thread(sentinels.kill, primary.name)
        self.primary_kills += 1
        while time.monotonic() - killed_at < 60:
            now = await asyncio.to_thread(sentinels.primary)
            if now is not None and now.name != primary.name:
                self.failover_s.append(round(time.monotonic() - killed_at, 2))
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(sentinels.restart, primary.name)
        await asyncio.to_thread(sentinels.until_settled, 120.0)
        return primary.name

    async def nats_node_outage(self, stream: str | None = None, down_s: float = 5.0) -> str | None:
        """SIGKILL one NATS node (the leader of `stream` when given, else any node), keep it
        down for `down_s`, start it again, and wait until every stream is caught up on all its
        replicas: one node at a time, so no stream ever loses its quorum. The node's name, or
        None when the streams were not caught up yet and no node was killed."""
        assert self.nats_cluster is not None, "a node outage needs nats_nodes > 1"
        cluster = self.nats_cluster
        async with self._outage:
            if not await streams_current(cluster.url):
                # a node is still catching up: another loss now could cost a stream its quorum
                self.node_outages_skipped += 1
                return None
            name = await stream_leader(cluster.url, stream) if stream else None
            name = name or random.choice([node.name for node in cluster.nodes])
            await asyncio.to_thread(cluster.kill, name)
            self.node_kills["leader" if stream else "any"] += 1
            await asyncio.sleep(down_s)
            await asyncio.to_thread(cluster.restart, name)
            await until_streams_current(cluster.url, timeout_s=120.0)
            return name

    def restart_service(self, which: str) -> None:
        """SIGKILL nats-server or redis-server and start it again on its port and storage."""
        service = self.nats if which == "nats" else self.redis
        assert service is not None
        os.kill(service.process.pid, signal.SIGKILL)
        service.process.wait(10)
        time.sleep(1.0)
        if which == "nats":
            self.nats = start_nats(self.nats_port, self.root / "nats")
        else:
            self.redis = start_redis(self.redis_port, self.root / "redis", persistent=True)

    def spawn(self, role: Role, index: int) -> None:
        self._killed.discard((role.name, index))
        role.processes[index] = subprocess.Popen(
            [sys.executable, "-m", "cli", *role.args],
            env=self.env,
            stdout=self._logs,
            stderr=self._logs,
        )

    def start_roles(self) -> None:
        for role in self.roles.values():
            for index in range(len(role.processes)):
                self.spawn(role, index)

    def kill(self, name: str) -> int | None:
        """SIGKILL one live process of the role; its index, to restart, or None."""
        role = self.roles[name]
        live = [i for i, p in enumerate(role.processes) if p is not None and p.poll() is None]
        if len(live) < len(role.processes) or not live:
            return None  # a process of this role is already down
        index = random.choice(live)
        process = role.processes[index]
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        self._killed.add((name, index))
        self.kills[name] += 1
        return index

    def revive_crashed(self) -> None:
        """Start again a process that exited without being killed (one that could not start
        while a service was down, say), as a supervisor would; counted by role."""
        for role in self.roles.values():
            for index, process in enumerate(role.processes):
                crashed = process is not None and process.poll() is not None
                if crashed and (role.name, index) not in self._killed:
                    self.crash_restarts[role.name] += 1
                    self.spawn(role, index)

    def revive_all(self) -> None:
        for role in self.roles.values():
            for index, process in enumerate(role.processes):
                if process is None or process.poll() is not None:
                    self.spawn(role, index)

    def stop(self) -> None:
        for role in self.roles.values():
            for process in role.processes:
                if process is not None and process.poll() is None:
                    process.terminate()
        for role in self.roles.values():
            for process in role.processes:
                if process is not None:
                    try:
                        process.wait(20)
                    except subprocess.TimeoutExpired:
                        process.kill()
        for service in (self.nats, self.redis):
            if service is not None:
                service.stop()
        if self.sentinels is not None:
            self.sentinels.stop()
        if self.nats_cluster is not None:
            self.nats_cluster.stop()
        self._logs.close()


async def ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=3) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{url}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"the cluster was not ready within {timeout_s:g} s")


async def boot(cluster: Cluster, seed_timeout_s: float) -> None:
    """Start the services, train the intent model, start every role, wait for the API, and
    ingest the sample corpus (`bench/sample`) within `seed_timeout_s`."""
    cluster.start_services()
    await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cli", "train-intent"],
        env=cluster.env,
        check=True,
        capture_output=True,
    )
    cluster.start_roles()
    await ready(cluster.url, READY_TIMEOUT_S)
    async with RagbusClient(cluster.url, timeout=60) as client:
        seeded = await client.ingest(
            {"id": p.stem, "title": p.stem, "text": p.read_text(encoding="utf-8")}
            for p in sorted(SAMPLE.glob("*.md"))
        )
    await wait_job(cluster.url, seeded["job_id"], seed_timeout_s)
