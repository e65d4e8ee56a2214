"""Fusion as one call: the channels' rankings in, the fused, bridged, hydrated and claimed list
out (`contracts.results.Fused`). The fuse worker runs it for its command; a search worker runs
it for the channels it searched itself when its command asks (`SearchCommand.fuse`), so an
attempt whose channels are all in one command skips the fuse step's hop.

With `RAGBUS_GRAPH_BRIDGE` on (the default), the documents about the entities the best fused
chunks mention join the list (`engines.fuse.bridge`: the second hop of multi-hop questions);
a graph store that fails is logged and skipped.

With `RAGBUS_RERANKER_PATH` set, the best `RAGBUS_RERANK_TOP_N` fused chunks are reordered by
a cross-encoder before the list is cut to `top_k`; without it nothing changes and nothing heavy
is imported. A reranker that cannot load or run is logged and skipped: the fused order is still
a good answer.

A decomposed retry (`carried` set) fuses each of its queries' channels alone and adds their
best new chunks to the previous attempt's list (`engines.fuse.follow_up`).

The channels send references; the fused list is hydrated from the vector store (text, the
chunk's stored vector and its sentences' vectors) in one lookup, unless only the rankings are
wanted (`hydrate` off, the `retrieve` mode). The hydrated passages go to the request's claim
store (`infra.runtime.claims`), and the list carries their openings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contracts.enums import Channel
from contracts.models import RetrievedChunk
from contracts.results import Fused
from engines.fuse.bridge import bridge
from engines.fuse.follow_up import FOLLOW_UP_CHANNEL, follow_up
from engines.fuse.rerank import rerank
from engines.fuse.rrf import (
    Fusion,
    channel_counts,
    effective_weights,
    fuse,
    question_weights,
)
from infra.logging import get_logger
from infra.retrieval.scope import Scope

if TYPE_CHECKING:
    from infra.runtime.claims import Claims
    from infra.runtime.resources import Resources

log = get_logger(__name__)

Rankings = dict[Channel, list[RetrievedChunk]]


@dataclass(frozen=True)
class FusionRequest:
    """What one fusion needs: the rankings and how to weigh and cut them."""

    request_id: str
    question: str
    weights: dict[Channel, float]
    results: Rankings
    top_k: int
    rrf_k: int
    fusion: Fusion
    sub_results: Sequence[Rankings] = ()
    carried: Sequence[RetrievedChunk] = ()
    hydrate: bool = True
    scope: Scope | None = None
    """A filtered request's documents: what the bridge may add (`infra.retrieval.scope`)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The fusion phase's metadata, which the call fills in."""


async def fuse_rankings(resources: Resources, claims: Claims, job: FusionRequest) -> Fused:
    """Fuse, follow up, bridge, hydrate, rerank and claim, as the module says."""
    settings, meta = resources.settings, job.metadata
    asked = question_weights(job.weights, job.results)
    weights = effective_weights(asked, job.results)
    reranker = None
    if settings.reranker_path is not None:
        try:
            reranker = await resources.reranker()
        except Exception as exc:
            log.exception("reranker_unavailable")
            meta["rerank_error"] = f"{type(exc).__name__}: {exc}"[:500]
    depth = max(job.top_k, settings.rerank_top_n) if reranker is not None else job.top_k
    chunks = fuse(job.results, asked, method=job.fusion, k=job.rrf_k, top_k=depth)
    if job.carried or job.sub_results:
        rankings = [chunks] + [
            fuse(
                further,
                question_weights(job.weights, further),
                method=job.fusion,
                k=job.rrf_k,
                top_k=depth,
            )
            for further in job.sub_results
        ]
        base = list(job.carried) or rankings.pop(0)
        chunks = follow_up(base, rankings, depth)
        meta["follow_up"] = sum(FOLLOW_UP_CHANNEL in chunk.channels for chunk in chunks)
    if settings.graph_bridge and chunks:
        try:
            graph = await resources.graph()
            chunks, meta["bridged"] = await bridge(graph, chunks, depth, job.scope)
        except Exception as exc:  # the fused list alone is still a good answer
            log.exception("graph_bridge_failed")
            meta["bridge_error"] = f"{type(exc).__name__}: {exc}"[:500]
    if job.hydrate:
        store = await resources.vectors()
        fused = len(chunks)
        chunks = await store.read(store.hydrate, chunks)
        if len(chunks) < fused:  # deleted since a channel found them
            meta["gone"] = fused - len(chunks)
    if reranker is not None:
        try:
            chunks, meta["reranked"] = await rerank(
                reranker, job.question, chunks, settings.rerank_top_n
            )
        except Exception as exc:
            log.exception("rerank_failed")
            meta.update(reranked=0, rerank_error=f"{type(exc).__name__}: {exc}")
        chunks = chunks[: job.top_k]
    counts = channel_counts(job.results)
    meta.update(
        effective_weights={c.value: round(w, 4) for c, w in weights.items()},
        counts={c.value: n for c, n in counts.items()},
        fused=len(chunks),
    )
    claim = None
    if job.hydrate:  # the whole passages wait in the claim store; the message is small
        chunks, claim = await claims.put_fused(job.request_id, chunks)
    return Fused(
        chunks=chunks,
        effective_weights=weights,
        channel_counts=counts,
        contexts_claim=claim,
    )
