"""Process-wide resources, created on first use so a process loads only what its workers need.

`ragbus worker fuse` never imports torch (unless a reranker is configured); `ragbus up`
shares one encoder, one Qdrant client and one graph store between every worker in the process
(Qdrant local mode and the embedded graph allow a single process per data directory). With
`bge_m3_path` set, one BGE-M3 model is both the encoder and the sparse model.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import numpy as np
import redis.asyncio as aioredis

from infra.runtime.bus import Bus
from infra.runtime.claims import Claims, claim_ttl_s
from infra.runtime.liveness import is_live
from infra.runtime.redis_client import redis_for
from infra.settings import Settings

if TYPE_CHECKING:
    from infra.llm import LLMClient
    from infra.memory.semantic import MemoryVectors
    from infra.retrieval.encoder import Encoder, Encoding
    from infra.retrieval.graph.store import GraphStore
    from infra.retrieval.nli import NliModel
    from infra.retrieval.reranker import Reranker
    from infra.retrieval.sparse import SparseModel
    from infra.retrieval.vectors import VectorStore
    from infra.runtime.background import BackgroundWork
    from infra.runtime.replica_hub import ReplicaHub


BACKGROUND_RUNTIMES = frozenset({"onnx", "torch"})
"""Encoders `load_encoder` rebuilds the same in the background child (not BGE-M3's)."""


class OnDemandEncoder:
    def __init__(self, resources: Resources) -> None:
        self._resources = resources

    async def aencode(self, texts: list[str]) -> np.ndarray:
        return await (await self._resources.encoder()).aencode(texts)


class Resources:
    def __init__(self, settings: Settings, bus: Bus) -> None:
        self.settings = settings
        self.bus = bus
        self._encoder: Encoder | None = None
        self._sparse: SparseModel | None = None
        self._reranker: Reranker | None = None
        self._nli: NliModel | None = None
        self._vectors: VectorStore | None = None
        self._memory: MemoryVectors | None = None
        self._graph: GraphStore | None = None
        self._llm: LLMClient | None = None
        self._redis: aioredis.Redis | None = None
        self._background: BackgroundWork | None = None
        self._graph_background: BackgroundWork | None = None
        self._ingest_encoder: Encoding | None = None
        self._claims: Claims | None = None
        self._lock = asyncio.Lock()
        self._warm_ups: list[Callable[[], Awaitable[object]]] = []
        self._closes: list[Callable[[], Awaitable[object]]] = []
        self.stores_token = uuid.uuid4().hex
        """Names this process's opening of the embedded stores in their version
        (`contracts.replicas.StoresVersion`): a copy made by an earlier owner never passes
        for one of this one's."""
        self.search_replicas: ReplicaHub | None = None
        """The store owner's search replicas, once they are started (`launcher.replicas`)."""

    def on_warm_up(self, *loads: Callable[[], Awaitable[object]]) -> None:
        """What a worker needs loaded before it takes its first message (`warm_up`)."""
        self._warm_ups.extend(loads)

    def on_close(self, *closes: Callable[[], Awaitable[object]]) -> None:
        """What a worker started and must stop when the process stops (`aclose` calls them
        first, in order, before the shared resources close)."""
        self._closes.extend(closes)

    async def warm_up(self) -> None:
        """Load what this process's workers registered, in order: a worker that pulled before
        its model was loaded would hold messages it cannot serve for the loading time."""
        for load in self._warm_ups:
            await load()

    def redis(self) -> aioredis.Redis:
        if self._redis is None:
            self._redis = redis_for(self.settings)
        return self._redis

    def claims(self) -> Claims:
        """The request's claim store of passages (`infra.runtime.claims`), in Redis."""
        if self._claims is None:
            self._claims = Claims(self.redis(), claim_ttl_s(self.settings))
        return self._claims

    async def is_live(self, request_id: str) -> bool:
        """Whether the request exists and has not finished (`infra.runtime.liveness`)."""
        return await is_live(self.redis(), request_id)

    async def encoder(self) -> Encoder:
        async with self._lock:
            if self._encoder is None:
                if self.settings.bge_m3_path is not None:
                    from infra.retrieval.bge_m3 import load_bge_m3

                    self._encoder = await asyncio.to_thread(load_bge_m3, self.settings)
                else:
                    from infra.retrieval.encoder import load_encoder

                    self._encoder = await asyncio.to_thread(load_encoder, self.settings)
            return self._encoder

    def background(self) -> BackgroundWork:
        """The niced child process for corpus-wide CPU work (`infra.runtime.background`)."""
        if self._background is None:
            from infra.runtime.background import BackgroundWork

            self._background = BackgroundWork(self.settings)
        return self._background

    def graph_background(self) -> BackgroundWork:
        """A second idle-priority child, for the graph's community detection alone: at 20,000
        documents one detection took about 9 s, and in the child that encodes the chunks,
        every document written meanwhile waited for it (a watched folder's change took 10 s
        to be searchable; `ragbus bench-sync`, issue 57)."""
        if self._graph_background is None:
            from infra.runtime.background import BackgroundWork

            self._graph_background = BackgroundWork(self.settings)
        return self._graph_background

    async def ingest_encoder(self) -> Encoding:
        """The encoder ingestion embeds chunks and sentences with: the same model, run in the
        background child, so an ingest job never queues the queries' encoder passes behind
        its own. The in-process encoder where that is off or the model is not the plain
        dense encoder (BGE-M3 makes sparse vectors in the same pass)."""
        encoder = await self.encoder()
        runtime = getattr(encoder, "runtime", None)  # test doubles have none
        if self.settings.background_process and runtime in BACKGROUND_RUNTIMES:
            if self._ingest_encoder is None:
                from infra.runtime.background import BackgroundEncoder

                self._ingest_encoder = BackgroundEncoder(
                    self.background(),
                    encoder.dim,
                    encoder.coalesce_max_texts,
                    pools_spans=encoder.pools_spans,
                )
            return self._ingest_encoder
        return encoder

    def encoding(self) -> OnDemandEncoder:
        """Something with `aencode` that loads the encoder only when it is called: for steps
        that carry their vectors and encode only what came without them."""
        return OnDemandEncoder(self)

    async def sparse(self) -> SparseModel:
        """BM25 (no model to load) unless BGE-M3 is configured: then the encoder's own
        lexical weights, from the same loaded model."""
        if self.settings.bge_m3_path is not None:
            from infra.retrieval.sparse import SparseModel

            encoder = await self.encoder()
            if not isinstance(encoder, SparseModel):
                raise TypeError(f"encoder {encoder.name} makes no sparse vectors")
            return encoder
        if self._sparse is None:
            from infra.retrieval.sparse import Bm25Sparse

            self._sparse = Bm25Sparse()
        return self._sparse

    async def reranker(self) -> Reranker | None:
        """The cross-encoder when `reranker_path` is set, else None (nothing is imported)."""
        if self.settings.reranker_path is None:
            return None
        async with self._lock:
            if self._reranker is None:
                from infra.retrieval.reranker import load_reranker

                self._reranker = await asyncio.to_thread(load_reranker, self.settings)
            return self._reranker

    async def nli(self) -> NliModel | None:
        """The NLI model when `nli_path` is set, else None (nothing is imported)."""
        if self.settings.nli_path is None:
            return None
        async with self._lock:
            if self._nli is None:
                from infra.retrieval.nli import load_nli

                self._nli = await asyncio.to_thread(load_nli, self.settings)
            return self._nli

    async def vectors(self) -> VectorStore:
        encoder = await self.encoder()
        sparse = await self.sparse()
        async with self._lock:
            if self._vectors is None:
                from infra.retrieval.vectors import open_vector_store

                self._vectors = await asyncio.to_thread(
                    open_vector_store, self.settings, encoder.dim, sparse_idf=sparse.idf_modifier
                )
            return self._vectors

    async def memory_vectors(self) -> MemoryVectors:
        """Semantic memory's vectors (`infra.memory.semantic`), in a store of their own."""
        encoder = await self.encoder()
        async with self._lock:
            if self._memory is None:
                from infra.memory.semantic import MemoryVectors
                from infra.retrieval.vectors import open_memory_store

                store = await asyncio.to_thread(open_memory_store, self.settings, encoder.dim)
                self._memory = MemoryVectors(store)
            return self._memory

    async def graph(self) -> GraphStore:
        async with self._lock:
            if self._graph is None:
                from infra.retrieval.graph.store import open_graph_store

                self._graph = await open_graph_store(self.settings)
                from infra.retrieval.graph.embedded import EmbeddedGraphStore

                if isinstance(self._graph, EmbeddedGraphStore) and self.settings.background_process:
                    self._graph.run_cpu = self.graph_background().call
            return self._graph

    def use_stores(
        self, vectors: VectorStore, graph: GraphStore
    ) -> tuple[VectorStore | None, GraphStore | None]:
        """Serve from these stores from now on (a search replica's copy); the ones they
        replace, for the caller to close once nothing reads them."""
        previous = (self._vectors, self._graph)
        self._vectors, self._graph = vectors, graph
        return previous

    def llm(self) -> LLMClient | None:
        """The shared OpenAI-compatible client when `llm_base_url` is set, else None."""
        if not self.settings.llm_base_url:
            return None
        if self._llm is None:
            from infra.llm import LLMClient

            self._llm = LLMClient.from_settings(self.settings)
        return self._llm

    async def aclose(self) -> None:
        for close in self._closes:
            await close()
        self._closes.clear()
        if self._llm is not None:
            await self._llm.aclose()
        if self._graph is not None:
            await self._graph.aclose()
        if self._vectors is not None:
            await asyncio.to_thread(self._vectors.close)
        if self._memory is not None:
            await asyncio.to_thread(self._memory.store.close)
        if self._redis is not None:
            await self._redis.aclose()
        for child in (self._background, self._graph_background):
            if child is not None:
                child.close()
