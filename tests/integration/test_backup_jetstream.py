"""A JetStream stream's snapshot and restore (`infra.backup.jetstream`), on real servers: a
stream with messages and a durable consumer partway through is snapshotted while it is
published to, and restored into a fresh nats-server with every message at its sequence, its
headers, and the consumer where it was."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from infra.backup.jetstream import SnapshotError, restore_stream, snapshot_stream, stream_names
from infra.runtime.services import LocalService, free_port, start_nats

pytestmark = pytest.mark.integration


async def test_a_stream_restores_with_its_sequences_headers_and_consumer(
    own_nats: LocalService, tmp_path: Path
) -> None:
    nc = await nats.connect(own_nats.url)
    fresh = start_nats(free_port(), tmp_path / "fresh")
    restored_nc = await nats.connect(fresh.url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"]))
        for n in range(300):
            await js.publish(
                f"orders.{n % 3}", f"order {n}".encode() * 50, headers={"Nats-Msg-Id": f"o-{n}"}
            )
        await js.delete_msg("ORDERS", 7)  # a gap, kept as a gap
        await js.add_consumer(
            "ORDERS", ConsumerConfig(durable_name="billing", ack_policy="explicit")
        )
        sub = await js.pull_subscribe_bind("billing", "ORDERS")
        for msg in await sub.fetch(40):
            await msg.ack()

        async def more() -> None:  # publishing goes on while the snapshot is taken
            for n in range(300, 400):
                await js.publish(f"orders.{n % 3}", b"late")

        publishing = asyncio.create_task(more())
        snapshot = await snapshot_stream(nc, "ORDERS", tmp_path / "backup" / "ORDERS.tar.s2")
        await publishing
        assert await stream_names(nc) == ["ORDERS"]
        assert snapshot.bytes == (tmp_path / "backup" / "ORDERS.tar.s2").stat().st_size
        data = (tmp_path / "backup" / "ORDERS.tar.s2").read_bytes()
        assert snapshot.sha256 == hashlib.sha256(data).hexdigest()
        assert (tmp_path / "backup" / "ORDERS.tar.s2").stat().st_mode & 0o777 == 0o600
        held = int(snapshot.state["messages"])
        assert held >= 299

        info = await restore_stream(restored_nc, snapshot.config, snapshot.state, snapshot.path)
        # the answer's state is the stream's as the snapshot began: a message published as
        # it was being written can be in it too
        assert held <= info["state"]["messages"] <= 399
        rjs = restored_nc.jetstream()
        first = await rjs.get_msg("ORDERS", 1)
        assert first.data == b"order 0" * 50 and first.headers == {"Nats-Msg-Id": "o-0"}
        with pytest.raises(nats.js.errors.NotFoundError):
            await rjs.get_msg("ORDERS", 7)
        assert (await rjs.get_msg("ORDERS", 300)).data == b"order 299" * 50
        consumer = await rjs.consumer_info("ORDERS", "billing")
        assert consumer.ack_floor.stream_seq == 41  # 40 acked, past the deleted 7th
        resumed = await rjs.pull_subscribe_bind("billing", "ORDERS")
        (next_msg,) = await resumed.fetch(1)
        assert next_msg.metadata.sequence.stream == 42

        # the same stream again is refused, in a sentence
        with pytest.raises(SnapshotError, match="ORDERS"):
            await restore_stream(restored_nc, snapshot.config, snapshot.state, snapshot.path)
    finally:
        await restored_nc.close()
        await nc.close()
        fresh.stop()
