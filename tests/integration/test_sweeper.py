"""The sweeper deletes messages stored below their consumer's ack floor, and only those.

A work-queue stream removes an acknowledged message by itself, so the state the sweeper is for
(seen after a nats-server SIGKILL) cannot be made on demand. A limits stream keeps acknowledged
messages: the same state, built on purpose, on a real nats-server.
"""

from __future__ import annotations

from pathlib import Path

import nats
import nats.js.errors
import pytest
from nats.js import api

from infra.runtime.services import free_port, start_nats
from infra.runtime.sweeper import sweep_orphans

pytestmark = pytest.mark.integration


async def test_messages_below_the_ack_floor_are_swept_and_the_rest_kept(tmp_path: Path) -> None:
    server = start_nats(free_port(), tmp_path / "nats")
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="PROBE", subjects=["probe.>"], storage=api.StorageType.FILE)
        await js.add_consumer(
            "PROBE",
            api.ConsumerConfig(
                durable_name="probe-a",
                filter_subject="probe.a",
                ack_policy=api.AckPolicy.EXPLICIT,
            ),
        )
        for subject in ("probe.a", "probe.a", "probe.b", "probe.a"):
            await js.publish(subject, b"{}", stream="PROBE")
        worker = await js.pull_subscribe_bind("probe-a", "PROBE")
        for msg in await worker.fetch(2, timeout=5):
            await msg.ack_sync()

        assert await sweep_orphans(js, {"PROBE"}) == {"PROBE": 2}

        for seq in (1, 2):
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.get_msg("PROBE", seq)
        assert (await js.get_msg("PROBE", 3)).subject == "probe.b", "another consumer's subject"
        (left,) = await worker.fetch(1, timeout=5)
        assert left.metadata.sequence.stream == 4, "the unacknowledged message is still served"
        assert await sweep_orphans(js, {"PROBE"}) == {}, "a second sweep finds nothing"
    finally:
        await nc.close()
        server.stop()
