"""A data directory from before Qdrant Edge: refused with a clear message, then migrated with
nothing lost (`ragbus migrate-vectors`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.retrieval.lexical import SparseEncoder
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.vectors import open_vector_store
from infra.retrieval.vectors.codec import sentences_of
from infra.retrieval.vectors.legacy import UnmigratedVectors, legacy_namespaces, migrate
from infra.settings import Settings
from tests.unit.fakes import FakeEncoder

DIM = 32
DOCS = [
    DocumentIn(id="locks", title="Locks", text="The Gatun Locks raise ships. Work began in 1909."),
    DocumentIn(id="cut", title="Culebra", text="The Culebra Cut crosses the divide. " * 30),
    DocumentIn(id="other", title="Other", text="Another namespace entirely.", namespace="misc"),
]


def _old_local_mode(settings: Settings, encoder: FakeEncoder) -> int:
    """Write what the previous vector store wrote: a collection per namespace in local mode,
    dense + IDF sparse vectors, the chunk's payload; no sentence vectors."""
    client = QdrantClient(path=str(settings.qdrant_path))
    sparse = SparseEncoder()
    points = 0
    for doc in DOCS:
        name = settings.qdrant_collection_prefix + doc.namespace
        if not client.collection_exists(name):
            client.create_collection(
                name,
                vectors_config={"dense": qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)},
                sparse_vectors_config={"sparse": qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
            )
        chunks = chunk_document(doc, 200, 0)
        dense = encoder.encode([c.embedding_text for c in chunks])
        client.upsert(
            name,
            points=[
                qm.PointStruct(
                    id=c.chunk_id,
                    vector={
                        "dense": v.tolist(),
                        "sparse": qm.SparseVector(
                            indices=sparse.encode_document(c.text)[0],
                            values=sparse.encode_document(c.text)[1],
                        ),
                    },
                    payload={
                        "chunk_id": c.chunk_id,
                        "document_id": c.document_id,
                        "title": c.title,
                        "source": c.source,
                        "namespace": doc.namespace,
                        "text": c.text,
                        "heading": c.heading,
                        "index": c.index,
                        "content_hash": doc.content_hash(),
                        "chunk_count": len(chunks),
                    },
                )
                for c, v in zip(chunks, dense, strict=True)
            ],
        )
        points += len(chunks)
    client.close()
    return points


def test_an_old_data_directory_is_refused_then_migrated(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    encoder = FakeEncoder(DIM)
    points = _old_local_mode(settings, encoder)
    assert legacy_namespaces(settings) == ["default", "misc"]

    with pytest.raises(UnmigratedVectors, match="ragbus migrate-vectors") as refused:
        open_vector_store(settings, DIM)
    assert "default, misc" in str(refused.value)

    target = open_vector_store(settings, DIM, migrating=True)
    seen: list[tuple[str, int, int]] = []
    report = migrate(settings, target, encoder, progress=lambda *step: seen.append(step))
    try:
        assert sum(report.namespaces.values()) == points
        assert report.kept_at and Path(report.kept_at).is_dir()  # kept, renamed, not deleted
        assert seen[-1][1] == seen[-1][2]
        assert legacy_namespaces(settings) == []
        assert target.count("default") + target.count("misc") == points
        assert target.document_hash("default", "locks") == DOCS[0].content_hash()

        gatun = SparseEncoder().encode_query("gatun")
        [hit] = target.hydrate(target.search_sparse(["default"], *gatun, 1))
        assert hit.document_id == "locks" and hit.vectors is not None
        spans = sentence_spans(hit.text)
        assert hit.vectors.spans == spans  # sentence vectors added by the migration
        shown = [clean_sentence(hit.text[a:b]) for a, b in spans]
        assert np.allclose(sentences_of(hit.vectors), encoder.encode(shown), atol=1e-2)
    finally:
        target.close()
    open_vector_store(settings, DIM).close()  # no longer refused
