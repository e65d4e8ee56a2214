"""A JetStream cluster of local `nats-server` nodes on loopback ports, for the tests, the
chaos run and a developer's machine: each node its own process and storage, routed to the
others, every node killable (SIGKILL) and restartable on its ports and storage.

A production cluster is three nodes on three machines (docker-compose's `cluster` profile,
docs/cluster.md); ragbus talks to either the same way: `RAGBUS_NATS_URL` lists the nodes and
`RAGBUS_STREAM_REPLICAS=3` keeps every stream on all three.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nats
import nats.errors
import nats.js.errors

from infra.logging import get_logger
from infra.runtime.services import LocalService, ServiceError, free_port, start_nats

if TYPE_CHECKING:
    from infra.tenancy.trust import Trust

log = get_logger(__name__)

CLUSTER_NAME = "ragbus"


@dataclass
class NatsNode:
    name: str
    client_port: int
    route_port: int
    store_dir: Path
    service: LocalService | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    @property
    def alive(self) -> bool:
        return self.service is not None and self.service.process.poll() is None


@dataclass
class NatsCluster:
    """`size` nodes named n1…nN under `root`; `url` is what RAGBUS_NATS_URL takes. With
    `trust`, every node runs in operator mode (`tenants`), its accounts pushed to any node
    reaching all of them through the resolver."""

    root: Path
    size: int = 3
    nodes: list[NatsNode] = field(default_factory=list)
    trust: Trust | None = None

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = [
                NatsNode(f"n{i + 1}", free_port(), free_port(), self.root / f"n{i + 1}")
                for i in range(self.size)
            ]

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> NatsNode:
        return next(node for node in self.nodes if node.name == name)

    def _config(self, node: NatsNode) -> str:
        routes = ", ".join(
            f"nats://127.0.0.1:{other.route_port}" for other in self.nodes if other is not node
        )
        return (
            f"server_name: {node.name}\n"
            f"cluster {{\n  name: {CLUSTER_NAME}\n  host: 127.0.0.1\n"
            f"  port: {node.route_port}\n  routes: [{routes}]\n}}\n"
        )

    def start_node(self, node: NatsNode) -> None:
        node.service = start_nats(
            node.client_port,
            node.store_dir,
            extra_config=self._config(node),
            name=f"nats-server {node.name}",
            trust=self.trust,
        )

    def start(self, timeout_s: float = 30.0) -> NatsCluster:
        """Start every node and wait until JetStream answers (a meta leader is elected)."""
        try:
            for node in self.nodes:
                self.start_node(node)
            creds = str(self.trust.service_creds) if self.trust is not None else None
            wait_for_jetstream(self.url, timeout_s, creds=creds)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, name: str) -> None:
        """SIGKILL one node: no goodbye to its routes or its clients."""
        node = self.node(name)
        if node.service is not None and node.alive:
            os.kill(node.service.process.pid, signal.SIGKILL)
            node.service.process.wait(10)
        log.info("nats_node_killed", node=name)

    def restart(self, name: str) -> None:
        """Start a killed node again on its ports and storage: it rejoins and catches up."""
        node = self.node(name)
        if not node.alive:
            self.start_node(node)

    def stop(self) -> None:
        for node in self.nodes:
            if node.service is not None:
                node.service.stop()


def _creds(creds: str | None) -> dict[str, str]:
    return {"user_credentials": creds} if creds else {}


async def _jetstream_answers(url: str, creds: str | None = None) -> bool:
    try:
        nc = await nats.connect(
            url.split(","), connect_timeout=1, allow_reconnect=False, **_creds(creds)
        )
    except (OSError, nats.errors.Error):
        return False
    try:
        await nc.jetstream(timeout=1).account_info()
        return True
    except (nats.errors.Error, nats.js.errors.Error):
        return False
    finally:
        await nc.close()


def wait_for_jetstream(url: str, timeout_s: float = 30.0, *, creds: str | None = None) -> None:
    """Block until JetStream answers an API call at `url` (a node list): on a cluster, once
    its nodes have routed to each other and elected a meta leader. Each probe runs its own
    event loop on a thread of its own, so a caller inside a running loop may call this too."""
    deadline = time.monotonic() + timeout_s
    with ThreadPoolExecutor(1, thread_name_prefix="jetstream-probe") as probe:
        while time.monotonic() < deadline:
            if probe.submit(asyncio.run, _jetstream_answers(url, creds)).result():
                return
            time.sleep(0.2)
    raise ServiceError(f"JetStream did not answer at {url} within {timeout_s:g} s")


async def stream_leader(url: str, stream: str) -> str | None:
    """The node that leads `stream` now: None while it has no leader, or while JetStream does
    not answer (a node that was just restarted, a leader election under way)."""
    try:
        nc = await nats.connect(url.split(","), connect_timeout=2, allow_reconnect=False)
    except (OSError, nats.errors.Error):
        return None
    try:
        info = await nc.jetstream(timeout=2).stream_info(stream)
        return info.cluster.leader if info.cluster is not None else None
    except (nats.errors.Error, nats.js.errors.Error):
        return None
    finally:
        await nc.close()


async def streams_behind(url: str) -> list[str]:
    """What keeps the streams from being current: a stream with no leader, a replica offline
    or behind (with its lag), or JetStream not answering. Empty when every stream is current."""
    try:
        nc = await nats.connect(url.split(","), connect_timeout=2, allow_reconnect=False)
    except (OSError, nats.errors.Error) as exc:
        return [f"no node answers: {exc!r}"]
    behind = []
    try:
        for info in await nc.jetstream(timeout=2).streams_info():
            cluster = info.cluster
            if cluster is None:
                continue
            if cluster.leader is None:
                behind.append(f"{info.config.name}: no leader")
            behind.extend(
                f"{info.config.name}: {peer.name} {'offline' if peer.offline else 'behind'}"
                f" (lag {peer.lag})"
                for peer in cluster.replicas or []
                if not peer.current or peer.offline
            )
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        behind.append(f"JetStream does not answer: {exc!r}")
    finally:
        await nc.close()
    return behind


async def streams_current(url: str) -> bool:
    """Every stream has a leader and every replica is online and caught up: the cluster can
    lose another node without a stream losing its quorum."""
    return not await streams_behind(url)


async def until_streams_current(url: str, timeout_s: float = 120.0) -> bool:
    """Wait until `streams_current`: a restarted node has caught up on every stream. False if
    it has not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await streams_current(url):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.5)
    return True
