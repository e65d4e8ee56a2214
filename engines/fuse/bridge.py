"""Multi-hop bridging over the graph: the documents *about* what the best chunks mention.

A multi-hop question names its first hop ("the author of *Alexander and the Terrible …*"), so
every channel finds that chunk; the second hop ("Judith Viorst") is named only inside it, and
no channel searching with the question's words can reach it. The graph can: the entities the
best fused chunks mention (as ingestion found them: `GraphStore.chunk_entities`) lead to the
documents titled by them (`GraphStore.documents_about`).
Up to `MAX_BRIDGED` such chunks are placed right after the first `INSERT_AT` fused ones, and
carry `channels["graph_bridge"]` so an answer's sources say how they were found.

Measured with `ragbus eval` (README, Evaluation): MuSiQue train-100 Recall@10 0.705 -> 0.724,
against 0.692 for vector+sparse alone; NFCorpus nDCG@10 unchanged (0.354).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contracts.models import RetrievedChunk
from infra.retrieval.graph.model import GraphStore
from infra.retrieval.scope import Scope

BRIDGE_CHANNEL = "graph_bridge"
BRIDGE_FROM = 3
"""Fused chunks whose entities are followed."""
INSERT_AT = 3
"""Fused chunks kept ahead of the bridged ones: the first hop stays first."""
MAX_BRIDGED = 2
"""Bridged chunks added at most (2 measured best of 1, 2, 3, 5; more push good chunks out)."""


BRIDGE_KINDS = frozenset({"proper"})
"""Only named entities (people, places, works, organisations) are followed: they are the hops
of multi-hop questions. Terms ("vitamin d") name topics, and following them to the documents
titled by a topic pushed relevant chunks down on NFCorpus (nDCG@10 0.355 -> 0.341)."""


def bridge_norms(
    chunks: Sequence[RetrievedChunk], entities: Mapping[str, Sequence[tuple[str, str]]]
) -> list[str]:
    """Named-entity norms of the best chunks, best chunk first, each once; `entities` are the
    `(norm, kind)` pairs ingestion found in each chunk (`GraphStore.chunk_entities`)."""
    norms: list[str] = []
    for chunk in chunks[:BRIDGE_FROM]:
        for norm, kind in entities.get(chunk.chunk_id, ()):
            if kind in BRIDGE_KINDS and norm not in norms:
                norms.append(norm)
    return norms


async def bridge(
    graph: GraphStore, chunks: list[RetrievedChunk], top_k: int, scope: Scope | None = None
) -> tuple[list[RetrievedChunk], int]:
    """The fused list with bridged chunks inserted (re-ranked, cut to `top_k`), and how many
    were inserted; with a `scope` (a filtered request), only chunks of its documents."""
    entities = await graph.chunk_entities([chunk.chunk_id for chunk in chunks[:BRIDGE_FROM]])
    norms = bridge_norms(chunks, entities)
    if not norms:  # also when there are no chunks
        return chunks[:top_k], 0
    namespaces = sorted({chunk.namespace for chunk in chunks[:BRIDGE_FROM]})
    ahead = {chunk.chunk_id for chunk in chunks[:INSERT_AT]}
    found = [
        c
        for c in await graph.documents_about(namespaces, norms)
        if c.chunk_id not in ahead and (scope is None or scope.allows(c.namespace, c.document_id))
    ]
    added = found[:MAX_BRIDGED]
    if not added:
        return chunks[:top_k], 0
    kept = chunks[:INSERT_AT]  # not empty: the norms came from these chunks
    by_id = {chunk.chunk_id: chunk for chunk in chunks}
    fused_copies = [by_id.get(chunk.chunk_id, chunk) for chunk in added]
    inserted = [
        chunk.model_copy(
            update={"score": kept[-1].score, "channels": {**chunk.channels, BRIDGE_CHANNEL: n}}
        )
        for n, chunk in enumerate(fused_copies, start=1)
    ]
    bridged_ids = {chunk.chunk_id for chunk in inserted}
    rest = [chunk for chunk in chunks[INSERT_AT:] if chunk.chunk_id not in bridged_ids]
    merged = (kept + inserted + rest)[:top_k]
    return [chunk.model_copy(update={"rank": i}) for i, chunk in enumerate(merged, 1)], len(added)
