"""Process-wide resources, created on first use so a process loads only what its workers need.

`ragbus worker fuse` never imports torch; `ragbus up` shares one encoder, one Qdrant
client and one graph store between every worker in the process (Qdrant local mode and
the embedded graph allow a single process per data directory).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import redis.asyncio as aioredis

from infra.bus import Bus
from infra.settings import Settings

if TYPE_CHECKING:
    from infra.encoder import Encoder
    from infra.graph_store import GraphStore
    from infra.vector_store import VectorStore


class Resources:
    def __init__(self, settings: Settings, bus: Bus) -> None:
        self.settings = settings
        self.bus = bus
        self._encoder: Encoder | None = None
        self._vectors: VectorStore | None = None
        self._graph: GraphStore | None = None
        self._redis: aioredis.Redis | None = None
        self._lock = asyncio.Lock()

    def redis(self) -> aioredis.Redis:
        if self._redis is None:
            self._redis = aioredis.from_url(self.settings.redis_url, decode_responses=True)
        return self._redis

    async def encoder(self) -> Encoder:
        async with self._lock:
            if self._encoder is None:
                from infra.encoder import load_encoder

                self._encoder = await asyncio.to_thread(load_encoder, self.settings)
            return self._encoder

    async def vectors(self) -> VectorStore:
        encoder = await self.encoder()
        async with self._lock:
            if self._vectors is None:
                from infra.vector_store import open_vector_store

                self._vectors = await asyncio.to_thread(
                    open_vector_store, self.settings, encoder.dim
                )
            return self._vectors

    async def graph(self) -> GraphStore:
        async with self._lock:
            if self._graph is None:
                from infra.graph_store import open_graph_store

                self._graph = await open_graph_store(self.settings)
            return self._graph

    async def aclose(self) -> None:
        if self._graph is not None:
            await self._graph.aclose()
        if self._vectors is not None:
            await asyncio.to_thread(self._vectors.close)
        if self._redis is not None:
            await self._redis.aclose()
