"""The API's shared consumer of caller events (`api.event_hub.EventHub`) on a real nats-server:
a reader gets its subject's events in the stream's order and once each, whether they were stored
before the hub started, between the hub's start and the reader's, or after; it resumes after a
sequence; it ends on a finished request; and the hub follows again when its consumer is lost in
a nats-server restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.js import JetStreamContext

from api.event_hub import EventHub
from api.event_stream import each_event, request_messages
from contracts import subjects as sj
from infra.runtime.services import LocalService
from infra.runtime.topology import declare_streams
from infra.settings import Settings
from tests.integration.restartable_nats import publish_when_ready, restartable_nats

pytestmark = pytest.mark.integration


def _event(request_id: str, kind: str, n: int) -> bytes:
    return json.dumps({"type": kind, "request_id": request_id, "n": n}).encode()


async def _publish(js: JetStreamContext, request_id: str, kind: str, n: int) -> int:
    subject = sj.events_subject("default", request_id)
    return await publish_when_ready(js, subject, sj.STREAM_EVENTS, _event(request_id, kind, n))


@pytest.fixture
async def jetstream(nats_server: LocalService) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await declare_streams(js, Settings(nats_url=nats_server.url))
    yield js
    await nc.close()


async def _following(hub: EventHub) -> None:
    async with asyncio.timeout(10):
        await hub.wait_following()


def _count_reads(hub: EventHub) -> list[int]:
    """The stream sequences the hub's readers got from the stream one by one (not from its
    memory or its consumer)."""
    reads: list[int] = []
    read = hub._next

    async def counted(subject: str, from_seq: int) -> Any:
        raw = await read(subject, from_seq)
        reads.append(raw.seq or 0)
        return raw

    hub._next = counted  # type: ignore[method-assign]
    return reads


async def _until_done(events: Any, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with aclosing(events), asyncio.timeout(timeout_s):
        async for _, event in events:
            got.append(event)
    return got


async def test_a_reader_gets_its_events_in_order_once_each_wherever_they_were(
    jetstream: JetStreamContext,
) -> None:
    request, other = "hub-order", "hub-other"
    await _publish(jetstream, request, "phase", 0)  # before the hub started
    async with EventHub(jetstream, watch_s=0.5) as hub:
        await _following(hub)
        for n in (1, 2, 3):  # before the reader
            await _publish(jetstream, request, "phase", n)
            await _publish(jetstream, other, "phase", n)
        await asyncio.sleep(0.2)  # the hub has passed them on, to no reader of the request
        reads = _count_reads(hub)
        reader = each_event(request_messages(jetstream, request, reader=hub.messages))
        first = await anext(reader)

        async def rest() -> None:
            for n, kind in ((4, "phase"), (5, "answer"), (6, "done")):
                await _publish(jetstream, other, "phase", n)
                await _publish(jetstream, request, kind, n)

        publishing = asyncio.create_task(rest())
        got = [first[1], *await _until_done(reader)]
        await publishing
        assert hub._readers == {}  # the reader that ended is no longer handed anything

    assert [e["n"] for e in got] == [0, 1, 2, 3, 4, 5, 6]
    assert {e["request_id"] for e in got} == {request}
    seqs = [e["seq"] for e in got]
    assert seqs == sorted(set(seqs))
    # 0 from the stream (before the hub), 1 from the stream, which the hub's memory of the
    # subject starts at: 2 and 3 from that memory
    assert reads == [seqs[0], seqs[1]]


async def test_a_reader_resumes_after_the_sequence_it_was_given(
    jetstream: JetStreamContext,
) -> None:
    request = "hub-resume"
    seqs = [await _publish(jetstream, request, "phase", n) for n in range(3)]
    async with EventHub(jetstream) as hub:
        await _following(hub)
        reader = each_event(request_messages(jetstream, request, seqs[1], reader=hub.messages))
        await _publish(jetstream, request, "done", 3)
        got = await _until_done(reader)
    assert [e["n"] for e in got] == [2, 3]


async def test_a_finished_request_with_nothing_more_ends_its_reader(
    jetstream: JetStreamContext,
) -> None:
    request = "hub-finished"
    await _publish(jetstream, request, "phase", 0)

    async def finished() -> bool:
        return True

    async with EventHub(jetstream) as hub:
        await _following(hub)
        reader = hub.messages(
            sj.events_subject("default", request), is_finished=finished, idle_s=0.3
        )
        got = await _until_done(reader)
    assert [body["n"] for body in got] == [0]


async def test_until_the_hub_follows_a_reader_reads_alone(tmp_path: Path) -> None:
    """An API may start before the streams exist: its hub waits for them, its readers work."""
    async with restartable_nats(tmp_path / "nats", streams=False) as nats_server:
        js, request = nats_server.js, "hub-not-yet"
        async with EventHub(js, watch_s=60) as hub:
            await asyncio.sleep(0.2)  # its first look found no stream; the next is a minute away
            await declare_streams(js, Settings(nats_url=nats_server.server.url))
            await _publish(js, request, "phase", 0)
            assert not hub.following
            reader = each_event(request_messages(js, request, reader=hub.messages))
            await _publish(js, request, "done", 1)
            got = await _until_done(reader)
        assert [e["n"] for e in got] == [0, 1]


async def test_the_hub_follows_again_after_a_nats_server_restart(tmp_path: Path) -> None:
    """Its ordered consumer lived on the old server; the request is not finished, so no
    reader reads the stream on its own: only the hub can bring the events after the restart."""
    async with restartable_nats(tmp_path / "nats") as nats_server:
        js, request = nats_server.js, "hub-restart"

        async def running() -> bool:
            return False

        async with EventHub(js, watch_s=0.5) as hub:
            await _following(hub)
            events = each_event(
                request_messages(js, request, is_finished=running, reader=hub.messages)
            )
            await _publish(js, request, "phase", 0)
            got = [(await anext(events))[1]]

            nats_server.kill_and_restart()
            for n, kind in ((1, "phase"), (2, "done")):
                await _publish(js, request, kind, n)
            # nats-py makes a lost ordered consumer again only after two missed heartbeats
            # (10 s), and not at all when JetStream cannot answer then: the hub's own check
            # brings the events in about its `watch_s`
            got += await _until_done(events, timeout_s=8.0)
        assert [e["n"] for e in got] == [0, 1, 2]
