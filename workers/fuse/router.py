"""The fuse worker on the bus: `rag.cmd.fuse` in, `rag.res.fuse` out.

What fusion does is `engines.fuse.pipeline`'s; this worker reads the command's rankings (those
it carries, and those the channels left in the request's claim store, in one round trip) and
answers with the fused list. An attempt whose channels are all searched by one command is
fused by the search worker instead (`SearchCommand.fuse`), and sends no fuse command.
"""

from __future__ import annotations

from faststream.nats import NatsRouter

from contracts.commands import FuseCommand, parse_search_key
from contracts.enums import Phase, Step
from contracts.results import FuseResult
from engines.fuse.pipeline import FusionRequest, Rankings, fuse_rankings
from infra.errors import PoisonMessage
from infra.logging import get_logger
from infra.retrieval.scope import document_scope
from infra.runtime.claims import Claims
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router

log = get_logger(__name__)


async def channel_rankings(claims: Claims, cmd: FuseCommand) -> tuple[Rankings, list[Rankings]]:
    """The channels' rankings for the first query and for each further one: those the command
    carries, and those the channels left in the claim store (one read for all)."""
    results: Rankings = dict(cmd.results)
    sub_results: list[Rankings] = [dict(further) for further in cmd.sub_results]
    keys = list(cmd.claimed_results)
    claimed = await claims.rankings(cmd.request_id, [cmd.claimed_results[k] for k in keys])
    for key, chunks in zip(keys, claimed, strict=True):
        channel, index = parse_search_key(key)
        if index == 0:
            results[channel] = chunks
        elif index <= len(sub_results):
            sub_results[index - 1][channel] = chunks
        else:
            raise PoisonMessage(f"a claimed ranking {key!r} for a query the command lacks")
    return results, sub_results


def create_router(resources: Resources) -> NatsRouter:
    bus, settings = resources.bus, resources.settings
    router = step_router(resources)
    resources.on_warm_up(resources.vectors, resources.graph, resources.reranker)
    publisher = ResultPublisher(router, Step.FUSE, FuseResult)
    claims = resources.claims()

    @router.subscriber(**subscriber_kwargs(step_consumer(Step.FUSE), settings, FuseCommand))
    async def on_fuse(cmd: FuseCommand) -> None:
        """Fuse the channels' rankings with the intent's weights."""
        async with phase(bus, cmd, Phase.FUSION) as run:
            results, sub_results = await channel_rankings(claims, cmd)
            job = FusionRequest(
                request_id=cmd.request_id,
                question=cmd.query,
                weights=cmd.weights,
                results=results,
                top_k=cmd.top_k,
                rrf_k=cmd.rrf_k,
                fusion=cmd.fusion,
                sub_results=sub_results,
                carried=cmd.carried,
                hydrate=cmd.hydrate,
                scope=await document_scope(
                    await resources.vectors(), cmd.namespaces, cmd.filter, cmd.reader
                ),
                metadata=run.metadata,
            )
            fused = await fuse_rankings(resources, claims, job)
        await publisher.publish(FuseResult(**step_result_fields(cmd, run), **dict(fused)))

    return router
