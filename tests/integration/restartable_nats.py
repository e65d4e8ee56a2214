"""A nats-server that a test kills with SIGKILL and starts again on the same port and storage,
with a client that reconnects to it and the project's streams declared; and a publish that
waits for JetStream to answer again after the restart."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from infra.runtime.services import LocalService, free_port, start_nats
from infra.runtime.topology import declare_streams
from infra.settings import Settings


class RestartableNats:
    def __init__(self, store: Path) -> None:
        self.port, self.store = free_port(), store
        self.server: LocalService = start_nats(self.port, store)
        self.nc: Client | None = None

    @property
    def js(self) -> JetStreamContext:
        assert self.nc is not None
        return self.nc.jetstream()

    def kill_and_restart(self) -> None:
        os.kill(self.server.process.pid, signal.SIGKILL)
        self.server.process.wait(10)
        self.server = start_nats(self.port, self.store)


@asynccontextmanager
async def restartable_nats(store: Path, *, streams: bool = True) -> AsyncIterator[RestartableNats]:
    """The server, its reconnecting client, and (unless `streams` is False) the streams."""
    nats_server = RestartableNats(store)
    try:
        nats_server.nc = await nats.connect(
            nats_server.server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2
        )
        if streams:
            await declare_streams(nats_server.js, Settings(nats_url=nats_server.server.url))
        yield nats_server
    finally:
        if nats_server.nc is not None:
            await nats_server.nc.close()
        nats_server.server.stop()


async def publish_when_ready(js: JetStreamContext, subject: str, stream: str, body: bytes) -> int:
    """Publish once JetStream answers (a moment after a restarted server accepts clients); the
    message's stream sequence."""
    for _ in range(50):
        try:
            return (await js.publish(subject, body, stream=stream, timeout=1.0)).seq
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            await asyncio.sleep(0.2)
    raise AssertionError("JetStream did not come back")
