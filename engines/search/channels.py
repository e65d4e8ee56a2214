"""The four retrieval channels, one plain function each: `(resources, command) -> Found`.

They return chunk references best first (fusion needs ids and ranks, not text); ranks and the
`channels` map are `channel_search.ranked`'s to set. A search in the embedded store takes well
under a millisecond and runs inline (`VectorStore.read`); a server's network call, the sparse
model's BGE-M3 variant and the graph walk leave the event loop.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from contracts.commands import SearchCommand
from contracts.models import RetrievedChunk
from infra.retrieval.entities import query_entities
from infra.retrieval.scope import Scope, document_scope, where_of
from infra.retrieval.vectors.codec import pack_query, unpack_query

if TYPE_CHECKING:
    from infra.runtime.resources import Resources


@dataclass(frozen=True)
class Found:
    chunks: list[RetrievedChunk]
    query_vector: str | None = None
    """The query's embedding when this channel had to make it (a follow-up query)."""


async def _query_vector(resources: Resources, cmd: SearchCommand) -> tuple[np.ndarray, bool]:
    """The embedding classify made, when it fits the encoder; else one made here (True)."""
    encoder = await resources.encoder()
    carried = unpack_query(cmd.query_vector, encoder.dim)
    if carried is not None:
        return carried, False
    return (await encoder.aencode([cmd.query]))[0], True


SCOPES_KEPT = 64
"""Commands whose scope is kept, for their other channels and their fusion's bridge."""
_scopes: OrderedDict[str, asyncio.Future[Scope | None]] = OrderedDict()


async def scope_of(resources: Resources, cmd: SearchCommand) -> Scope | None:
    """The documents a filtered command may draw on, for the graph channels and the bridge
    (None: all). Asked of the store once per command: its channels run side by side and its
    fusion after them, and each would otherwise ask again (a Qdrant server scrolls its first
    chunks each time)."""
    if cmd.filter is None and cmd.reader is None:
        return None
    key = f"{cmd.request_id}/{cmd.event_id}"
    found = _scopes.get(key)
    if found is None or (found.done() and found.exception() is not None):
        store = await resources.vectors()
        found = asyncio.ensure_future(document_scope(store, cmd.namespaces, cmd.filter, cmd.reader))
        _scopes[key] = found
        while len(_scopes) > SCOPES_KEPT:
            _scopes.popitem(last=False)
    return await asyncio.shield(found)


async def search_vector(resources: Resources, cmd: SearchCommand) -> Found:
    vector, made = await _query_vector(resources, cmd)
    store = await resources.vectors()
    where = where_of(cmd.filter, cmd.reader)
    chunks = await store.read(
        store.search_dense,
        cmd.namespaces,
        vector,
        cmd.top_k,
        where,
        heavy=not store.quick(cmd.namespaces, where),
    )
    return Found(chunks, pack_query(vector) if made else None)


async def search_sparse(resources: Resources, cmd: SearchCommand) -> Found:
    """BM25 terms or BGE-M3 lexical weights, whichever `Resources.sparse()` is configured."""
    sparse = await resources.sparse()
    if sparse.idf_modifier:  # BM25: a stemmer's work, microseconds
        indices, values = sparse.query(cmd.query)
    else:  # a model's forward pass
        indices, values = await asyncio.to_thread(sparse.query, cmd.query)
    store = await resources.vectors()
    where = where_of(cmd.filter, cmd.reader)
    return Found(
        await store.read(
            store.search_sparse,
            cmd.namespaces,
            indices,
            values,
            cmd.top_k,
            where,
            heavy=not store.quick(cmd.namespaces, where),
        )
    )


async def search_graph_local(resources: Resources, cmd: SearchCommand) -> Found:
    graph = await resources.graph()
    scope = await scope_of(resources, cmd)
    return Found(
        await graph.local_search(cmd.namespaces, query_entities(cmd.query), cmd.top_k, scope)
    )


async def search_graph_global(resources: Resources, cmd: SearchCommand) -> Found:
    """Communities by query entities, and by summary embedding when the command brings the
    query vector (the channel never loads the encoder just for this).

    A user's question (`cmd.reader`) never ranks by summary: a community's summary is written
    from all of its chunks, the documents that user may not read among them, so its embedding
    would let what those documents say choose which of the user's passages come back. The
    user's communities are ranked by the query's entities among the chunks it may read
    (`ScopedView` recounts them), and only those chunks come back; a summary's text never
    leaves the graph."""
    graph = await resources.graph()
    vector = unpack_query(cmd.query_vector) if cmd.reader is None else None
    found = await graph.global_search(
        cmd.namespaces,
        query_entities(cmd.query),
        vector.tolist() if vector is not None else None,
        cmd.top_k,
        await scope_of(resources, cmd),
    )
    return Found(found)
