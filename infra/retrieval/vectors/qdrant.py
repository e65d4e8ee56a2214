"""A Qdrant server through `qdrant-client` (`RAGBUS_QDRANT_URL`): one collection per namespace,
named `<RAGBUS_QDRANT_COLLECTION_PREFIX><namespace>`.

The same class runs against qdrant-client's local mode (`path=` or `:memory:`), which the
contract tests use where no server runs: local mode is a Python scan meant for tests, slow and
not thread-safe, so every call here holds one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from contracts.filters import All, AnyOf, Condition, Node, Not, rfc3339
from infra.logging import get_logger
from infra.retrieval.vectors.base import VectorStore
from infra.retrieval.vectors.filtering import META, filterable, keyword
from infra.retrieval.vectors.points import (
    DENSE,
    SENTENCES,
    SPARSE,
    Hit,
    Record,
    StoredPoint,
    mismatch,
)

log = get_logger(__name__)


def _by_document(document_id: str) -> qm.Filter:
    return qm.Filter(
        must=[qm.FieldCondition(key="document_id", match=qm.MatchValue(value=document_id))]
    )


def _equals_any(key: str, values: tuple[Any, ...]) -> Any:
    """A condition that holds when the field equals any of `values`: a number by a closed
    range (so `2020` finds a stored `2020.0`: a `MatchValue` takes integers only), strings
    and booleans (tagged, `filtering.keyword`) by one match."""
    words = [keyword(v) for v in values if isinstance(v, str | bool)]
    numbers = [float(v) for v in values if not isinstance(v, str | bool)]
    parts: list[Any] = [qm.FieldCondition(key=key, range=qm.Range(gte=n, lte=n)) for n in numbers]
    if len(words) == 1:
        parts.append(qm.FieldCondition(key=key, match=qm.MatchValue(value=words[0])))
    elif words:
        parts.append(qm.FieldCondition(key=key, match=qm.MatchAny(any=words)))
    return parts[0] if len(parts) == 1 else qm.Filter(should=parts)


def _condition(c: Condition) -> Any:
    key = f"{META}.{c.field}"
    if c.op == "exists":
        empty = qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))
        return qm.Filter(must_not=[empty]) if c.value else empty
    if c.op in ("eq", "ne", "in", "nin"):
        found = _equals_any(key, c.value if isinstance(c.value, tuple) else (c.value,))
        return found if c.op in ("eq", "in") else qm.Filter(must_not=[found])
    if isinstance(c.value, datetime):
        return qm.FieldCondition(key=key, range=qm.DatetimeRange(**{c.op: rfc3339(c.value)}))
    return qm.FieldCondition(key=key, range=qm.Range(**{c.op: float(c.value)}))


def _compiled(node: Node) -> Any:
    """A metadata filter (`contracts.filters`) as a payload filter on `meta`; the contract
    tests hold its answers to `contracts.filters.matches`."""
    if isinstance(node, All):
        return qm.Filter(must=[_compiled(part) for part in node.parts])
    if isinstance(node, AnyOf):
        return qm.Filter(should=[_compiled(part) for part in node.parts])
    if isinstance(node, Not):
        return qm.Filter(must_not=[_compiled(node.part)])
    return _condition(node)


FIRST_CHUNK = qm.FieldCondition(key="index", match=qm.MatchValue(value=0))


def _filter(ids: Sequence[str] | None, where: Node | None) -> qm.Filter | None:
    """Only the points `ids` names, and only those `where` lets through."""
    must: list[Any] = []
    if ids is not None:
        must.append(qm.HasIdCondition(has_id=list(ids)))
    if where is not None:
        must.append(_compiled(where))
    return qm.Filter(must=must) if must else None


def _vectors(point: StoredPoint) -> dict[str, Any]:
    vectors: dict[str, Any] = {
        DENSE: point.dense,
        SPARSE: qm.SparseVector(indices=point.sparse[0], values=point.sparse[1]),
    }
    if point.sentences:
        vectors[SENTENCES] = point.sentences
    return vectors


def _record(raw: qm.Record) -> Record:
    vectors: dict[str, Any] = dict(raw.vector) if isinstance(raw.vector, dict) else {}
    sparse = vectors.get(SPARSE)
    if isinstance(sparse, qm.SparseVector):
        vectors[SPARSE] = (list(sparse.indices), list(sparse.values))
    return Record(str(raw.id), raw.payload or {}, vectors)


class QdrantVectorStore(VectorStore):
    backend = "qdrant"

    def __init__(
        self, client: QdrantClient, dim: int, prefix: str = "ragbus_", *, sparse_idf: bool = True
    ) -> None:
        super().__init__(dim, sparse_idf=sparse_idf)
        self._client = client
        self._prefix = prefix
        self._lock = threading.RLock()
        self._known: set[str] = set()

    def collection_name(self, namespace: str) -> str:
        return self._prefix + namespace

    def namespaces(self) -> list[str]:
        with self._lock:
            names = [c.name for c in self._client.get_collections().collections]
        return sorted(n.removeprefix(self._prefix) for n in names if n.startswith(self._prefix))

    def _exists(self, namespace: str) -> bool:
        name = self.collection_name(namespace)
        if name in self._known:
            return True
        with self._lock:
            if not self._client.collection_exists(name):
                return False
            self._check_config(name)
            self._known.add(name)
        return True

    def _drop(self, namespace: str) -> None:
        name = self.collection_name(namespace)
        with self._lock:
            self._client.delete_collection(name)
            self._known.discard(name)

    def _check_config(self, name: str) -> None:
        """Refuse a collection made for another encoder: its dense size or sparse kind differ."""
        params = self._client.get_collection(name).config.params
        dense = params.vectors.get(DENSE) if isinstance(params.vectors, dict) else None
        sparse = (params.sparse_vectors or {}).get(SPARSE)
        dim = dense.size if dense is not None else None
        idf = sparse is not None and sparse.modifier == qm.Modifier.IDF
        if dim != self.dim or idf != self.sparse_idf:
            raise mismatch(f"collection {name}", dim, idf, self.dim, self.sparse_idf)

    def _ensure(self, namespace: str) -> None:
        if self._exists(namespace):
            return
        name = self.collection_name(namespace)
        with self._lock:
            self._client.create_collection(
                name,
                vectors_config={
                    DENSE: qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE),
                    SENTENCES: qm.VectorParams(
                        size=self.dim,
                        distance=qm.Distance.COSINE,
                        multivector_config=qm.MultiVectorConfig(
                            comparator=qm.MultiVectorComparator.MAX_SIM
                        ),
                        datatype=qm.Datatype.FLOAT16,
                        hnsw_config=qm.HnswConfigDiff(m=0),  # read back by id, never searched
                    ),
                },
                sparse_vectors_config={
                    SPARSE: qm.SparseVectorParams(
                        modifier=qm.Modifier.IDF if self.sparse_idf else None
                    )
                },
            )
        self._known.add(name)
        log.info("collection_created", collection=name, dim=self.dim, sparse_idf=self.sparse_idf)

    def _upsert(self, namespace: str, points: Sequence[StoredPoint]) -> None:
        structs = [qm.PointStruct(id=p.id, vector=_vectors(p), payload=p.payload) for p in points]
        with self._lock:
            self._client.upsert(self.collection_name(namespace), points=structs)

    def _delete_ids(self, namespace: str, ids: Sequence[str]) -> None:
        with self._lock:
            self._client.delete(
                self.collection_name(namespace), points_selector=qm.PointIdsList(points=list(ids))
            )

    def _announced(self, namespace: str, document_id: str, metadata: Mapping[str, Any]) -> None:
        """The server filters each point by its own `meta`: the document's chunks written
        before take the new metadata now (a no-op for a new document)."""
        with self._lock:
            self._client.set_payload(
                self.collection_name(namespace),
                payload={META: filterable(metadata)},
                points=_by_document(document_id),
            )

    def _delete_document_by_filter(self, namespace: str, document_id: str) -> int:
        name = self.collection_name(namespace)
        with self._lock:
            found = self._client.count(name, count_filter=_by_document(document_id)).count
            if found:
                self._client.delete(
                    name, points_selector=qm.FilterSelector(filter=_by_document(document_id))
                )
        return found

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
        vector = qm.SparseVector(indices=query[0], values=query[1]) if using == SPARSE else query
        # a few ids: below the full-scan threshold, scored exactly; a filtered dense search is
        # exact too, as HNSW could leave it short of `limit` when the filter keeps few points
        among = _filter(ids, where)
        exact = where is not None and using != SPARSE
        with self._lock:
            response = self._client.query_points(
                self.collection_name(namespace),
                query=vector,
                using=using,
                limit=limit,
                with_payload=list(fields),
                query_filter=among,
                search_params=qm.SearchParams(exact=True) if exact else None,
            )
        return [Hit(str(p.id), p.score, p.payload or {}) for p in response.points]

    def _retrieve(
        self,
        namespace: str,
        ids: Sequence[str],
        payload: bool | Sequence[str],
        vectors: Sequence[str],
    ) -> list[Record]:
        with_payload = payload if isinstance(payload, bool) else list(payload)
        with self._lock:
            found = self._client.retrieve(
                self.collection_name(namespace),
                ids=list(ids),
                with_payload=with_payload,
                with_vectors=list(vectors) if vectors else False,
            )
        return [_record(raw) for raw in found]

    def matching_documents(self, namespace: str, where: Node) -> set[str]:
        if not self._exists(namespace):
            return set()
        wanted = qm.Filter(must=[FIRST_CHUNK, _compiled(where)])
        found: set[str] = set()
        offset: Any = None
        while True:
            with self._lock:
                records, offset = self._client.scroll(
                    self.collection_name(namespace),
                    scroll_filter=wanted,
                    limit=1024,
                    offset=offset,
                    with_payload=["document_id"],
                )
            found.update(str((r.payload or {}).get("document_id", "")) for r in records)
            if offset is None:
                return found

    def _count(self, namespace: str) -> int:
        with self._lock:
            return self._client.count(self.collection_name(namespace), exact=True).count

    def _scroll(self, namespace: str, batch: int) -> Iterable[Record]:
        offset: Any = None
        while True:
            with self._lock:
                records, offset = self._client.scroll(
                    self.collection_name(namespace),
                    limit=batch,
                    offset=offset,
                    with_payload=True,
                    with_vectors=[DENSE, SPARSE],
                )
            yield from (_record(raw) for raw in records)
            if offset is None:
                return

    def optimize(self) -> None:
        """A Qdrant server indexes in the background by itself."""

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
