"""The vector store contract: dense + sparse + sentence vectors, namespaces, references and
hydration, replace, delete, reopen, the encoder-kind check.

Every test runs against every backend this machine can run: the embedded default (Qdrant Edge),
qdrant-client against its local mode (the server API's code path, without a server), and a
Qdrant server when `RAGBUS_TEST_QDRANT_URL` points at one (collections get a unique prefix and
are removed).
"""

from __future__ import annotations

import os
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.retrieval.lexical import SparseEncoder
from infra.retrieval.sentences import clean_sentence, sentence_spans
from infra.retrieval.vectors import Sentences, StoreMismatch, VectorStore, open_vector_store
from infra.retrieval.vectors.codec import dense_of, sentences_of
from infra.retrieval.vectors.qdrant import QdrantVectorStore
from infra.settings import Settings

DIM = 8
SPARSE = SparseEncoder()

Opener = Callable[..., VectorStore]


def _vectors(texts: list[str]) -> np.ndarray:
    """Deterministic unit vectors: one axis per leading keyword, so dense hits are predictable."""
    rows = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        rows[i, zlib.crc32(text.split()[0].lower().encode()) % DIM] = 1.0
        rows[i] += 0.01
        rows[i] /= np.linalg.norm(rows[i])
    return rows


def _sentences(text: str) -> Sentences:
    spans = sentence_spans(text)
    return Sentences(spans, _vectors([clean_sentence(text[a:b]) for a, b in spans]))


def _index(store: VectorStore, doc: DocumentIn, chunk_chars: int = 200) -> int:
    chunks = chunk_document(doc, chunk_chars=chunk_chars, overlap_chars=0)
    texts = [c.text for c in chunks]
    sparse = [SPARSE.encode_document(t) for t in texts]
    sentences = [_sentences(t) for t in texts]
    store.upsert_chunks(
        doc.namespace, chunks, _vectors(texts), sparse, doc.content_hash(), sentences
    )
    return len(chunks)


@pytest.fixture(params=["edge", "qdrant-local", "qdrant-server"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens a store of one backend over the same place each time (for reopening)."""
    if request.param == "edge":
        settings = Settings(data_dir=tmp_path)
        yield lambda dim=DIM, sparse_idf=True: open_vector_store(
            settings, dim, sparse_idf=sparse_idf
        )
        return
    if request.param == "qdrant-local":
        path = str(tmp_path / "qdrant-local")
        yield lambda dim=DIM, sparse_idf=True: QdrantVectorStore(
            QdrantClient(path=path), dim, sparse_idf=sparse_idf
        )
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
    settings = Settings(data_dir=tmp_path, qdrant_url=url, qdrant_collection_prefix=prefix)
    yield lambda dim=DIM, sparse_idf=True: open_vector_store(settings, dim, sparse_idf=sparse_idf)
    for collection in client.get_collections().collections:
        if collection.name.startswith(prefix):
            client.delete_collection(collection.name)
    client.close()


@pytest.fixture
def store(opener: Opener) -> Iterator[VectorStore]:
    vs = opener()
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
    assert store.namespaces() == []


def test_searches_return_references_that_hydrate(store: VectorStore) -> None:
    _index(store, STATINS)
    _index(store, VITAMIN)
    query = _vectors(["Statins query"])[0]
    dense = store.search_dense(["default"], query, 2)
    assert dense[0].document_id == "statins"
    assert dense[0].title == "Statins" and dense[0].namespace == "default"
    assert dense[0].score > dense[1].score
    assert all(hit.text == "" and hit.vectors is None for hit in dense)  # references
    sparse = store.search_sparse(["default"], *SPARSE.encode_query("bones vitamin"), 5)
    assert [c.document_id for c in sparse] == ["vitd"]

    [hydrated] = store.hydrate(sparse)
    assert hydrated.text == "Vitamin deficiency weakens bones."
    assert hydrated.score == sparse[0].score and hydrated.chunk_id == sparse[0].chunk_id
    assert hydrated.vectors is not None and hydrated.vectors.dim == DIM
    assert np.allclose(dense_of(hydrated.vectors), _vectors([hydrated.text])[0], atol=1e-3)
    assert hydrated.vectors.spans == [(0, len(hydrated.text))]
    stored = sentences_of(hydrated.vectors)
    assert np.allclose(stored, _vectors([hydrated.text]), atol=1e-3)  # float16 on the wire
    assert store.hydrate([hydrated]) == [hydrated]  # already hydrated: kept as it is
    assert store.namespaces() == ["default"]


def test_a_channel_scores_the_chunks_another_found_as_its_search_would(
    store: VectorStore,
) -> None:
    """Score completion (`engines.search.completion`): the exact score each given chunk would
    get from the channel's own search, whatever the channel ranked first."""
    _index(store, STATINS)
    _index(store, VITAMIN)
    query = _vectors(["Statins query"])[0]
    listed = store.search_dense(["default"], query, 2)
    by_id = {c.chunk_id: c.score for c in listed}
    assert store.dense_scores(listed, query) == pytest.approx(by_id)
    assert store.dense_scores(listed[1:], query) == pytest.approx(
        {listed[1].chunk_id: listed[1].score}
    )
    terms = SPARSE.encode_query("bones vitamin")
    sparse = {c.chunk_id: c.score for c in store.search_sparse(["default"], *terms, 5)}
    scored = store.sparse_scores(listed, *terms)
    assert scored == pytest.approx(sparse)  # the statins chunk holds no term: left out (0)
    gone = listed[0].model_copy(update={"namespace": "nowhere"})
    assert store.dense_scores([gone], query) == {}
    assert store.dense_scores([], query) == {} and store.sparse_scores(listed, [], []) == {}


def test_hydration_keeps_the_order_and_drops_what_is_gone(store: VectorStore) -> None:
    _index(store, STATINS)
    _index(store, VITAMIN)
    hits = store.search_dense(["default"], _vectors(["Vitamin"])[0], 2)
    assert [h.document_id for h in store.hydrate(hits)] == [h.document_id for h in hits]
    store.delete_document("default", "vitd")
    assert [h.document_id for h in store.hydrate(hits)] == ["statins"]


def test_passages_are_the_stored_text_and_dense_vector_by_chunk_id(store: VectorStore) -> None:
    _index(store, STATINS)
    _index(store, VITAMIN)
    hits = store.search_dense(["default"], _vectors(["Vitamin"])[0], 2)
    found = store.passages(hits)
    assert set(found) == {h.chunk_id for h in hits}
    hydrated = {h.chunk_id: h for h in store.hydrate(hits)}
    for chunk_id, (text, dense) in found.items():
        assert text == hydrated[chunk_id].text
        assert hydrated[chunk_id].vectors is not None
        assert dense == pytest.approx(dense_of(hydrated[chunk_id].vectors), abs=1e-3)  # f16
    gone = hits[0].model_copy(update={"namespace": "nowhere"})
    assert store.passages([gone]) == {} and store.passages([]) == {}


def test_a_chunk_carrying_its_text_but_no_vectors_gets_the_stored_ones(store: VectorStore) -> None:
    """A graph store's copy of a chunk (what the bridge inserts) has the text and no vectors;
    without the stored vectors generation and the critic would encode the whole passage."""
    _index(store, STATINS)
    [reference] = store.search_dense(["default"], _vectors(["Statins"])[0], 1)
    graph_copy = reference.model_copy(update={"text": STATINS.text})
    [hydrated] = store.hydrate([graph_copy])
    assert hydrated.text == STATINS.text and hydrated.vectors is not None
    assert hydrated.vectors.spans == [(0, len(STATINS.text))]
    claimed = reference.model_copy(update={"text": "Statins lower", "claimed": True})
    assert store.hydrate([claimed]) == [claimed]  # a previous attempt's: kept as it is
    elsewhere = graph_copy.model_copy(update={"chunk_id": str(uuid.uuid4())})
    assert store.hydrate([elsewhere]) == [elsewhere]  # the text it has is kept


def test_a_chunk_stored_without_sentences_hydrates_without_them(store: VectorStore) -> None:
    chunks = chunk_document(STATINS, chunk_chars=200, overlap_chars=0)
    texts = [c.text for c in chunks]
    sparse = [SPARSE.encode_document(t) for t in texts]
    store.upsert_chunks("default", chunks, _vectors(texts), sparse, STATINS.content_hash())
    [hydrated] = store.hydrate(store.search_dense(["default"], _vectors(["Statins"])[0], 1))
    assert hydrated.text and hydrated.vectors is not None and hydrated.vectors.spans == []


def test_namespaces_are_separate_and_merge_by_score(store: VectorStore) -> None:
    _index(store, STATINS)
    _index(store, OTHER_NS)
    assert store.count("default") == 1 and store.count("other") == 1
    only_other = store.search_sparse(["other"], *SPARSE.encode_query("statins"), 5)
    assert [c.namespace for c in only_other] == ["other"]
    both = store.search_sparse(["default", "other"], *SPARSE.encode_query("statins"), 5)
    assert {c.namespace for c in both} == {"default", "other"}
    assert [c.score for c in both] == sorted((c.score for c in both), reverse=True)
    assert {h.namespace for h in store.hydrate(both)} == {"default", "other"}


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


def test_reopen_keeps_points(opener: Opener) -> None:
    first = opener()
    _index(first, STATINS)
    first.optimize()
    first.close()
    again = opener()
    try:
        assert again.count("default") == 1
        assert again.document_hash("default", "statins") == STATINS.content_hash()
        assert again.ping()
        [hit] = again.hydrate(again.search_dense(["default"], _vectors(["Statins"])[0], 1))
        assert hit.text == STATINS.text and hit.vectors is not None and hit.vectors.spans
    finally:
        again.close()


def test_dimension_is_checked(store: VectorStore) -> None:
    with pytest.raises(ValueError, match="dim"):
        store.search_dense(["default"], [1.0, 0.0], 3)


def test_learned_sparse_collections_skip_idf_and_a_mismatch_is_refused(opener: Opener) -> None:
    learned = opener(sparse_idf=False)
    try:
        _index(learned, STATINS)
        hits = learned.search_sparse(["default"], *SPARSE.encode_query("statins"), 3)
        assert [h.document_id for h in hits] == ["statins"]
    finally:
        learned.close()
    # BM25 wants IDF; another encoder has another dense size
    for dim, idf in ((DIM, True), (DIM * 2, False)):
        other = opener(dim=dim, sparse_idf=idf)
        try:
            with pytest.raises(StoreMismatch, match="re-ingest"):
                other.count("default")
        finally:
            other.close()


def test_an_edge_shard_has_one_opener(tmp_path: Path) -> None:
    """What docs/bus.md's design of read replicas rests on: Qdrant Edge locks a shard's
    write-ahead log, so no second process (nor a second handle here) reads the owner's shard
    in place; a replica needs a copy of its own. If a later Edge lifts this, the design can
    be simpler."""
    from qdrant_edge import EdgeShard

    store = open_vector_store(Settings(data_dir=tmp_path, qdrant_url=""), 8)
    doc = DocumentIn(id="d", title="T", text="Calcium builds bone.", namespace="ns")
    chunks = chunk_document(doc)
    vectors = np.ones((len(chunks), store.dim), dtype=np.float32)
    store.upsert_chunks("ns", chunks, vectors, [([1], [1.0])] * len(chunks), "hash")
    shard_dir = next(p for p in (tmp_path / "vectors").iterdir() if p.is_dir())
    with pytest.raises(Exception, match="WAL"):
        EdgeShard.load(str(shard_dir))
    store.close()


def test_writes_are_counted_and_a_copy_says_which_it_holds(tmp_path: Path) -> None:
    """A search replica's fence (`contracts.replicas.StoresVersion`): every write is counted
    under the write lock, and a copy records the count at its point; reads count nothing."""
    store = open_vector_store(Settings(data_dir=tmp_path, qdrant_url=""), DIM)
    try:
        assert store.writes == 0 and store.copied_writes is None
        _index(store, STATINS)
        assert store.writes == 1
        store.announce("default", "statins", {"team": "bone"})
        assert store.writes == 2
        store.search_dense(["default"], _vectors(["Statins"])[0], 3)
        store.hydrate(store.search_sparse(["default"], *SPARSE.encode_query("statins"), 3))
        assert store.writes == 2, "a read is no write"
        assert store.copy_to(tmp_path / "copy" / "vectors")
        assert store.copied_writes == 2
        store.delete_document("default", "statins")
        assert store.writes == 3 and store.copied_writes == 2
        store.drop_namespace("default")
        assert store.writes == 4
    finally:
        store.close()
    copy = open_vector_store(Settings(data_dir=tmp_path / "copy", qdrant_url=""), DIM)
    try:
        assert copy.document_hash("default", "statins") == STATINS.content_hash()
    finally:
        copy.close()
