"""The embedded stores' part of a backup: the vectors, the graph and the semantic memory,
each copied at one point by the process that owns them, while it serves (`copy_stores`,
answering `contracts.subjects.BACKUP_STORES`), or, when no process owns the data directory,
copied from it directly (`copy_idle_stores`). Stores on servers (Qdrant, Neo4j) are named for
the operator to back up with the servers' own tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

from contracts.backup import STORE_PARTS, StoresCopied
from contracts.replicas import StoresVersion
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.runtime.resources import Resources
from infra.settings import Settings
from infra.sparse_copy import copy_tree


def external_stores(settings: Settings) -> list[str]:
    """The stores on servers, as an operator's to-do line each."""
    named = []
    if settings.qdrant_url:
        named.append(
            "vectors and memory: the Qdrant server at RAGBUS_QDRANT_URL (its collections' "
            f"snapshots, `{settings.qdrant_collection_prefix}*`)"
        )
    if settings.neo4j_uri:
        named.append("graph: the Neo4j server at RAGBUS_NEO4J_URI (`neo4j-admin database dump`)")
    return named


async def copy_stores(
    resources: Resources, destination: Path, stores: Collection[str] = STORE_PARTS
) -> StoresCopied:
    """What the store owner does for `ragbus backup` (and for a search replica, which asks for
    the vectors and the graph): each embedded store it owns, of `stores`, copied into
    `destination/<store>` at one point (writes to that store wait meanwhile; searches go on).
    When both the vectors and the graph are embedded and copied, the answer says which writes
    the copies hold (`StoresCopied.version`)."""
    settings = resources.settings
    if not made_empty(destination):
        return StoresCopied(
            error=f"{destination}: the stores go into an absent or empty directory, by its "
            "absolute path"
        )
    copied: list[str] = []
    vectors = await resources.vectors()
    if "vectors" in stores and await asyncio.to_thread(vectors.copy_to, destination / "vectors"):
        copied.append("vectors")
    graph = await resources.graph()
    if (
        "graph" in stores
        and isinstance(graph, EmbeddedGraphStore)
        and await graph.copy_to(destination / "graph")
    ):
        copied.append("graph")
    if "memory" in stores:
        memory = await resources.memory_vectors()
        if await asyncio.to_thread(memory.store.copy_to, destination / "memory"):
            copied.append("memory")
    version = None
    if {"vectors", "graph"} <= set(copied):
        assert isinstance(graph, EmbeddedGraphStore)
        version = StoresVersion(
            owner=resources.stores_token,
            vectors=vectors.copied_writes or 0,
            graph=graph.copied_changes or 0,
        )
    return StoresCopied(copied=copied, external=external_stores(settings), version=version)


def made_empty(destination: Path) -> bool:
    """`destination` made, when it is absolute and absent or empty."""
    if not destination.is_absolute() or (destination.exists() and any(destination.iterdir())):
        return False
    destination.mkdir(parents=True, exist_ok=True)
    return True


def copy_idle_stores(settings: Settings, destination: Path) -> StoresCopied:
    """The embedded stores copied straight from a data directory no process owns (the caller
    holds its lock): nothing writes them."""
    destination.mkdir(parents=True, exist_ok=True)
    copied = []
    places = {
        "vectors": None if settings.qdrant_url else settings.vectors_path,
        "graph": None if settings.neo4j_uri else settings.graph_path,
        "memory": None if settings.qdrant_url else settings.memory_path,
    }
    for name, path in places.items():
        if path is not None and path.is_dir():
            copy_tree(path, destination / name)
            copied.append(name)
    return StoresCopied(copied=copied, external=external_stores(settings))
