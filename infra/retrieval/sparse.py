"""The sparse side of retrieval, whichever model makes it: BM25 or BGE-M3's lexical weights.

Ingestion and the sparse search channel see only `SparseModel`; `Resources.sparse()` picks the
implementation from the settings. BM25 weights need Qdrant's IDF modifier on the collection
(the document side carries only the term-frequency part); learned weights are complete as
they are, so their collections are created without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from infra.retrieval.chunk_vectors import chunk_embeddings, sentence_embeddings
from infra.retrieval.chunking import Chunk
from infra.retrieval.encoder import Encoding
from infra.retrieval.lexical import SparseEncoder, SparseVec
from infra.retrieval.vectors.points import Sentences


@runtime_checkable
class SparseModel(Protocol):
    """Sparse vectors for documents and queries. Calls may be CPU-bound: run them in a thread."""

    name: str
    idf_modifier: bool
    """Whether the collection must apply IDF (`Modifier.IDF`) to these weights."""

    def documents(self, texts: list[str]) -> list[SparseVec]: ...

    def query(self, text: str) -> SparseVec: ...


@runtime_checkable
class JointEncoder(Protocol):
    """A model that yields dense and sparse document vectors from one forward pass."""

    def encode_dense_sparse(self, texts: list[str]) -> tuple[np.ndarray, list[SparseVec]]: ...


class Bm25Sparse:
    """`infra.retrieval.lexical.SparseEncoder` (stemmed terms, BM25 term frequency) as a
    `SparseModel`."""

    name = "bm25"
    idf_modifier = True

    def __init__(self, encoder: SparseEncoder | None = None) -> None:
        self._encoder = encoder or SparseEncoder()

    def documents(self, texts: list[str]) -> list[SparseVec]:
        return [self._encoder.encode_document(text) for text in texts]

    def query(self, text: str) -> SparseVec:
        return self._encoder.encode_query(text)


async def encode_documents(
    encoder: Encoding, sparse: SparseModel, chunks: Sequence[Chunk]
) -> tuple[np.ndarray, list[SparseVec], list[Sentences]]:
    """Dense, sparse and sentence vectors of a document's chunks. Dense and sparse come from
    one model pass when one model makes both (BGE-M3), its sentences from a second; otherwise
    the dense encoder makes the chunk and sentence vectors (one pass where it pools spans:
    `chunk_embeddings`) while the sparse model works beside it."""
    texts = [chunk.embedding_text for chunk in chunks]
    if sparse is encoder and isinstance(encoder, JointEncoder):
        dense, sparse_vectors = await asyncio.to_thread(encoder.encode_dense_sparse, texts)
        return dense, sparse_vectors, await sentence_embeddings(encoder, chunks)
    (dense, sentences), sparse_vectors = await asyncio.gather(
        chunk_embeddings(encoder, chunks), asyncio.to_thread(sparse.documents, texts)
    )
    return dense, sparse_vectors, sentences
