"""What a message carries besides its body, on a real nats-server: the broker's dedupe id
and the content type, and no FastStream correlation id (the body says whose it is)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from contracts import subjects as sj
from contracts.enums import RequestStatus
from contracts.events import DoneData, DoneEvent
from infra.runtime.bus import Bus, create_broker
from infra.runtime.services import LocalService
from infra.runtime.topology import declare_streams
from infra.settings import Settings

pytestmark = pytest.mark.integration


async def test_a_published_event_carries_its_id_and_content_type_and_nothing_else(
    own_nats: LocalService, tmp_path: Path
) -> None:
    settings = Settings(nats_url=own_nats.url, start_services=False, data_dir=tmp_path / "d")
    broker = create_broker(settings)
    await broker.connect()
    tap = await nats.connect(own_nats.url)
    try:
        await declare_streams(broker.connection.jetstream(), settings)
        seen: asyncio.Queue[nats.aio.msg.Msg] = asyncio.Queue()
        event = DoneEvent(request_id="headers-1", data=DoneData(status=RequestStatus.COMPLETED))
        subject = sj.events_subject(event.tenant, event.request_id)
        await tap.subscribe(subject, cb=seen.put)
        await tap.flush()

        ack = await Bus(broker).publish(event, subject, sj.STREAM_EVENTS)

        msg = await asyncio.wait_for(seen.get(), 30)
        assert ack is not None and ack.stream == sj.STREAM_EVENTS
        assert msg.headers == {
            "content-type": "application/json",
            "Nats-Msg-Id": event.event_id,
            "Nats-Expected-Stream": sj.STREAM_EVENTS,
        }
        assert DoneEvent.model_validate_json(msg.data) == event
    finally:
        await tap.close()
        await broker.stop()
