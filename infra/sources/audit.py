"""What is left of documents that should be gone, counted in each store: the check behind
"0 orphans after deletions" (`ragbus bench-sync`, the sources suite).

A deleted document leaves nothing in any store: no chunk point (vector store), no graph
document or chunk, no original file (object store), no catalogue metadata and no quota count
(Redis). `leftovers` counts what each still holds of the ids given; all zero is the goal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import redis.asyncio as aioredis

from contracts.tenancy import tenant_of
from infra.retrieval.graph.model import GraphStore
from infra.retrieval.vectors.base import VectorStore
from infra.runtime.files import FileStore
from infra.tenancy.catalogue import DocumentMetadata
from infra.tenancy.quotas import Quotas


def _points_of(vectors: VectorStore, namespace: str, ids: Collection[str]) -> int:
    return sum(
        1
        for record in vectors.iter_points(namespace)
        if str((record.payload or {}).get("document_id", "")) in ids
    )


async def leftovers(
    namespace: str,
    document_ids: Collection[str],
    *,
    vectors: VectorStore | None,
    graph: GraphStore | None,
    files: FileStore,
    redis: aioredis.Redis,
) -> dict[str, int]:
    """What each store still holds of `document_ids` in the store namespace `namespace`
    (the vector and graph stores where given: a process that does not own the embedded ones
    counts them once their owner has stopped)."""
    ids = set(document_ids)
    counts: dict[str, Any] = {}
    if vectors is not None:
        counts["vector_points"] = await asyncio.to_thread(_points_of, vectors, namespace, ids)
    chunks_of = getattr(graph, "chunks_of", None)  # the embedded graph's own index
    if chunks_of is not None:
        counts["graph_chunks"] = len(await chunks_of([(namespace, i) for i in sorted(ids)]))
    originals = 0
    for document_id in sorted(ids):
        if await files.open_original(namespace, document_id) is not None:
            originals += 1
    counts["originals"] = originals
    metadata = await DocumentMetadata(redis).read(namespace, sorted(ids))
    counts["catalogue_entries"] = len(metadata)
    quotas = Quotas(redis)
    tenant = tenant_of(namespace)
    counts["quota_entries"] = 0
    for document_id in sorted(ids):
        counts["quota_entries"] += bool(await quotas.kept_bytes(tenant, namespace, document_id))
    return counts
