"""Orphans in the work queues: messages still stored below the ack floor of the consumer that
owns their subject, so nobody will ever deliver them again.

A chaos run found three in `RAG_CMD` after nats-server was killed with SIGKILL: the consumers
had acknowledged past them, yet the stream kept them. In a work-queue stream the consumer's
ack state and the stream's removal of the acknowledged message are written separately, and
nats-server 2.9 (what Debian ships, and what ragbus starts) does not reconcile the two when it
recovers; its later releases fixed several such cases (nats-server issues 5148 and 6159, pull
request 7845). Whatever the cause, such a message is dead weight that misleads every count,
so the orchestrator sweeps them now and then: it reports each one and deletes it.
"""

from __future__ import annotations

import nats.js.errors
from nats.js import JetStreamContext

from infra.logging import get_logger
from infra.metrics import ORPHANS_SWEPT
from infra.runtime.dead_letters import WORK_QUEUES

log = get_logger(__name__)

MAX_PER_SWEEP = 10_000


async def sweep_orphans(
    js: JetStreamContext, streams: frozenset[str] | set[str] = WORK_QUEUES
) -> dict[str, int]:
    """Delete every message below its consumer's ack floor in `streams`; how many, by stream."""
    swept: dict[str, int] = {}
    for stream in sorted(streams):
        try:
            info = await js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            continue
        if not info.state.messages:
            continue
        for consumer in await js.consumers_info(stream):
            floor = consumer.ack_floor.stream_seq if consumer.ack_floor else 0
            subject = consumer.config.filter_subject or ">"
            seq = info.state.first_seq
            while floor and seq <= floor and swept.get(stream, 0) < MAX_PER_SWEEP:
                try:
                    stored = await js.get_msg(stream, seq, subject=subject, next=True)
                except nats.js.errors.NotFoundError:
                    break
                if stored.seq is None or stored.seq > floor:
                    break
                log.warning(
                    "orphan_swept",
                    stream=stream,
                    seq=stored.seq,
                    subject=stored.subject,
                    consumer=consumer.name,
                    ack_floor=floor,
                )
                await js.delete_msg(stream, stored.seq)
                ORPHANS_SWEPT.labels(stream=stream).inc()
                swept[stream] = swept.get(stream, 0) + 1
                seq = stored.seq + 1
    return swept
