"""The source of a `ragbus bench-scale` corpus (`bench.scale_build`): one namespace that was
ingested for real, read back as its stored points grouped by document (documents by id, chunks
by index), with the entities ingestion found in each chunk.

The source belongs to the `ragbus up` that ingested it, so only copies are opened: its Edge shard
and graph directory are copied to a temporary directory first (copy at a quiet moment: a shard
copied in the middle of a write is as torn as the write).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from contracts.models import RetrievedChunk
from infra.retrieval.entities import Entity, EntityKind
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.lexical import SparseVec
from infra.retrieval.vectors.codec import sentences_of
from infra.retrieval.vectors.edge import CONFIG_FILE, EdgeVectorStore, _stored_kind
from infra.retrieval.vectors.points import DENSE, SPARSE, StoredPoint
from infra.settings import Settings

READ_BATCH = 256

Progress = Callable[[str, int, int], None]
"""`progress(stage, done, total)`, how `build_corpus` reports (`read_source` the first stage).
Stages, in order: `read` (source points read), `write` (chunks written to both stores, of the
target), `optimize` and `communities` (0 of 1 when they start, 1 of 1 when they end)."""


@dataclass
class SourcePoint:
    id: str
    payload: dict[str, Any]
    dense: np.ndarray
    sparse: SparseVec
    sentences: np.ndarray | None
    """One row per stored span, or None when the chunk was stored without them."""

    @property
    def index(self) -> int:
        return int(self.payload.get("index") or 0)

    @property
    def spans(self) -> list[tuple[int, int]]:
        return [(int(a), int(b)) for a, b in self.payload.get("spans") or []]

    def stored(self) -> StoredPoint:
        return StoredPoint(
            id=self.id,
            dense=self.dense.tolist(),
            sparse=(list(self.sparse[0]), list(self.sparse[1])),
            sentences=None if self.sentences is None else self.sentences.tolist(),
            payload=dict(self.payload),
        )


@dataclass
class SourceDocument:
    document_id: str
    title: str
    points: list[SourcePoint] = field(default_factory=list)
    entities: dict[str, list[Entity]] = field(default_factory=dict)
    """chunk id -> the entities ingestion found in it, in order."""


@dataclass
class Source:
    dim: int
    documents: list[SourceDocument]
    entities: int
    """Distinct entities of the namespace."""

    @property
    def chunks(self) -> int:
        return sum(len(doc.points) for doc in self.documents)


def _read_vectors(
    shard_root: Path, namespace: str, progress: Progress
) -> tuple[int, list[SourcePoint]]:
    dim, idf = _stored_kind(shard_root / namespace)
    if dim is None:
        raise ValueError(f"{shard_root / namespace} records no dense vector size")
    if not idf:
        raise ValueError(
            f"{shard_root / namespace} holds learned (BGE-M3) sparse vectors: a perturbed copy "
            "would need the model to remake them; only BM25 namespaces can be scaled this way"
        )
    store = EdgeVectorStore(shard_root, dim, sparse_idf=True)
    try:
        total = store.count(namespace)
        records = []
        for record in store.iter_points(namespace, READ_BATCH):
            records.append(record)
            if len(records) % (READ_BATCH * 8) == 0:
                progress("read", len(records), total)
        points: list[SourcePoint] = []
        for start in range(0, len(records), READ_BATCH):
            batch = records[start : start + READ_BATCH]
            refs = [
                RetrievedChunk(
                    chunk_id=r.id,
                    document_id=str(r.payload.get("document_id", "")),
                    namespace=namespace,
                )
                for r in batch
            ]
            # the sentence vectors: `iter_points` reads dense and sparse only, hydration all
            hydrated = {chunk.chunk_id: chunk for chunk in store.hydrate(refs)}
            for record in batch:
                found = hydrated.get(record.id)
                vectors = found.vectors if found is not None else None
                sentences = None
                if vectors is not None and vectors.spans:
                    sentences = sentences_of(vectors)
                indices, values = record.vectors[SPARSE]
                points.append(
                    SourcePoint(
                        id=record.id,
                        payload=dict(record.payload),
                        dense=np.asarray(record.vectors[DENSE], dtype=np.float32),
                        sparse=(list(indices), list(values)),
                        sentences=sentences,
                    )
                )
        progress("read", len(points), total)
        return dim, points
    finally:
        store.close()


async def _read_graph(graph_dir: Path, namespace: str) -> list[dict[str, Any]]:
    """The namespace's document records as the embedded store persists them, from a copy that
    is loaded (journal replayed) and closed (journal folded into the snapshot) first."""
    store = EmbeddedGraphStore(graph_dir)
    await asyncio.to_thread(store.load)
    await store.aclose()
    data = read_json(graph_dir / EmbeddedGraphStore.SNAPSHOT) or {}
    return [record for record in data.get("documents", []) if record["namespace"] == namespace]


async def read_source(
    source_data_dir: Path, namespace: str, work_dir: Path, progress: Progress
) -> Source:
    """Copy the namespace's Edge shard and the graph directory into `work_dir` and read the
    copies: the points grouped by document (documents by id, chunks by index), each chunk's
    entities from the graph. The source itself is only read by the copying."""
    source = Settings(data_dir=source_data_dir)
    shard = source.vectors_path / namespace
    if not (shard / CONFIG_FILE).exists():
        raise FileNotFoundError(f"no vector shard for namespace {namespace!r} in {shard}")
    if not source.graph_path.is_dir():
        raise FileNotFoundError(f"no embedded graph in {source.graph_path}")
    await asyncio.to_thread(shutil.copytree, shard, work_dir / "vectors" / namespace)
    await asyncio.to_thread(shutil.copytree, source.graph_path, work_dir / "graph")
    dim, points = await asyncio.to_thread(_read_vectors, work_dir / "vectors", namespace, progress)
    records = await _read_graph(work_dir / "graph", namespace)
    by_document: dict[str, SourceDocument] = {}
    for point in points:
        document_id = str(point.payload.get("document_id", ""))
        doc = by_document.get(document_id)
        if doc is None:
            title = str(point.payload.get("title", ""))
            doc = by_document[document_id] = SourceDocument(document_id, title)
        doc.points.append(point)
    norms: set[str] = set()
    for record in records:
        doc = by_document.get(record["document_id"])
        for chunk, entities in zip(record["chunks"], record["entities"], strict=True):
            found = [Entity(e["name"], e["norm"], cast(EntityKind, e["kind"])) for e in entities]
            norms.update(e.norm for e in found)
            if doc is not None:
                doc.entities[chunk["chunk_id"]] = found
    documents = sorted(by_document.values(), key=lambda d: d.document_id)
    for doc in documents:
        doc.points.sort(key=lambda p: p.index)
    return Source(dim, documents, len(norms))


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
