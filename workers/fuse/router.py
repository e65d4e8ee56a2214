"""The fuse worker on the bus: `rag.cmd.fuse` in, `rag.res.fuse` out.

With `RAGBUS_GRAPH_BRIDGE` on (the default), the documents about the entities the best fused
chunks mention join the list (`workers.fuse.bridge`: the second hop of multi-hop questions);
a graph store that fails is logged and skipped.

With `RAGBUS_RERANKER_PATH` set, the best `RAGBUS_RERANK_TOP_N` fused chunks are reordered by
a cross-encoder before the list is cut to the command's `top_k`; without it nothing changes
and nothing heavy is imported. A reranker that cannot load or run is logged and skipped: the fused
order is still a good answer.

A decomposed retry (`carried` set) fuses each of its queries' channels alone and adds their
best new chunks to the previous attempt's list (`workers.fuse.follow_up`).

The channels send references; the fused list is hydrated from the vector store (text, the
chunk's stored vector and its sentences' vectors) in one lookup, unless the request only wants
rankings (`hydrate` off, the `retrieve` mode). The channels' rankings themselves usually wait in
the request's claim store (`FuseCommand.claimed_results`), read in one round trip. The hydrated
passages go to the same store (`infra.runtime.claims`), and the result carries their openings.
"""

from __future__ import annotations

from faststream.nats import NatsRouter

from contracts.commands import FuseCommand, parse_search_key
from contracts.enums import Channel, Phase, Step
from contracts.models import RetrievedChunk
from contracts.results import FuseResult
from infra.errors import PoisonMessage
from infra.logging import get_logger
from infra.runtime.bus import step_consumer, subscriber_kwargs
from infra.runtime.claims import Claims
from infra.runtime.resources import Resources
from infra.runtime.worker_runtime import (
    ResultPublisher,
    phase,
    step_result_fields,
    step_router,
)
from workers.fuse.bridge import bridge
from workers.fuse.follow_up import FOLLOW_UP_CHANNEL, follow_up
from workers.fuse.rerank import rerank
from workers.fuse.rrf import channel_counts, channel_samples, effective_weights, fuse

log = get_logger(__name__)


Rankings = dict[Channel, list[RetrievedChunk]]


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
            weights = effective_weights(cmd.weights, results)
            reranker = None
            if settings.reranker_path is not None:
                try:
                    reranker = await resources.reranker()
                except Exception as exc:
                    log.exception("reranker_unavailable")
                    run.metadata["rerank_error"] = f"{type(exc).__name__}: {exc}"[:500]
            depth = max(cmd.top_k, settings.rerank_top_n) if reranker is not None else cmd.top_k
            chunks = fuse(results, cmd.weights, method=cmd.fusion, k=cmd.rrf_k, top_k=depth)
            if cmd.carried or sub_results:
                rankings = [chunks] + [
                    fuse(further, cmd.weights, method=cmd.fusion, k=cmd.rrf_k, top_k=depth)
                    for further in sub_results
                ]
                base = cmd.carried or rankings.pop(0)
                chunks = follow_up(base, rankings, depth)
                run.metadata["follow_up"] = sum(
                    FOLLOW_UP_CHANNEL in chunk.channels for chunk in chunks
                )
            if settings.graph_bridge and chunks:
                try:
                    chunks, run.metadata["bridged"] = await bridge(
                        await resources.graph(), chunks, depth
                    )
                except Exception as exc:  # the fused list alone is still a good answer
                    log.exception("graph_bridge_failed")
                    run.metadata["bridge_error"] = f"{type(exc).__name__}: {exc}"[:500]
            if cmd.hydrate:
                store = await resources.vectors()
                fused = len(chunks)
                chunks = await store.read(store.hydrate, chunks)
                if len(chunks) < fused:  # deleted since a channel found them
                    run.metadata["gone"] = fused - len(chunks)
            if reranker is not None:
                try:
                    chunks, run.metadata["reranked"] = await rerank(
                        reranker, cmd.query, chunks, settings.rerank_top_n
                    )
                except Exception as exc:
                    log.exception("rerank_failed")
                    run.metadata.update(reranked=0, rerank_error=f"{type(exc).__name__}: {exc}")
                chunks = chunks[: cmd.top_k]
            counts = channel_counts(results)
            run.metadata.update(
                effective_weights={c.value: round(w, 4) for c, w in weights.items()},
                counts={c.value: n for c, n in counts.items()},
                fused=len(chunks),
            )
        if cmd.hydrate:  # the whole passages wait in the claim store; the message is small
            chunks = await claims.put(cmd.request_id, chunks)
        result = FuseResult(
            **step_result_fields(cmd, run),
            chunks=chunks,
            effective_weights=weights,
            channel_counts=counts,
            channel_samples=channel_samples(results),
        )
        await publisher.publish(result)

    return router
