"""The embedded default: Qdrant Edge, Qdrant's own engine in this process (`qdrant-edge-py`).

One Edge shard per namespace, in `<data dir>/vectors/<namespace>`. The same segments, HNSW and
sparse index as a Qdrant server, without one: a dense search over 10k chunks takes about half
a millisecond, where qdrant-client's local mode (a Python scan, meant for tests) took 13 ms, and
a sparse one 0.5 ms instead of 129 ms (FINDINGS.md; README, Benchmark).

A shard per namespace rather than one shard filtered by a `namespace` payload field: measured
on NFCorpus (9,299 chunks, three namespaces in one shard with a tenant keyword index), the
filter cost dense searches 20% and sparse ones 2.7x, sparse IDF then needing a corpus filter
of its own.

Writes go to the shard's write-ahead log at once; `optimize()` (run after an ingest job, off
the query path) builds the HNSW index over what was appended. Like any embedded store, one
process owns the directory.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    HnswIndexConfig,
    MatchAny,
    MatchValue,
    Memory,
    Modifier,
    MultiVectorComparator,
    MultiVectorConfig,
    PayloadSchemaType,
    Point,
    Query,
    QueryRequest,
    ScrollRequest,
    SearchParams,
    SparseVector,
    UpdateOperation,
    VectorStorageDatatype,
)

from contracts.filters import Node, matches
from infra.logging import get_logger
from infra.retrieval.vectors.base import VectorStore
from infra.retrieval.vectors.documents_table import DocumentsTable
from infra.retrieval.vectors.filtering import META, restored
from infra.retrieval.vectors.points import (
    DENSE,
    SENTENCES,
    SPARSE,
    Hit,
    Record,
    StoredPoint,
    mismatch,
)
from infra.sparse_copy import copy_tree

log = get_logger(__name__)

CONFIG_FILE = "edge_config.json"
"""Where Edge persists a shard's configuration (its documented file)."""
SEARCH_THREADS = 1
"""A search touches a few small segments: one thread each is cheaper than a pool hand-off, and
the process has other requests to run on the other core."""


EXACT_MAX_POINTS = 20_000
"""Dense searches over at most this many chunks read every vector: under a millisecond at 10k
(0.86 ms against HNSW's 0.32), and HNSW's 97% recall@20 cost NFCorpus 0.009 nDCG@10."""
HNSW_EF = 256
"""The beam of an HNSW search over a bigger shard: recall@20 against exact 0.992 on NFCorpus
(default beam: 0.973), 0.6 ms."""
EXACT = SearchParams(exact=True)
APPROXIMATE = SearchParams(hnsw_ef=HNSW_EF)


def _shard_config(dim: int, sparse_idf: bool) -> EdgeConfig:
    return EdgeConfig(
        vectors={
            DENSE: EdgeVectorParams(size=dim, distance=Distance.Cosine),
            SENTENCES: EdgeVectorParams(
                size=dim,
                distance=Distance.Cosine,
                multivector_config=MultiVectorConfig(MultiVectorComparator.MaxSim),
                datatype=VectorStorageDatatype.Float16,
                # read back by id, never searched: no index
                hnsw_config=HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000),
            ),
        },
        sparse_vectors={
            SPARSE: EdgeSparseVectorParams(modifier=Modifier.Idf if sparse_idf else None)
        },
        payload_memory=Memory.Cached,
        max_search_threads=SEARCH_THREADS,
    )


def _stored_kind(directory: Path) -> tuple[int | None, bool]:
    """(dense size, sparse IDF) of an existing shard, from its persisted configuration."""
    config = json.loads((directory / CONFIG_FILE).read_text())
    dense = (config.get("vectors") or {}).get(DENSE) or {}
    sparse = (config.get("sparse_vectors") or {}).get(SPARSE) or {}
    return dense.get("size"), str(sparse.get("modifier", "")).lower() == "idf"


def _vector(point: StoredPoint) -> dict[str, Any]:
    vectors: dict[str, Any] = {
        DENSE: point.dense,
        SPARSE: SparseVector(point.sparse[0], point.sparse[1]),
    }
    if point.sentences:
        vectors[SENTENCES] = point.sentences
    return vectors


def _with_vector(names: Sequence[str]) -> bool | list[str]:
    return list(names) if names else False


FIRST_CHUNK = FieldCondition(key="index", match=MatchValue(0))
DOCUMENT_ID = "document_id"
"""The payload field every shard has a keyword index on: a filter's documents are named by it."""
NOTHING = object()
"""A filter no document passes: the search is not asked."""
EVERYTHING = object()
"""A filter every document passes: the search needs no condition."""


def _filter(ids: Sequence[str] | None, documents: Any = None) -> Filter | None:
    """Only the points `ids` names, and only those of the documents `documents` keeps (a
    condition on `document_id`, from `EdgeVectorStore._documents_condition`)."""
    must: list[Any] = []
    if ids is not None:
        must.append(HasIdCondition(set(ids)))
    if documents is not None:
        must.append(documents)
    return Filter(must=must) if must else None


def _passing(hits: list[Hit], where: Node) -> list[Hit]:
    """The hits whose own payload passes `where`. The documents table chose them by document
    id, as it stood when it decided the filter; a document written since (its chunks land a
    moment before the table learns its metadata, and a search may hold a decision made before
    either) is judged here by the metadata its chunk carries, so no chunk outside a filter, or
    outside what a user may read (`contracts.access`), is ever returned."""
    return [hit for hit in hits if matches(where, restored(hit.payload.get(META) or {}))]


def _record(raw: Any) -> Record:
    vectors = raw.vector or {}
    if SPARSE in vectors and vectors[SPARSE] is not None:
        sparse = vectors[SPARSE]
        vectors = {**vectors, SPARSE: (list(sparse.indices), list(sparse.values))}
    return Record(str(raw.id), raw.payload or {}, vectors)


class EdgeVectorStore(VectorStore):
    backend = "edge"
    inline_reads = True

    def __init__(self, directory: Path, dim: int, *, sparse_idf: bool = True) -> None:
        super().__init__(dim, sparse_idf=sparse_idf)
        self._dir = directory
        self._dir.mkdir(parents=True, exist_ok=True)
        self._shards: dict[str, EdgeShard] = {}
        self._tables: dict[str, DocumentsTable] = {}
        self._open_lock = threading.Lock()
        self._table_lock = threading.Lock()
        self._optimize_lock = threading.Lock()
        """Held while a shard's segments are rebuilt (`optimize`) or copied (`copy_to`)."""
        self._closed = False

    def _path(self, namespace: str) -> Path:
        return self._dir / namespace

    def _shard(self, namespace: str, create: bool = False) -> EdgeShard | None:
        shard = self._shards.get(namespace)
        if shard is not None:
            return shard
        with self._open_lock:
            shard = self._shards.get(namespace)
            if shard is not None:
                return shard
            path = self._path(namespace)
            if (path / CONFIG_FILE).exists():
                dim, idf = _stored_kind(path)
                if dim != self.dim or idf != self.sparse_idf:
                    raise mismatch(f"vector shard {path}", dim, idf, self.dim, self.sparse_idf)
                shard = EdgeShard.load(str(path))
            elif create:
                if path.exists():  # a shard that never got its configuration written
                    shutil.rmtree(path)
                shard = EdgeShard.create(str(path), _shard_config(self.dim, self.sparse_idf))
                log.info("vector_shard_created", path=str(path), dim=self.dim, idf=self.sparse_idf)
            else:
                return None
            if DOCUMENT_ID not in shard.info().payload_schema:  # a shard made before filters
                shard.update(
                    UpdateOperation.create_field_index(DOCUMENT_ID, PayloadSchemaType.Keyword)
                )
            self._shards[namespace] = shard
            return shard

    def _must(self, namespace: str) -> EdgeShard:
        shard = self._shard(namespace)
        if shard is None:
            raise KeyError(namespace)
        return shard

    def namespaces(self) -> list[str]:
        return sorted(p.name for p in self._dir.iterdir() if (p / CONFIG_FILE).exists())

    def _exists(self, namespace: str) -> bool:
        return self._shard(namespace) is not None

    def _ensure(self, namespace: str) -> None:
        self._shard(namespace, create=True)

    # ---------------------------------------------------------------- the documents' metadata

    def _table(self, namespace: str) -> DocumentsTable:
        """The namespace's `DocumentsTable`, read from its first chunks the first time."""
        table = self._tables.get(namespace)
        if table is not None:
            return table
        with self._table_lock:
            table = self._tables.get(namespace)
            if table is None:
                shard, offset, rows = self._must(namespace), None, []
                while True:
                    records, offset = shard.scroll(
                        ScrollRequest(
                            offset=offset,
                            limit=1024,
                            filter=Filter(must=[FIRST_CHUNK]),
                            with_payload=[DOCUMENT_ID, META],
                        )
                    )
                    for record in records:
                        payload = record.payload or {}
                        rows.append((str(payload[DOCUMENT_ID]), restored(payload.get(META) or {})))
                    if offset is None:
                        break
                table = self._tables[namespace] = DocumentsTable(rows)
                log.info("documents_table_loaded", namespace=namespace, documents=len(table))
            return table

    def _document_written(
        self, namespace: str, document_id: str, metadata: Mapping[str, Any]
    ) -> None:
        table = self._tables.get(namespace)
        if table is not None:
            table.put(document_id, dict(metadata))

    def _document_removed(self, namespace: str, document_id: str) -> None:
        table = self._tables.get(namespace)
        if table is not None:
            table.remove(document_id)

    def _namespace_dropped(self, namespace: str) -> None:
        with self._table_lock:
            self._tables.pop(namespace, None)

    def _documents_condition(self, namespace: str, where: Node) -> Any:
        """A condition on `document_id` that keeps the documents `where` passes: the smaller
        of the kept and the left-out side, by the keyword index; None when every document
        passes, `NOTHING` when none does."""
        table = self._table(namespace)
        decision = table.decide(where)
        if decision.made is None:  # made once a decision: a long MatchAny costs to build
            kept, total = decision.kept, decision.total
            if not kept:
                decision.made = NOTHING
            elif len(kept) == total:
                decision.made = EVERYTHING
            elif len(kept) <= total / 2:
                decision.made = FieldCondition(key=DOCUMENT_ID, match=MatchAny(sorted(kept)))
            else:
                left_out = MatchAny(sorted(table.all() - kept))
                decision.made = Filter(must_not=[FieldCondition(key=DOCUMENT_ID, match=left_out)])
        return None if decision.made is EVERYTHING else decision.made

    def quick(self, namespaces: Sequence[str], where: Node | None) -> bool:
        """A search filtered by `where` is a matter of microseconds once every namespace's
        table has decided it (`DocumentsTable.decided`)."""
        if where is None:
            return True
        for namespace in namespaces:
            table = self._tables.get(namespace)
            if table is None and self._exists(namespace):
                return False
            if table is not None and not table.decided(where):
                return False
        return True

    def matching_documents(self, namespace: str, where: Node) -> set[str]:
        if not self._exists(namespace):
            return set()
        return set(self._table(namespace).decide(where).kept)

    def _drop(self, namespace: str) -> None:
        with self._open_lock:
            shard = self._shards.pop(namespace, None)
            if shard is not None:
                shard.close()
            shutil.rmtree(self._path(namespace), ignore_errors=True)
        log.info("vector_shard_dropped", path=str(self._path(namespace)))

    def _upsert(self, namespace: str, points: Sequence[StoredPoint]) -> None:
        edge_points = [Point(p.id, _vector(p), p.payload) for p in points]
        self._must(namespace).update(UpdateOperation.upsert_points(edge_points))

    def _delete_ids(self, namespace: str, ids: Sequence[str]) -> None:
        self._must(namespace).update(UpdateOperation.delete_points(list(ids)))

    def _delete_document_by_filter(self, namespace: str, document_id: str) -> int:
        shard = self._must(namespace)
        by_document = Filter(
            must=[FieldCondition(key="document_id", match=MatchValue(document_id))]
        )
        found = shard.count(CountRequest(filter=by_document, exact=True))
        if found:
            shard.update(UpdateOperation.delete_points_by_filter(by_document))
        return int(found)

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
        shard = self._must(namespace)
        documents = self._documents_condition(namespace, where) if where is not None else None
        if documents is NOTHING:
            return []
        among = _filter(ids, documents)
        if where is not None:  # each hit is checked against its own payload (`_passing`)
            fields = [*fields, META]
        if using == SPARSE:  # an inverted index: exact as it is
            request = QueryRequest(
                limit=limit,
                query=Query.Nearest(SparseVector(query[0], query[1]), using=using),
                with_payload=list(fields),
                filter=among,
            )
        else:
            # A few given points are scored exactly, whatever the shard's size; so is a
            # filtered search, which HNSW's graph could leave short of `limit` when the filter
            # keeps few points (no payload index links them).
            small = among is not None or shard.info().points_count <= EXACT_MAX_POINTS
            request = QueryRequest(
                limit=limit,
                query=Query.Nearest(query, using=using),
                with_payload=list(fields),
                params=EXACT if small else APPROXIMATE,
                filter=among,
            )
        hits = [Hit(str(p.id), p.score, p.payload or {}) for p in shard.query(request)]
        return hits if where is None else _passing(hits, where)

    def _retrieve(
        self,
        namespace: str,
        ids: Sequence[str],
        payload: bool | Sequence[str],
        vectors: Sequence[str],
    ) -> list[Record]:
        shard = self._must(namespace)
        with_payload = payload if isinstance(payload, bool) else list(payload)
        found = shard.retrieve(list(ids), with_payload, _with_vector(vectors))
        return [_record(raw) for raw in found]

    def _count(self, namespace: str) -> int:
        return int(self._must(namespace).count(CountRequest(exact=True)))

    def _scroll(self, namespace: str, batch: int) -> Iterable[Record]:
        shard = self._must(namespace)
        offset = None
        while True:
            records, offset = shard.scroll(
                ScrollRequest(
                    offset=offset, limit=batch, with_payload=True, with_vector=[DENSE, SPARSE]
                )
            )
            yield from (_record(raw) for raw in records)
            if offset is None:
                return

    def optimize(self) -> None:
        """Flush every shard and build its indexes; the searches go on meanwhile."""
        for namespace, shard in list(self._shards.items()):
            with self._optimize_lock:
                with self._write_lock:
                    shard.flush()
                if shard.optimize():
                    log.info("vector_shard_optimized", namespace=namespace, **_info(shard))

    def copy_to(self, destination: Path) -> bool:
        """Every shard flushed and its files copied while no write, optimisation or opening
        of a shard runs: one point of the whole store. Searches go on meanwhile; writes wait
        for the copy (about a second a hundred megabytes)."""
        with self._optimize_lock, self._write_lock, self._open_lock:
            for shard in self._shards.values():
                shard.flush()
            copy_tree(self._dir, destination)
            self.copied_writes = self.writes
        return True

    def ping(self) -> bool:
        return not self._closed and self._dir.is_dir()

    def close(self) -> None:
        with self._write_lock, self._open_lock:
            for shard in self._shards.values():
                shard.flush()
                shard.close()
            self._shards.clear()
            self._closed = True


def _info(shard: EdgeShard) -> dict[str, int]:
    info = shard.info()
    return {
        "points": info.points_count,
        "segments": info.segments_count,
        "indexed_vectors": info.indexed_vectors_count,
    }
