"""What the same-work peer (`bench.same_work`) runs ragbus's engine functions over: `Engines`,
which answers what they ask of `infra.runtime.resources.Resources` from the copied stores, the
encoder run inline (`InlineEncoder`), and `unsupported`, the configurations it refuses.

Configurations whose engines cannot be opened beside a running stack or would not do the same
work are refused with the reason: a Qdrant or Neo4j server, BGE-M3, an LLM. BM25 has no data of
its own (Qdrant applies the IDF).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from infra.retrieval.encoder import Encoder
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.sparse import Bm25Sparse
from infra.retrieval.vectors.edge import EdgeVectorStore
from infra.settings import Settings

if TYPE_CHECKING:
    from infra.retrieval.nli import NliModel
    from infra.retrieval.reranker import Reranker


def unsupported(settings: Settings) -> str | None:
    """Why the same-work peer cannot do ragbus's work under these settings, or None."""
    if settings.qdrant_url:
        return "RAGBUS_QDRANT_URL is set: the peer copies the embedded Edge store"
    if settings.neo4j_uri:
        return "RAGBUS_NEO4J_URI is set: the peer copies the embedded graph store"
    if settings.bge_m3_path is not None:
        return "RAGBUS_BGE_M3_PATH is set: the peer runs the dense encoder and BM25 only"
    if settings.llm_base_url:
        return "RAGBUS_LLM_BASE_URL is set: ragbus generates with the model, the peer would not"
    return None


class InlineEncoder(Encoder):
    """The loaded encoder, run in the calling thread: `aencode` is `encode`, no batcher."""

    def __init__(self, inner: Encoder) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.runtime, self.precision = inner.runtime, inner.precision

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode(texts)

    async def aencode(self, texts: list[str]) -> np.ndarray:
        return self.inner.encode(texts)


@dataclass
class Engines:
    """What the workers' engine functions ask of `infra.runtime.resources.Resources`, over
    the copied stores; passed where they take `Resources`."""

    settings: Settings
    inline: InlineEncoder
    store: EdgeVectorStore
    graph_store: EmbeddedGraphStore
    bm25: Bm25Sparse = field(default_factory=Bm25Sparse)
    cross_encoder: Reranker | None = None
    nli_model: NliModel | None = None

    async def encoder(self) -> Encoder:
        return self.inline

    def encoding(self) -> InlineEncoder:
        return self.inline

    async def vectors(self) -> EdgeVectorStore:
        return self.store

    async def sparse(self) -> Bm25Sparse:
        return self.bm25

    async def graph(self) -> EmbeddedGraphStore:
        return self.graph_store

    async def reranker(self) -> Reranker | None:
        return self.cross_encoder

    async def nli(self) -> NliModel | None:
        return self.nli_model

    def llm(self) -> None:
        return None  # `unsupported` refuses a configured model
