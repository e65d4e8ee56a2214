"""What every vector store backend shares: the document bookkeeping, the search merge across
namespaces and hydration, over the points of `infra.retrieval.vectors.points`.

A document's chunks have deterministic ids (`infra.retrieval.chunking.chunk_id_for`), and its
first chunk carries the content hash and chunk count. So reading a document's version,
replacing it or deleting it are lookups by id, never filtered scans, and chunk 0 is written
last: it is the commit marker of a re-ingested document.

A backend implements the primitives at the bottom (`_exists` … `_retrieve`); the public
methods are written once here. Backends are synchronous: callers run them off the event loop
when they may take a while (writes, optimisation), and inline when they cost well under a
millisecond (searches against an in-process shard).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from contracts.filters import Node
from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.chunking import Chunk, chunk_id_for
from infra.retrieval.lexical import SparseVec
from infra.retrieval.vectors.filtering import META, restored
from infra.retrieval.vectors.points import (
    DENSE,
    REF_FIELDS,
    SENTENCES,
    SPARSE,
    Hit,
    Record,
    Sentences,
    StoredPoint,
    hydrated,
    ids_by_namespace,
    stored_point,
    to_chunk,
)

log = get_logger(__name__)

T = TypeVar("T")

UPSERT_BATCH = 256


class VectorStore(ABC):
    """Dense, sparse and sentence vectors of chunks, one collection per namespace."""

    backend = "abstract"
    inline_reads = False
    """Whether a search or hydration is cheap enough to run on the event loop (an in-process
    index answering in well under a millisecond) rather than in a thread (a network call)."""

    async def read(self, call: Callable[..., T], *args: Any, heavy: bool = False) -> T:
        """Run one of the read methods the way this backend's cost asks for; a `heavy` one
        (`quick` says no) always in a thread."""
        if self.inline_reads and not heavy:
            return call(*args)
        return await asyncio.to_thread(call, *args)

    def quick(self, namespaces: Sequence[str], where: Node | None) -> bool:
        """Whether a search of `namespaces` filtered by `where` is as cheap as an unfiltered
        one (`read` then runs it where an unfiltered one would run)."""
        return where is None

    def __init__(self, dim: int, *, sparse_idf: bool = True) -> None:
        self.dim = dim
        self.sparse_idf = sparse_idf
        self._write_lock = threading.Lock()
        self.writes = 0
        """Writes taken since the store was opened (each under the write lock): what a search
        replica's copy is fenced by (`contracts.replicas.StoresVersion`)."""
        self.copied_writes: int | None = None
        """`writes` at the point the last `copy_to` copied."""

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """The write lock, and the write counted."""
        with self._write_lock:
            self.writes += 1
            yield

    # ---------------------------------------------------------------- writes

    def upsert_chunks(
        self,
        namespace: str,
        chunks: Sequence[Chunk],
        dense: np.ndarray,
        sparse: Sequence[SparseVec],
        content_hash: str,
        sentences: Sequence[Sentences] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Write a document's chunks, then drop the chunks an older, longer version left.
        `metadata`, the document's, goes with every chunk for filters to read (`META`)."""
        if not (len(chunks) == len(dense) == len(sparse)):
            raise ValueError("chunks, dense and sparse vectors must have the same length")
        if sentences is not None and len(sentences) != len(chunks):
            raise ValueError("one sentence set per chunk is required")
        if not chunks:
            return
        if dense.shape[1] != self.dim:
            raise ValueError(f"dense vectors have dim {dense.shape[1]}, expected {self.dim}")
        document_id = chunks[0].document_id
        per_chunk: Sequence[Sentences | None] = sentences or [None] * len(chunks)
        points = [
            stored_point(
                namespace, chunk, vector, sparse_vec, content_hash, len(chunks), found, metadata
            )
            for chunk, vector, sparse_vec, found in zip(
                chunks, dense, sparse, per_chunk, strict=True
            )
        ]
        points.sort(key=lambda point: point.payload["index"] == 0)  # the commit marker last
        with self._writing():
            self._ensure(namespace)
            previous = self._first_payload(namespace, document_id)
            for start in range(0, len(points), UPSERT_BATCH):
                self._upsert(namespace, points[start : start + UPSERT_BATCH])
            old_count = int((previous or {}).get("chunk_count") or 0)
            stale = [chunk_id_for(namespace, document_id, i) for i in range(len(chunks), old_count)]
            if stale:
                self._delete_ids(namespace, stale)
            self._document_written(namespace, document_id, metadata or {})

    def announce(self, namespace: str, document_id: str, metadata: Mapping[str, Any]) -> None:
        """A document is about to be written with this metadata: decide filters by it from
        now on. The indexer calls it before the document's text reaches the graph, whose
        passages are narrowed by what this store decides (`infra.retrieval.scope`): a version
        sent with narrower readers (`contracts.access`) is never shown through the graph to
        someone its old readers let in, in the moment before its chunks are written here."""
        with self._writing():
            if self._exists(namespace):
                self._announced(namespace, document_id, metadata)

    def write_points(self, namespace: str, points: Sequence[StoredPoint]) -> None:
        """Write prepared points as they are (a migration keeps ids, payloads and vectors)."""
        with self._writing():
            self._ensure(namespace)
            for start in range(0, len(points), UPSERT_BATCH):
                self._upsert(namespace, points[start : start + UPSERT_BATCH])
            for point in points:
                if point.payload.get("index") == 0:
                    meta = restored(point.payload.get(META) or {})
                    self._document_written(namespace, str(point.payload["document_id"]), meta)

    def delete_document(self, namespace: str, document_id: str) -> int:
        """Remove a document's chunks; returns how many there were."""
        with self._writing():
            if not self._exists(namespace):
                return 0
            self._document_removed(namespace, document_id)
            first = self._first_payload(namespace, document_id)
            if first is not None and first.get("chunk_count"):
                ids = [chunk_id_for(namespace, document_id, i) for i in range(first["chunk_count"])]
                self._delete_ids(namespace, ids)
                return len(ids)
            # No commit marker (an interrupted first ingestion): fall back to a filtered scan.
            return self._delete_document_by_filter(namespace, document_id)

    def document_hash(self, namespace: str, document_id: str) -> str | None:
        """The content hash of the stored version of a document, or None if it has none."""
        first = self._first_payload(namespace, document_id)
        return str(first["content_hash"]) if first and first.get("content_hash") else None

    def _first_payload(self, namespace: str, document_id: str) -> dict[str, Any] | None:
        if not self._exists(namespace):
            return None
        found = self._retrieve(
            namespace,
            [chunk_id_for(namespace, document_id, 0)],
            ["content_hash", "chunk_count"],
            (),
        )
        return dict(found[0].payload) if found else None

    # ---------------------------------------------------------------- reads

    def _search(
        self,
        namespaces: Sequence[str],
        using: str,
        query: Any,
        top_k: int,
        where: Node | None = None,
    ) -> list[RetrievedChunk]:
        hits: list[RetrievedChunk] = []
        for namespace in dict.fromkeys(namespaces):
            if self._exists(namespace):
                found = self._query(namespace, using, query, top_k, REF_FIELDS, where=where)
                hits.extend(to_chunk(hit, namespace) for hit in found)
        hits.sort(key=lambda chunk: chunk.score, reverse=True)
        return hits[:top_k]

    def search_dense(
        self,
        namespaces: Sequence[str],
        vector: Sequence[float] | np.ndarray,
        top_k: int,
        where: Node | None = None,
    ) -> list[RetrievedChunk]:
        """References (no text) to the `top_k` chunks nearest to `vector`, best first; with
        `where`, the `top_k` nearest among the chunks whose document's metadata passes it."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if len(query) != self.dim:
            raise ValueError(f"query vector has dim {len(query)}, expected {self.dim}")
        return self._search(namespaces, DENSE, query.tolist(), top_k, where)

    def search_sparse(
        self,
        namespaces: Sequence[str],
        indices: Sequence[int],
        values: Sequence[float],
        top_k: int,
        where: Node | None = None,
    ) -> list[RetrievedChunk]:
        """References (no text) to the `top_k` best sparse (BM25) matches, best first; with
        `where`, among the chunks whose document's metadata passes it."""
        if not indices:
            return []
        return self._search(namespaces, SPARSE, (list(indices), list(values)), top_k, where)

    @abstractmethod
    def matching_documents(self, namespace: str, where: Node) -> set[str]:
        """The ids of the namespace's documents whose metadata passes `where`: what the
        stores that keep no metadata (the graph, the fusion's bridge) narrow their answers by."""

    def _scores(self, chunks: Sequence[RetrievedChunk], using: str, query: Any) -> dict[str, float]:
        scores: dict[str, float] = {}
        for namespace, ids in ids_by_namespace(chunks).items():
            if self._exists(namespace):
                for hit in self._query(namespace, using, query, len(ids), ("chunk_id",), ids):
                    scores[str(hit.payload.get("chunk_id") or hit.id)] = float(hit.score)
        return scores

    def dense_scores(
        self, chunks: Sequence[RetrievedChunk], vector: Sequence[float] | np.ndarray
    ) -> dict[str, float]:
        """What `search_dense` would score each of `chunks` (found by another channel), by
        chunk id; a chunk the store no longer has is left out."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if len(query) != self.dim:
            raise ValueError(f"query vector has dim {len(query)}, expected {self.dim}")
        return self._scores(chunks, DENSE, query.tolist()) if chunks else {}

    def sparse_scores(
        self, chunks: Sequence[RetrievedChunk], indices: Sequence[int], values: Sequence[float]
    ) -> dict[str, float]:
        """What `search_sparse` would score each of `chunks`, by chunk id; a chunk that holds
        none of the query's terms is left out (its score is 0)."""
        if not chunks or not indices:
            return {}
        return self._scores(chunks, SPARSE, (list(indices), list(values)))

    def passages(self, chunks: Sequence[RetrievedChunk]) -> dict[str, tuple[str, np.ndarray]]:
        """Each chunk's stored text and dense vector, by chunk id (a chunk the store no longer
        has is left out): what a feedback search reads of its first hits, without the
        sentence vectors that `hydrate` decodes."""
        found: dict[str, tuple[str, np.ndarray]] = {}
        for namespace, ids in ids_by_namespace(chunks).items():
            if not self._exists(namespace):
                continue
            for record in self._retrieve(namespace, ids, ("chunk_id", "text"), (DENSE,)):
                dense = record.vectors.get(DENSE)
                if dense is not None:
                    chunk_id = str(record.payload.get("chunk_id") or record.id)
                    text = str(record.payload.get("text", ""))
                    found[chunk_id] = (text, np.asarray(dense, dtype=np.float32))
        return found

    def hydrate(self, chunks: Sequence[RetrievedChunk]) -> list[RetrievedChunk]:
        """The chunks with their text, stored vectors and place in their document (page,
        page label, heading path as `section`, where the payload has them), in the same order.

        A reference (no text) the store no longer has (deleted since it was found) is dropped.
        A chunk that already carries its vectors, or whose passage is claimed (a previous
        attempt's), is kept as it is. A chunk that carries its text but no vectors (a graph
        store's copy, as the bridge inserts) gets the stored vectors, or stays as it is when
        the store has none: without them generation and the critic would encode it, ~0.1 s
        of CPU for one passage on the query path."""
        whole = [chunk.claimed or chunk.vectors is not None for chunk in chunks]
        wanted = [chunk for chunk, kept in zip(chunks, whole, strict=True) if not kept]
        found: dict[tuple[str, str], Record] = {}
        for namespace, ids in ids_by_namespace(wanted).items():
            if not self._exists(namespace):
                continue
            for record in self._retrieve(namespace, ids, True, (DENSE, SENTENCES)):
                found[(namespace, str(record.payload.get("chunk_id") or record.id))] = record
        out: list[RetrievedChunk] = []
        for chunk, kept in zip(chunks, whole, strict=True):
            stored = None if kept else found.get((chunk.namespace, chunk.chunk_id))
            if stored is not None:
                out.append(hydrated(chunk, stored, self.dim))
            elif kept or chunk.text:
                out.append(chunk)
        return out

    def count(self, namespace: str) -> int:
        return self._count(namespace) if self._exists(namespace) else 0

    def iter_points(self, namespace: str, batch: int = 256) -> Iterable[Record]:
        """Every point of a namespace with its payload and its dense and sparse vectors."""
        if self._exists(namespace):
            yield from self._scroll(namespace, batch)

    def drop_namespace(self, namespace: str) -> bool:
        """Delete a namespace's collection and everything in it; False when it had none."""
        with self._writing():
            if not self._exists(namespace):
                return False
            self._drop(namespace)
            self._namespace_dropped(namespace)
            return True

    # ---------------------------------------------------------------- what a backend may keep

    def _document_written(
        self, namespace: str, document_id: str, metadata: Mapping[str, Any]
    ) -> None:
        """A document's chunks were written (with its metadata): for a backend that keeps
        something of each document beside the points (Edge's `DocumentsTable`)."""
        return

    def _document_removed(self, namespace: str, document_id: str) -> None:
        """A document is being deleted."""
        return

    def _announced(self, namespace: str, document_id: str, metadata: Mapping[str, Any]) -> None:
        """`announce`'s work: what the backend decides filters by takes the new metadata."""
        self._document_written(namespace, document_id, metadata)

    def _namespace_dropped(self, namespace: str) -> None:
        """A namespace's collection was dropped."""
        return

    # ---------------------------------------------------------------- backend primitives

    @abstractmethod
    def _drop(self, namespace: str) -> None: ...

    @abstractmethod
    def namespaces(self) -> list[str]:
        """Namespaces that have a collection."""

    @abstractmethod
    def _exists(self, namespace: str) -> bool: ...

    @abstractmethod
    def _ensure(self, namespace: str) -> None: ...

    @abstractmethod
    def _upsert(self, namespace: str, points: Sequence[StoredPoint]) -> None: ...

    @abstractmethod
    def _delete_ids(self, namespace: str, ids: Sequence[str]) -> None: ...

    @abstractmethod
    def _delete_document_by_filter(self, namespace: str, document_id: str) -> int: ...

    @abstractmethod
    def _query(
        self,
        namespace: str,
        using: str,
        query: Any,
        limit: int,
        fields: Sequence[str],
        ids: Sequence[str] | None = None,
        where: Node | None = None,
    ) -> list[Hit]:
        """`query` is a dense list of floats, or `(indices, values)` for the sparse vector;
        with `ids`, only those points are scored (exactly); with `where`, only the points
        whose `META` passes it."""

    @abstractmethod
    def _retrieve(
        self,
        namespace: str,
        ids: Sequence[str],
        payload: bool | Sequence[str],
        vectors: Sequence[str],
    ) -> list[Record]: ...

    @abstractmethod
    def _count(self, namespace: str) -> int: ...

    @abstractmethod
    def _scroll(self, namespace: str, batch: int) -> Iterable[Record]: ...

    @abstractmethod
    def optimize(self) -> None:
        """Build indexes over what was written (no-op where the server does it itself)."""

    def copy_to(self, destination: Path) -> bool:
        """Copy the store's files, at one point, into `destination` (made; it must not
        exist): True. False where the store is a server's, which the operator backs up with
        the server's own tools (a backup names it)."""
        return False

    @abstractmethod
    def ping(self) -> bool: ...

    @abstractmethod
    def close(self) -> None: ...
