"""The vector store: dense + sparse, namespaces as collections, replace, delete, reopen.

Runs against Qdrant local mode always, and against a Qdrant server when
`RAGBUS_TEST_QDRANT_URL` points at one (collections get a unique prefix and are removed).
"""

from __future__ import annotations

import os
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from contracts.ingest import DocumentIn
from infra.retrieval.text import SparseEncoder, chunk_document
from infra.retrieval.vector_store import VectorStore, open_vector_store
from infra.settings import Settings

DIM = 8
SPARSE = SparseEncoder()


def _vectors(texts: list[str]) -> np.ndarray:
    """Deterministic unit vectors: one axis per leading keyword, so dense hits are predictable."""
    rows = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        rows[i, zlib.crc32(text.split()[0].lower().encode()) % DIM] = 1.0
        rows[i] += 0.01
        rows[i] /= np.linalg.norm(rows[i])
    return rows


def _index(store: VectorStore, doc: DocumentIn, chunk_chars: int = 200) -> int:
    chunks = chunk_document(doc, chunk_chars=chunk_chars, overlap_chars=0)
    texts = [c.text for c in chunks]
    sparse = [SPARSE.encode_document(t) for t in texts]
    store.upsert_chunks(doc.namespace, chunks, _vectors(texts), sparse, doc.content_hash())
    return len(chunks)


@pytest.fixture(params=["local", "server"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "local":
        yield Settings(data_dir=tmp_path)
        return
    url = os.environ.get("RAGBUS_TEST_QDRANT_URL")
    if not url:
        pytest.skip("Qdrant server tests need RAGBUS_TEST_QDRANT_URL (none on this machine)")
    prefix = f"ragbus_test_{uuid.uuid4().hex[:8]}_"
    client = QdrantClient(url=url)
    try:
        client.get_collections()
    except Exception as exc:
        pytest.skip(f"Qdrant at {url} is not reachable: {exc}")
    yield Settings(data_dir=tmp_path, qdrant_url=url, qdrant_collection_prefix=prefix)
    for collection in client.get_collections().collections:
        if collection.name.startswith(prefix):
            client.delete_collection(collection.name)
    client.close()


@pytest.fixture
def store(settings: Settings) -> Iterator[VectorStore]:
    vs = open_vector_store(settings, DIM)
    yield vs
    vs.close()


STATINS = DocumentIn(id="statins", title="Statins", text="Statins lower cholesterol in adults.")
VITAMIN = DocumentIn(id="vitd", title="Vitamin D", text="Vitamin deficiency weakens bones.")
OTHER_NS = DocumentIn(
    id="statins", title="Other", text="Statins appear in another namespace.", namespace="other"
)


def test_missing_namespace_is_empty_not_an_error(store: VectorStore) -> None:
    assert store.search_dense(["nowhere"], [1.0] * DIM, 5) == []
    assert store.search_sparse(["nowhere"], [1], [1.0], 5) == []
    assert store.count("nowhere") == 0
    assert store.document_hash("nowhere", "x") is None
    assert store.delete_document("nowhere", "x") == 0


def test_dense_and_sparse_search(store: VectorStore) -> None:
    _index(store, STATINS)
    _index(store, VITAMIN)
    query = _vectors(["Statins query"])[0]
    dense = store.search_dense(["default"], query, 2)
    assert dense[0].document_id == "statins"
    assert dense[0].title == "Statins" and dense[0].namespace == "default"
    assert dense[0].score > dense[1].score
    sparse = store.search_sparse(["default"], *SPARSE.encode_query("bones vitamin"), 5)
    assert [c.document_id for c in sparse] == ["vitd"]
    assert sparse[0].text == "Vitamin deficiency weakens bones."


def test_namespaces_are_separate_and_merge_by_score(store: VectorStore) -> None:
    _index(store, STATINS)
    _index(store, OTHER_NS)
    assert store.count("default") == 1 and store.count("other") == 1
    only_other = store.search_sparse(["other"], *SPARSE.encode_query("statins"), 5)
    assert [c.namespace for c in only_other] == ["other"]
    both = store.search_sparse(["default", "other"], *SPARSE.encode_query("statins"), 5)
    assert {c.namespace for c in both} == {"default", "other"}
    assert [c.score for c in both] == sorted((c.score for c in both), reverse=True)


def test_hash_replace_and_delete(store: VectorStore) -> None:
    long_text = " ".join(f"Sentence number {i} about statins." for i in range(30))
    long_doc = DocumentIn(id="statins", title="Statins", text=long_text)
    n_long = _index(store, long_doc)
    assert n_long > 3
    assert store.document_hash("default", "statins") == long_doc.content_hash()
    assert store.count("default") == n_long
    _index(store, STATINS)  # a shorter version leaves no stale chunks behind
    assert store.count("default") == 1
    assert store.document_hash("default", "statins") == STATINS.content_hash()
    assert store.delete_document("default", "statins") == 1
    assert store.count("default") == 0
    assert store.document_hash("default", "statins") is None


def test_reopen_keeps_points(settings: Settings) -> None:
    first = open_vector_store(settings, DIM)
    _index(first, STATINS)
    first.close()
    again = open_vector_store(settings, DIM)
    try:
        assert again.count("default") == 1
        assert again.document_hash("default", "statins") == STATINS.content_hash()
        assert again.ping()
    finally:
        again.close()


def test_dimension_is_checked(store: VectorStore) -> None:
    with pytest.raises(ValueError, match="dim"):
        store.search_dense(["default"], [1.0, 0.0], 3)


def test_learned_sparse_collections_skip_idf_and_a_mismatch_is_refused(
    settings: Settings,
) -> None:
    learned = open_vector_store(settings, DIM, sparse_idf=False)
    try:
        _index(learned, STATINS)
        name = learned.collection_name("default")
        params = learned._client.get_collection(name).config.params
        assert params.sparse_vectors is not None
        assert params.sparse_vectors["sparse"].modifier in (None, qm.Modifier.NONE)
        hits = learned.search_sparse(["default"], *SPARSE.encode_query("statins"), 3)
        assert [h.document_id for h in hits] == ["statins"]
    finally:
        learned.close()
    # BM25 wants IDF; another encoder has another dense size
    for dim, idf in ((DIM, True), (DIM * 2, False)):
        other = open_vector_store(settings, dim, sparse_idf=idf)
        try:
            with pytest.raises(ValueError, match="re-ingest"):
                other.count("default")
        finally:
            other.close()
