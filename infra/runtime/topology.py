"""The bus's topology on the server: its streams, its durable consumers and the files' object
store, declared explicitly at start-up (idempotently, by every process), and how a subscriber
binds to a declared consumer.

Declared explicitly because FastStream's implicit durables keep their first config forever,
and nats-server 2.9 silently ignores `filter_subjects`, so each consumer gets exactly one
`filter_subject`.

The query path's consumers are push consumers with a delivery group (every replica of a role
joins the group, and the server spreads the messages among them): a message arrives as soon
as it is stored, with no fetch request and no poll timeout in between (in a ping-pong probe,
FastStream's pull subscriber cost about twice its push subscriber per message). Ingestion
keeps a pull consumer (`ConsumerSpec.pull`): its messages are slow, and a process should
hold only a few of them. Each subscriber decodes its body once, from bytes straight to the
contract model (`json_decoder`), inside FastStream's middleware chain, so a malformed body
still reaches the error policy and the dead letters.

Publishing is `infra.runtime.bus`'s; a declaration waits out a cluster electing its leaders
with the bus's own retry (`until_jetstream_answers`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from faststream.message import StreamMessage
from faststream.nats import JStream, PullSub
from nats.js import JetStreamContext, api
from nats.js.object_store import ObjectStore
from pydantic import TypeAdapter

from contracts import subjects as sj
from contracts.enums import Channel, Step
from infra.logging import get_logger
from infra.runtime.bus import until_jetstream_answers
from infra.settings import Settings

log = get_logger(__name__)


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: list[str]
    work_queue: bool
    max_age_s: float | None = None


def stream_specs(settings: Settings) -> list[StreamSpec]:
    return [
        StreamSpec(sj.STREAM_QUERIES, ["rag.query.>"], work_queue=True),
        StreamSpec(sj.STREAM_CMD, ["rag.cmd.>"], work_queue=True),
        StreamSpec(sj.STREAM_RES, ["rag.res.>"], work_queue=True),
        StreamSpec(
            sj.STREAM_EVENTS,
            ["rag.events.>"],
            work_queue=False,
            max_age_s=settings.events_max_age_s,
        ),
        # files to parse (`rag.ingest.parse.<job>`) and documents to index, one work queue
        StreamSpec(
            sj.STREAM_INGEST,
            [f"{sj.INGEST_DOCS_PREFIX}.>", f"{sj.INGEST_PARSE_PREFIX}.>"],
            work_queue=True,
        ),
        StreamSpec(
            sj.STREAM_INGEST_EVENTS,
            [f"{sj.INGEST_EVENTS_PREFIX}.>"],
            work_queue=False,
            max_age_s=7 * 86_400,
        ),
        StreamSpec(sj.STREAM_DLQ, ["rag.dlq.>"], work_queue=False, max_age_s=14 * 86_400),
        # nats-server's own word that it stopped delivering a message nobody acknowledged
        # (`infra.runtime.dead_letters`): kept, so an orchestrator that was down still acts on it.
        StreamSpec(
            sj.STREAM_ADVISORIES,
            [sj.MAX_DELIVERIES_ADVISORIES],
            work_queue=True,
            max_age_s=14 * 86_400,
        ),
    ]


@dataclass(frozen=True)
class ConsumerSpec:
    durable: str
    stream: str
    filter_subject: str
    pull: bool = False
    """A pull consumer: each process fetches `worker_concurrency` messages at a time. For bulk
    work whose messages are slow (ingestion): a push consumer hands a process every message up
    to `max_ack_pending`, and a killed process then spends a delivery of each of them."""
    inactive_s: float | None = None
    """Removed by the server once no one has used it for this long (None: kept)."""


def step_consumer(step: Step, channel: Channel | None = None) -> ConsumerSpec:
    name = f"worker-{step.value}" + (f"-{channel.value}" if channel else "")
    return ConsumerSpec(name.replace("_", "-"), sj.STREAM_CMD, sj.cmd_subject(step, channel))


ORCHESTRATOR_QUERIES = ConsumerSpec("orchestrator-queries", sj.STREAM_QUERIES, "rag.query.>")
ORCHESTRATOR_RESULTS = ConsumerSpec("orchestrator-results", sj.STREAM_RES, "rag.res.>")
INGEST_WORKER = ConsumerSpec(
    "worker-ingest", sj.STREAM_INGEST, f"{sj.INGEST_DOCS_PREFIX}.>", pull=True
)
PARSE_WORKER = ConsumerSpec(
    "worker-parse", sj.STREAM_INGEST, f"{sj.INGEST_PARSE_PREFIX}.*", pull=True
)
"""Files to parse sent by an earlier release (`rag.ingest.parse.<job>`, in no tenant's lane);
every parse worker waits on it, so it also tells that one is there. A parse may run for up to
`RAGBUS_PARSE_TIMEOUT_S`, well past the ack wait: the error policy's heartbeat
(`worker_runtime.Heartbeat`) tells JetStream every half ack wait that the message is still
being worked on, so only a dead process gets its files redelivered."""
PARSE_LANE_IDLE_S = 3600.0
"""A tenant's parse lane (its durable consumer) that no worker has pulled from for this long is
removed by the server; the next file of the tenant makes it again."""


def parse_lane_consumer(tenant: str) -> ConsumerSpec:
    """A tenant's lane of files to parse (`rag.ingest.parse.<tenant>.>`): each tenant's own
    FIFO, so that a tenant's flood never holds another tenant's file back
    (`infra.runtime.tenant_lanes`). Its subjects never overlap another lane's, nor
    `PARSE_WORKER`'s, as a work-queue stream requires."""
    return ConsumerSpec(
        f"worker-parse-{tenant}",
        sj.STREAM_INGEST,
        f"{sj.INGEST_PARSE_PREFIX}.{tenant}.>",
        pull=True,
        inactive_s=PARSE_LANE_IDLE_S,
    )


SOURCES_WORKER = ConsumerSpec("worker-sources", sj.STREAM_CMD, sj.SOURCES_SUBJECT, pull=True)
"""Syncs of sources (`workers.sources`): a pull consumer, as a sync may run for minutes (the
error policy's heartbeat keeps it from being redelivered while its worker lives)."""

ORCHESTRATOR_ADVISORIES = ConsumerSpec(
    "orchestrator-advisories", sj.STREAM_ADVISORIES, sj.MAX_DELIVERIES_ADVISORIES
)


def all_consumers() -> list[ConsumerSpec]:
    specs = [
        ORCHESTRATOR_QUERIES,
        ORCHESTRATOR_RESULTS,
        ORCHESTRATOR_ADVISORIES,
        INGEST_WORKER,
        PARSE_WORKER,
        SOURCES_WORKER,
    ]
    for step in Step:
        if step is Step.SEARCH:
            specs.extend(step_consumer(step, channel) for channel in Channel)
        else:
            specs.append(step_consumer(step))
    return specs


def stream_config(spec: StreamSpec, settings: Settings) -> api.StreamConfig:
    """A stream as the settings place it: `RAGBUS_STREAM_REPLICAS` copies (its consumers
    inherit the count), on nodes carrying `RAGBUS_STREAM_PLACEMENT_TAGS` when set."""
    tags = settings.placement_tags
    return api.StreamConfig(
        name=spec.name,
        subjects=spec.subjects,
        retention=api.RetentionPolicy.WORK_QUEUE if spec.work_queue else api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        max_age=spec.max_age_s,
        duplicate_window=120.0,
        num_replicas=settings.stream_replicas,
        placement=api.Placement(tags=tags) if tags else None,
    )


async def declare_streams(js: JetStreamContext, settings: Settings) -> None:
    """Every stream (one that exists with another config, fewer subjects say, is brought in
    line), and the object store the uploaded files wait in."""
    for spec in stream_specs(settings):
        config = stream_config(spec, settings)
        try:
            await js.add_stream(config)
        except nats.js.errors.BadRequestError:
            # Exists with another config: bring it in line rather than fail start-up.
            await js.update_stream(config)
    await declare_files_bucket(js, settings)


def files_bucket_config(settings: Settings) -> api.ObjectStoreConfig:
    """`RAG_FILES`, placed and replicated like the streams."""
    tags = settings.placement_tags
    return api.ObjectStoreConfig(
        bucket=sj.FILES_BUCKET,
        description="ragbus: uploaded files, kept as the documents' originals",
        storage=api.StorageType.FILE,
        replicas=settings.stream_replicas,
        placement=api.Placement(tags=tags) if tags else None,
    )


async def declare_files_bucket(js: JetStreamContext, settings: Settings) -> ObjectStore:
    """The files' object store, made when missing. One made with another placement (before
    `RAGBUS_STREAM_REPLICAS` changed) is kept as it is: its files are the originals."""
    try:
        return await js.object_store(sj.FILES_BUCKET)
    except nats.js.errors.BucketNotFoundError:
        pass
    try:
        return await js.create_object_store(sj.FILES_BUCKET, files_bucket_config(settings))
    except nats.js.errors.BadRequestError as exc:  # made meanwhile, by another process
        log.warning("files_bucket_kept_existing_config", error=str(exc))
        return await js.object_store(sj.FILES_BUCKET)


def deliver_subject(spec: ConsumerSpec) -> str:
    """Where the server pushes a consumer's messages; no tenant may subscribe to it."""
    return f"_RAGBUS_DELIVER.{spec.durable}"


def consumer_config(spec: ConsumerSpec, settings: Settings) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=spec.durable,
        name=spec.durable,
        filter_subject=spec.filter_subject,
        deliver_subject=None if spec.pull else deliver_subject(spec),
        deliver_group=None if spec.pull else spec.durable,
        ack_policy=api.AckPolicy.EXPLICIT,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        max_ack_pending=1000 if spec.pull else settings.max_ack_pending,
        inactive_threshold=spec.inactive_s,
    )


async def declare_consumer(js: JetStreamContext, spec: ConsumerSpec, settings: Settings) -> None:
    """Create the durable consumer. One of the other kind (a pull consumer an older release
    left where a push one is declared now), or on other subjects, is replaced: the stream keeps
    its messages, and the new consumer delivers them."""
    config = consumer_config(spec, settings)
    try:
        await js.add_consumer(spec.stream, config)
        return
    except nats.js.errors.BadRequestError as exc:
        error = exc
    try:
        existing = await js.consumer_info(spec.stream, spec.durable)
    except nats.js.errors.NotFoundError:
        existing = None
    if existing is not None and (
        bool(existing.config.deliver_subject) == spec.pull
        or existing.config.filter_subject != spec.filter_subject
    ):
        # an earlier release's consumer (a pull one where a push one is declared now, or
        # `worker-parse` on every parse subject, which would overlap the tenants' lanes)
        log.warning(
            "consumer_replaced",
            consumer=spec.durable,
            pull=spec.pull,
            filter_subject=spec.filter_subject,
            was=existing.config.filter_subject,
        )
        await js.delete_consumer(spec.stream, spec.durable)
        await js.add_consumer(spec.stream, config)
        return
    log.warning("consumer_kept_existing_config", consumer=spec.durable, error=str(error))


TOPOLOGY_WAIT_S = 120.0


async def declare_topology(
    js: JetStreamContext, settings: Settings, wait_s: float = TOPOLOGY_WAIT_S
) -> None:
    """Streams and every durable consumer; safe to run from every process at start-up. A
    cluster that just lost a node answers the JetStream API with nothing or "unavailable"
    until it has elected new leaders: start-up waits that out (up to `wait_s`, backing off
    from 0.5 s to 5 s) instead of exiting."""

    async def declare() -> None:
        await declare_streams(js, settings)
        for spec in all_consumers():
            await declare_consumer(js, spec, settings)

    await until_jetstream_answers(
        declare,
        wait_s,
        first_delay_s=0.5,
        max_delay_s=5.0,
        event="jetstream_unavailable",
        level=logging.WARNING,
    )


def json_decoder(model: Any) -> Callable[[StreamMessage[Any]], Awaitable[Any]]:
    """A FastStream decoder: the body's bytes validated straight into `model` (a contract
    class or a union of them), in one pass. Async on purpose: FastStream runs a sync decoder
    in a thread pool."""
    adapter: TypeAdapter[Any] = TypeAdapter(model)

    async def decode(msg: StreamMessage[Any]) -> Any:
        return adapter.validate_json(msg.body)

    return decode


def subscriber_kwargs(
    spec: ConsumerSpec, settings: Settings, model: Any, concurrency: int | None = None
) -> dict[str, Any]:
    """Arguments that bind a FastStream subscriber to a declared durable consumer, its
    messages decoded as `model`, `concurrency` of them at once (`RAGBUS_WORKER_CONCURRENCY`
    unless the worker can do fewer). A pull consumer fetches no more than that: a message
    fetched before a handler is free for it gets no heartbeat while it waits, and past the
    ack wait it is delivered again."""
    workers = concurrency or settings.worker_concurrency
    common = {
        "subject": spec.filter_subject,
        "stream": JStream(spec.stream, declare=False),
        "max_workers": workers,
        "decoder": json_decoder(model),
    }
    if spec.pull:
        pull = PullSub(batch_size=workers, timeout=1.0)
        return {**common, "durable": spec.durable, "pull_sub": pull}
    # nats-py binds a queue subscription to the durable of its name
    return {**common, "queue": spec.durable}
