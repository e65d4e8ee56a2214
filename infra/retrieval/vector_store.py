"""Dense and sparse chunk vectors in Qdrant, one collection per namespace.

Per-namespace collections instead of a `namespace` payload filter: in local mode a filter
costs ~70 ms per query (FINDINGS.md), and a namespace is what every query filters on.

A document's chunks have deterministic ids (`infra.retrieval.text.chunk_id_for`), and its first
chunk carries the content hash and chunk count. So reading a document's version, replacing it or
deleting it are lookups by id, never filtered scans, and chunk 0 is written last: it is the
commit marker of a re-ingested document.

The sparse vectors are BM25 term frequencies (the collection applies IDF, `Modifier.IDF`) or
learned weights such as BGE-M3's (complete as they are: no modifier); `sparse_idf` says which,
and an existing collection built for the other kind, or another dense size, is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.text import Chunk, SparseVec, chunk_id_for
from infra.settings import Settings

log = get_logger(__name__)

DENSE = "dense"
SPARSE = "sparse"
UPSERT_BATCH = 256


def _by_document(document_id: str) -> qm.Filter:
    return qm.Filter(
        must=[qm.FieldCondition(key="document_id", match=qm.MatchValue(value=document_id))]
    )


class VectorStore:
    """Synchronous on purpose: callers run it in `asyncio.to_thread`. One lock guards the
    client because local mode is not thread-safe."""

    def __init__(
        self, client: QdrantClient, dim: int, prefix: str = "ragbus_", *, sparse_idf: bool = True
    ) -> None:
        self._client = client
        self._dim = dim
        self._prefix = prefix
        self._sparse_idf = sparse_idf
        self._lock = threading.Lock()
        self._known: set[str] = set()

    # ---------------------------------------------------------------- collections

    def _exists(self, namespace: str) -> bool:
        name = self.collection_name(namespace)
        if name in self._known:
            return True
        if self._client.collection_exists(name):
            self._check_config(name)
            self._known.add(name)
            return True
        return False

    def _check_config(self, name: str) -> None:
        """Refuse a collection made for another encoder: its dense size or sparse kind differ."""
        params = self._client.get_collection(name).config.params
        dense = params.vectors.get(DENSE) if isinstance(params.vectors, dict) else None
        sparse = (params.sparse_vectors or {}).get(SPARSE)
        dim = dense.size if dense is not None else None
        idf = sparse is not None and sparse.modifier == qm.Modifier.IDF
        if dim != self._dim or idf != self._sparse_idf:
            kind = {True: "IDF-weighted (BM25)", False: "learned"}
            raise ValueError(
                f"collection {name} holds dense dim {dim} and {kind[idf]} sparse vectors, but "
                f"the configured models make dim {self._dim} and {kind[self._sparse_idf]} ones: "
                "re-ingest under another RAGBUS_QDRANT_COLLECTION_PREFIX or data directory"
            )

    def _ensure(self, namespace: str) -> str:
        name = self.collection_name(namespace)
        if not self._exists(namespace):
            self._client.create_collection(
                name,
                vectors_config={
                    DENSE: qm.VectorParams(size=self._dim, distance=qm.Distance.COSINE)
                },
                sparse_vectors_config={
                    SPARSE: qm.SparseVectorParams(
                        modifier=qm.Modifier.IDF if self._sparse_idf else None
                    )
                },
            )
            self._known.add(name)
            log.info(
                "collection_created", collection=name, dim=self._dim, sparse_idf=self._sparse_idf
            )
        return name

    # ---------------------------------------------------------------- writes

    def _first_payload(self, namespace: str, document_id: str) -> dict[str, Any] | None:
        if not self._exists(namespace):
            return None
        records = self._client.retrieve(
            self.collection_name(namespace),
            ids=[chunk_id_for(namespace, document_id, 0)],
            with_payload=["content_hash", "chunk_count"],
        )
        return dict(records[0].payload or {}) if records else None

    def collection_name(self, namespace: str) -> str:
        """One collection per namespace: a payload filter costs ~70 ms a query in local mode."""
        return self._prefix + namespace

    def upsert_chunks(
        self,
        namespace: str,
        chunks: Sequence[Chunk],
        dense: np.ndarray,
        sparse: Sequence[SparseVec],
        content_hash: str,
    ) -> None:
        """Write a document's chunks, then drop the chunks an older, longer version left."""
        if not (len(chunks) == len(dense) == len(sparse)):
            raise ValueError("chunks, dense and sparse vectors must have the same length")
        if not chunks:
            return
        if dense.shape[1] != self._dim:
            raise ValueError(f"dense vectors have dim {dense.shape[1]}, expected {self._dim}")
        document_id = chunks[0].document_id
        points = [
            qm.PointStruct(
                id=chunk.chunk_id,
                vector={
                    DENSE: vector.tolist(),
                    SPARSE: qm.SparseVector(indices=list(indices), values=list(values)),
                },
                payload={
                    "chunk_id": chunk.chunk_id,
                    "document_id": chunk.document_id,
                    "title": chunk.title,
                    "source": chunk.source,
                    "namespace": namespace,
                    "text": chunk.text,
                    "heading": chunk.heading,
                    "index": chunk.index,
                    "content_hash": content_hash,
                    "chunk_count": len(chunks),
                },
            )
            for chunk, vector, (indices, values) in zip(chunks, dense, sparse, strict=True)
        ]
        points.sort(key=lambda point: point.payload["index"] == 0)  # type: ignore[index]
        with self._lock:
            name = self._ensure(namespace)
            previous = self._first_payload(namespace, document_id)
            for start in range(0, len(points), UPSERT_BATCH):
                self._client.upsert(name, points=points[start : start + UPSERT_BATCH])
            old_count = int((previous or {}).get("chunk_count") or 0)
            stale = [chunk_id_for(namespace, document_id, i) for i in range(len(chunks), old_count)]
            if stale:
                self._client.delete(name, points_selector=qm.PointIdsList(points=stale))

    def delete_document(self, namespace: str, document_id: str) -> int:
        """Remove a document's chunks; returns how many there were."""
        with self._lock:
            if not self._exists(namespace):
                return 0
            name = self.collection_name(namespace)
            first = self._first_payload(namespace, document_id)
            if first is not None and first.get("chunk_count"):
                ids = [chunk_id_for(namespace, document_id, i) for i in range(first["chunk_count"])]
                self._client.delete(name, points_selector=qm.PointIdsList(points=ids))
                return len(ids)
            # No commit marker (an interrupted first ingestion): fall back to a filtered scan.
            found = self._client.count(name, count_filter=_by_document(document_id)).count
            if found:
                self._client.delete(
                    name, points_selector=qm.FilterSelector(filter=_by_document(document_id))
                )
            return found

    def document_hash(self, namespace: str, document_id: str) -> str | None:
        """The content hash of the stored version of a document, or None if it has none."""
        with self._lock:
            first = self._first_payload(namespace, document_id)
        return str(first["content_hash"]) if first and first.get("content_hash") else None

    # ---------------------------------------------------------------- reads

    def _search(
        self, namespaces: Sequence[str], query: Any, using: str, top_k: int
    ) -> list[RetrievedChunk]:
        hits: list[RetrievedChunk] = []
        with self._lock:
            for namespace in dict.fromkeys(namespaces):
                if not self._exists(namespace):
                    continue
                response = self._client.query_points(
                    self.collection_name(namespace),
                    query=query,
                    using=using,
                    limit=top_k,
                    with_payload=True,
                )
                hits.extend(_to_chunk(point, namespace) for point in response.points)
        hits.sort(key=lambda chunk: chunk.score, reverse=True)
        return hits[:top_k]

    def search_dense(
        self, namespaces: Sequence[str], vector: Sequence[float] | np.ndarray, top_k: int
    ) -> list[RetrievedChunk]:
        query = np.asarray(vector, dtype=np.float32).tolist()
        if len(query) != self._dim:
            raise ValueError(f"query vector has dim {len(query)}, expected {self._dim}")
        return self._search(namespaces, query, DENSE, top_k)

    def search_sparse(
        self,
        namespaces: Sequence[str],
        indices: Sequence[int],
        values: Sequence[float],
        top_k: int,
    ) -> list[RetrievedChunk]:
        if not indices:
            return []
        query = qm.SparseVector(indices=list(indices), values=list(values))
        return self._search(namespaces, query, SPARSE, top_k)

    def count(self, namespace: str) -> int:
        with self._lock:
            if not self._exists(namespace):
                return 0
            return self._client.count(self.collection_name(namespace), exact=True).count

    def ping(self) -> bool:
        try:
            with self._lock:
                self._client.get_collections()
        except Exception as exc:
            log.warning("qdrant_unreachable", error=str(exc))
            return False
        return True

    def close(self) -> None:
        with self._lock:
            self._client.close()


def _to_chunk(point: qm.ScoredPoint, namespace: str) -> RetrievedChunk:
    payload = point.payload or {}
    return RetrievedChunk(
        chunk_id=str(payload.get("chunk_id") or point.id),
        document_id=str(payload.get("document_id", "")),
        title=str(payload.get("title", "")),
        source=str(payload.get("source", "")),
        namespace=str(payload.get("namespace") or namespace),
        text=str(payload.get("text", "")),
        score=float(point.score),
    )


def open_vector_store(settings: Settings, dim: int, *, sparse_idf: bool = True) -> VectorStore:
    """Qdrant server when `qdrant_url` is set, else local mode under the data directory.

    `sparse_idf`: whether new collections apply IDF to the sparse vectors (BM25: yes; learned
    weights: no) — `SparseModel.idf_modifier`."""
    if settings.qdrant_url:
        client = QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key)
        log.info("qdrant_server", url=settings.qdrant_url)
    else:
        settings.qdrant_path.mkdir(parents=True, exist_ok=True)
        client = QdrantClient(path=str(settings.qdrant_path))
        log.info("qdrant_local", path=str(settings.qdrant_path))
    return VectorStore(client, dim, settings.qdrant_collection_prefix, sparse_idf=sparse_idf)
