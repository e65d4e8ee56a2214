"""The four retrieval channels, one plain function each: `(resources, command) -> chunks`.

They return chunks best first; ranks and the `channels` map are the worker's to set. Stores
are synchronous or CPU-bound, so their calls run in threads off the event loop.
"""

from __future__ import annotations

import asyncio

from contracts.commands import SearchCommand
from contracts.models import RetrievedChunk
from infra.retrieval.entities import query_entities
from infra.runtime.resources import Resources


async def _query_vector(resources: Resources, cmd: SearchCommand) -> list[float]:
    """Reuse the embedding classify already made, when it fits the encoder."""
    encoder = await resources.encoder()
    if cmd.query_vector is not None and len(cmd.query_vector) == encoder.dim:
        return cmd.query_vector
    return [float(x) for x in (await encoder.aencode([cmd.query]))[0]]


async def search_vector(resources: Resources, cmd: SearchCommand) -> list[RetrievedChunk]:
    vector = await _query_vector(resources, cmd)
    store = await resources.vectors()
    return await asyncio.to_thread(store.search_dense, cmd.namespaces, vector, cmd.top_k)


async def search_sparse(resources: Resources, cmd: SearchCommand) -> list[RetrievedChunk]:
    """BM25 terms or BGE-M3 lexical weights, whichever `Resources.sparse()` is configured."""
    sparse = await resources.sparse()
    indices, values = await asyncio.to_thread(sparse.query, cmd.query)
    store = await resources.vectors()
    return await asyncio.to_thread(store.search_sparse, cmd.namespaces, indices, values, cmd.top_k)


async def search_graph_local(resources: Resources, cmd: SearchCommand) -> list[RetrievedChunk]:
    graph = await resources.graph()
    return await graph.local_search(cmd.namespaces, query_entities(cmd.query), cmd.top_k)


async def search_graph_global(resources: Resources, cmd: SearchCommand) -> list[RetrievedChunk]:
    """Communities by query entities, and by summary embedding when the command brings the
    query vector (the channel never loads the encoder just for this)."""
    graph = await resources.graph()
    return await graph.global_search(
        cmd.namespaces, query_entities(cmd.query), cmd.query_vector, cmd.top_k
    )
