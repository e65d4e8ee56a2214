"""Search worker: one durable consumer per document channel, one result per command (the
`memory` channel is `workers.memory`'s, beside the store it searches).

The subscriber looks its channel function up on `channels` at call time, so a test (or an
operator's patch) can replace one channel without rebuilding the router.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from faststream.nats import NatsRouter

from contracts.commands import SearchCommand
from contracts.enums import CHANNEL_PHASE, Channel, Step
from contracts.models import RetrievedChunk
from contracts.results import SearchResult
from infra.errors import PoisonMessage
from infra.logging import get_logger
from infra.runtime.bus import step_consumer, subscriber_kwargs
from infra.runtime.resources import Resources
from infra.runtime.worker_runtime import (
    ResultPublisher,
    phase,
    step_result_fields,
    step_router,
)
from workers.search import channels

log = get_logger(__name__)

SHOWN_QUERY_CHARS = 200
"""How much of the searched query a channel's phase event shows."""

ChannelSearch = Callable[[Resources, SearchCommand], Awaitable[channels.Found]]

CHANNEL_FUNCTIONS: dict[Channel, str] = {
    Channel.VECTOR: "search_vector",
    Channel.SPARSE: "search_sparse",
    Channel.GRAPH_LOCAL: "search_graph_local",
    Channel.GRAPH_GLOBAL: "search_graph_global",
}


def result_event_id(cmd: SearchCommand) -> str:
    """Derived from the command, so a redelivered command's second answer is dropped by the
    broker's duplicate window instead of reaching the orchestrator twice."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"ragbus/result/{cmd.event_id}").hex


def ranked(chunks: list[RetrievedChunk], channel: Channel) -> list[RetrievedChunk]:
    """1-based ranks, recorded under the channel's name for fusion; references only (fusion
    hydrates the chunks it keeps), so a store that answered with text does not ship it."""
    return [
        chunk.model_copy(
            update={"rank": rank, "channels": {channel.value: rank}, "text": "", "vectors": None}
        )
        for rank, chunk in enumerate(chunks, start=1)
    ]


def create_router(resources: Resources) -> NatsRouter:
    settings, bus = resources.settings, resources.bus
    router = step_router(resources)
    claims = resources.claims()
    resources.on_warm_up(resources.encoder, resources.vectors, resources.sparse, resources.graph)

    def register(channel: Channel) -> None:
        publisher = ResultPublisher(router, Step.SEARCH, SearchResult, channel)

        async def handle(cmd: SearchCommand) -> None:
            if cmd.channel is not channel:
                raise PoisonMessage(f"a {cmd.channel} command on the {channel} subject")
            search: ChannelSearch = getattr(channels, CHANNEL_FUNCTIONS[channel])
            # the query is named: a rewritten or decomposed attempt searches other words
            shown = cmd.query[:SHOWN_QUERY_CHARS]
            async with phase(
                bus, cmd, CHANNEL_PHASE[channel], channel=channel.value, query=shown
            ) as run:
                found = await search(resources, cmd)
                chunks = ranked(found.chunks, channel)[: cmd.top_k]
                run.metadata["count"] = len(chunks)
            claim = None
            if cmd.claim_ranking:  # fusion reads it from the claim store: the result is small
                claim = await claims.put_ranking(cmd.request_id, cmd.event_id, chunks)
            result = SearchResult(
                **step_result_fields(cmd, run),
                event_id=result_event_id(cmd),
                channel=channel,
                chunks=[] if claim else chunks,
                ranking_claim=claim,
                count=len(chunks),
                query_vector=found.query_vector,
            )
            await publisher.publish(result)

        handle.__name__ = f"search_{channel.value}"
        router.subscriber(
            **subscriber_kwargs(step_consumer(Step.SEARCH, channel), settings, SearchCommand),
            title=f"search.{channel.value}",
        )(handle)

    for channel in CHANNEL_FUNCTIONS:  # the memory channel is the memory worker's
        register(channel)
    return router
