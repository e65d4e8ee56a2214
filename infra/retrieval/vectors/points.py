"""What a vector store keeps and hands back, whichever backend: the point a chunk is stored as,
the hits and records the backends return, and the conversions between a chunk and a point.

One collection (or Edge shard) per namespace, each holding three named vectors per chunk:
`dense` (HNSW, cosine), `sparse` (BM25 term frequencies with the IDF modifier, or learned
weights without it) and `sentences`, the chunk's sentence embeddings as one unindexed float16
multivector: nothing searches them, generation and the critic read them back by chunk id.

These are plain values: the store that writes, searches and hydrates them is
`infra.retrieval.vectors.base.VectorStore`, which this module does not know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from contracts.models import RetrievedChunk
from infra.retrieval.chunking import Chunk, placed
from infra.retrieval.lexical import SparseVec
from infra.retrieval.vectors.codec import chunk_vectors
from infra.retrieval.vectors.filtering import META, filterable

DENSE = "dense"
SPARSE = "sparse"
SENTENCES = "sentences"
REF_FIELDS = ("chunk_id", "document_id", "title", "source", "namespace")
"""What a search hit carries: a reference, not the text nor its place in the document (page,
section): fusion's `hydrate` adds those to the chunks it keeps, so rankings stay small."""


@dataclass(frozen=True)
class Sentences:
    """A chunk's sentences: character spans into its text and one unit vector per span."""

    spans: list[tuple[int, int]]
    vectors: np.ndarray


@dataclass(frozen=True)
class StoredPoint:
    id: str
    dense: list[float]
    sparse: SparseVec
    sentences: list[list[float]] | None
    payload: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Record:
    id: str
    payload: Mapping[str, Any]
    vectors: Mapping[str, Any]


class StoreMismatch(ValueError):
    """A namespace's collection was made for another encoder (dense size or sparse kind)."""


def mismatch(name: str, dim: int | None, idf: bool, want_dim: int, want_idf: bool) -> StoreMismatch:
    kind = {True: "IDF-weighted (BM25)", False: "learned"}
    return StoreMismatch(
        f"{name} holds dense dim {dim} and {kind[idf]} sparse vectors, but the configured "
        f"models make dim {want_dim} and {kind[want_idf]} ones: re-ingest under another "
        "RAGBUS_QDRANT_COLLECTION_PREFIX or data directory"
    )


def to_chunk(hit: Hit | Record, namespace: str, score: float = 0.0) -> RetrievedChunk:
    """A reference to a stored chunk; its place (`placed`) where the payload read has it
    (searches read only `REF_FIELDS`: hydration adds the place)."""
    payload = hit.payload
    return RetrievedChunk(
        chunk_id=str(payload.get("chunk_id") or hit.id),
        document_id=str(payload.get("document_id", "")),
        title=str(payload.get("title", "")),
        source=str(payload.get("source", "")),
        namespace=str(payload.get("namespace") or namespace),
        score=float(hit.score) if isinstance(hit, Hit) else score,
        **placed(payload),
    )


def ids_by_namespace(chunks: Sequence[RetrievedChunk]) -> dict[str, list[str]]:
    """The chunks' ids, grouped by the namespace (the collection) that holds them."""
    by_namespace: dict[str, list[str]] = {}
    for chunk in chunks:
        by_namespace.setdefault(chunk.namespace, []).append(chunk.chunk_id)
    return by_namespace


def stored_point(
    namespace: str,
    chunk: Chunk,
    vector: np.ndarray,
    sparse: SparseVec,
    content_hash: str,
    chunk_count: int,
    found: Sentences | None,
    metadata: Mapping[str, Any] | None = None,
) -> StoredPoint:
    """The point a chunk is stored as: its vectors, and a payload with its text, its place
    in its document, its document's metadata as filters read it (`META`), and the content
    hash and chunk count that chunk 0 carries for the document's bookkeeping."""
    spans: list[tuple[int, int]] = []
    rows: list[list[float]] | None = None
    if found is not None and found.spans:
        if len(found.vectors) != len(found.spans):
            raise ValueError("one sentence vector per span is required")
        spans = list(found.spans)
        rows = np.asarray(found.vectors, dtype=np.float32).tolist()
    return StoredPoint(
        id=chunk.chunk_id,
        dense=np.asarray(vector, dtype=np.float32).tolist(),
        sparse=(list(sparse[0]), list(sparse[1])),
        sentences=rows,
        payload={
            "chunk_id": chunk.chunk_id,
            "document_id": chunk.document_id,
            "title": chunk.title,
            "source": chunk.source,
            "namespace": namespace,
            "text": chunk.text,
            "heading": chunk.heading,
            **(
                {"page": chunk.page, "page_label": chunk.page_label}
                if chunk.page is not None
                else {}
            ),
            "index": chunk.index,
            "content_hash": content_hash,
            "chunk_count": chunk_count,
            "spans": [[int(a), int(b)] for a, b in spans],
            META: filterable(metadata or {}),
        },
    )


def hydrated(chunk: RetrievedChunk, stored: Record, dim: int) -> RetrievedChunk:
    """`chunk` completed from its stored record: the text, the title, source and document
    its reference may lack, its place in the document where it has none, and the vectors
    (`dim`: the dense size, which the sentence rows share)."""
    payload = stored.payload
    update: dict[str, Any] = {
        "text": str(payload.get("text", "")) or chunk.text,  # the spans index the stored text
        "title": chunk.title or str(payload.get("title", "")),
        "source": chunk.source or str(payload.get("source", "")),
        "document_id": chunk.document_id or str(payload.get("document_id", "")),
    }
    place = placed(payload)
    if chunk.page is None and "page" in place:
        update["page"], update["page_label"] = place["page"], place.get("page_label", "")
    if not chunk.section and "section" in place:
        update["section"] = place["section"]
    dense = stored.vectors.get(DENSE)
    if dense is not None:
        spans = [(int(a), int(b)) for a, b in payload.get("spans") or []]
        rows = stored.vectors.get(SENTENCES) or []
        if len(rows) != len(spans):  # stored without sentences: generation encodes them
            spans, rows = [], []
        update["vectors"] = chunk_vectors(
            np.asarray(dense, dtype=np.float32),
            spans,
            np.asarray(rows, dtype=np.float32).reshape(len(spans), dim),
        )
    return chunk.model_copy(update=update)
