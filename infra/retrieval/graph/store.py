"""The entity graph behind the graph_local and graph_global channels.

Model (both backends): (:Entity {norm, name, kind, namespace})-[:MENTIONED_IN]->(:Chunk),
(:Document)-[:HAS_CHUNK]->(:Chunk), entity co-occurrence (:Entity)-[:RELATES_TO {weight =
shared chunks}]->(:Entity), and Louvain communities of that co-occurrence graph, each with a
summary — extractive, or the LLM's when a summariser was given — and a summary embedding when
an encoder was given.

The ranking lives once (`infra.retrieval.graph.ranking`), over a small read interface
(`GraphView`) that each backend implements: the embedded store (`infra.retrieval.graph.embedded`)
answers from dictionaries (`infra.retrieval.graph.embedded_index`), Neo4j
(`infra.retrieval.graph.neo4j_store`) with Cypher. So both
backends rank the same graph the same way, and the contract tests hold them to it. This module
is the interface and the factory.
"""

from __future__ import annotations

import asyncio

from infra.logging import get_logger
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.graph.model import Community, GraphStore
from infra.retrieval.graph.neo4j_store import Neo4jGraphStore
from infra.settings import Settings

__all__ = ["Community", "EmbeddedGraphStore", "GraphStore", "Neo4jGraphStore", "open_graph_store"]

log = get_logger(__name__)


async def open_graph_store(settings: Settings) -> GraphStore:
    """Neo4j when `neo4j_uri` is set, else the embedded store under the data directory."""
    if settings.neo4j_uri:
        from neo4j import AsyncGraphDatabase

        driver = AsyncGraphDatabase.driver(
            settings.neo4j_uri, auth=(settings.neo4j_user, settings.neo4j_password)
        )
        neo = Neo4jGraphStore(driver)
        try:
            await neo.start()
        except Exception:
            await driver.close()
            raise
        log.info("graph_neo4j", uri=settings.neo4j_uri)
        return neo
    store = EmbeddedGraphStore(settings.graph_path)
    await asyncio.to_thread(store.load)
    return store
