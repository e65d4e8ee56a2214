"""A reader of a request's events survives a nats-server restart: it delivers every event up to
the `done` the stream really holds, never a `done` of its own making while events are missing.

The restart is a real nats-server killed with SIGKILL and started again on the same port and
storage. The reader's ordered consumer lived on the old server, so after the restart it
delivers nothing; the request is finished, which used to end the stream there.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from api.event_stream import each_event, request_messages
from contracts import subjects as sj
from tests.integration.restartable_nats import publish_when_ready, restartable_nats

pytestmark = pytest.mark.integration

REQUEST = "restart-probe"


def _event(kind: str, n: int) -> bytes:
    return json.dumps({"type": kind, "request_id": REQUEST, "n": n}).encode()


async def test_the_reader_delivers_every_event_across_a_nats_server_restart(
    tmp_path: Path,
) -> None:
    async with restartable_nats(tmp_path / "nats") as nats_server:
        js = nats_server.js
        subject = sj.events_subject("default", REQUEST)
        for n in range(3):
            await js.publish(subject, _event("phase", n), stream=sj.STREAM_EVENTS)

        async def finished() -> bool:
            return True  # the saga already finished: only the stream says what is left

        got: list[dict[str, Any]] = []
        reader = each_event(request_messages(js, REQUEST, is_finished=finished, idle_s=1.0))
        async with aclosing(reader):
            for _ in range(3):
                got.append((await anext(reader))[1])

            nats_server.kill_and_restart()
            assert nats_server.nc is not None
            for _ in range(100):
                if nats_server.nc.is_connected:
                    break
                await asyncio.sleep(0.1)
            for n, kind in ((3, "token"), (4, "answer"), (5, "done")):
                await publish_when_ready(js, subject, sj.STREAM_EVENTS, _event(kind, n))

            async with asyncio.timeout(30):
                async for _, event in reader:
                    got.append(event)

        assert [e["n"] for e in got] == [0, 1, 2, 3, 4, 5]
        assert got[-1]["type"] == "done"
        assert all(isinstance(e["seq"], int) for e in got)
