"""What a user may read (`contracts.access`) in the stores' own paths: community summaries never
rank a user's passages, the graph's scoped view takes the graph's own when its scope leaves
nothing out yet still keeps out a document written since, and the embedded vector store never
returns a chunk whose own metadata the filter refuses, whatever its documents table said."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contracts.access import DocumentAccess, Reader, readable_by
from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.ingest import DocumentIn
from engines.search.channels import search_graph_global
from infra.retrieval.chunking import chunk_document
from infra.retrieval.entities import extract_entities
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.graph.ranking import rank_local
from infra.retrieval.lexical import SparseEncoder
from infra.retrieval.scope import Scope
from infra.retrieval.vectors import VectorStore, open_vector_store
from infra.retrieval.vectors.codec import pack_query
from infra.retrieval.vectors.points import stored_point
from infra.settings import Settings
from tests.unit.graph_corpus import DOCS

DIM = 8
BOB = Reader(user="bob", groups=("sales",))
SPACE = "default"


# ---------------------------------------------------------------- community summaries


class _SpyGraph:
    def __init__(self) -> None:
        self.vectors: list[Any] = []

    async def global_search(self, *args: Any) -> list[Any]:
        self.vectors.append(args[2])
        return []


class _AllOpenStore:
    def quick(self, namespaces: Any, where: Any) -> bool:
        return True

    def matching_documents(self, namespace: str, where: Any) -> set[str]:
        return {"open"}


class _Resources:
    def __init__(self) -> None:
        self.graph_store = _SpyGraph()

    async def graph(self) -> _SpyGraph:
        return self.graph_store

    async def vectors(self) -> _AllOpenStore:
        return _AllOpenStore()


async def test_a_users_question_never_ranks_by_community_summary() -> None:
    """A summary is written from every chunk of its community, hidden documents' too: its
    embedding must not choose a user's passages. The tenant's key keeps summary ranking."""
    resources = _Resources()
    vector = pack_query(np.ones(DIM, np.float32))
    for n, reader in enumerate((None, BOB)):
        cmd = SearchCommand(
            request_id=f"r{n}",
            channel=Channel.GRAPH_GLOBAL,
            query="statin therapy",
            namespaces=[SPACE],
            top_k=4,
            query_vector=vector,
            reader=reader,
        )
        await search_graph_global(resources, cmd)  # type: ignore[arg-type]
    tenant, user = resources.graph_store.vectors
    assert tenant is not None and len(tenant) == DIM
    assert user is None


# ---------------------------------------------------------------- the graph's scoped view


@pytest.fixture
async def graph(tmp_path: Path) -> EmbeddedGraphStore:
    store = EmbeddedGraphStore(tmp_path / "graph")
    store.load()
    for doc_id, text in DOCS.items():
        await _write(store, doc_id, text)
    return store


async def _write(store: EmbeddedGraphStore, doc_id: str, text: str) -> None:
    chunks = chunk_document(DocumentIn(id=doc_id, title=doc_id, text=text))
    await store.upsert_document(
        SPACE, doc_id, doc_id, chunks, [extract_entities(c.text) for c in chunks]
    )


def _docs(found: list[Any]) -> list[str]:
    return [chunk.document_id for chunk in found]


async def test_a_scope_that_leaves_nothing_out_ranks_as_the_graph_itself(
    graph: EmbeddedGraphStore,
) -> None:
    everything = Scope(frozenset((SPACE, doc) for doc in DOCS))
    query = [e.norm for e in extract_entities("LDL cholesterol and bone density")]
    whole = await rank_local(graph, [SPACE], query, 8)
    assert whole and await graph.within([SPACE], everything)
    assert await rank_local(graph, [SPACE], query, 8, everything) == whole
    narrowed = Scope(frozenset({(SPACE, "statin"), (SPACE, "heart")}))
    assert not await graph.within([SPACE], narrowed)
    assert set(_docs(await rank_local(graph, [SPACE], query, 8, narrowed))) <= {"statin", "heart"}


async def test_a_document_written_after_the_scope_was_decided_is_kept_out(
    graph: EmbeddedGraphStore,
) -> None:
    """The scope was every document when decided; one written since (its readers not yet
    known to the vector store) is not in it, and never comes back."""
    everything = Scope(frozenset((SPACE, doc) for doc in DOCS))
    await _write(graph, "hidden", "LDL cholesterol and bone density in the hidden memo.")
    query = [e.norm for e in extract_entities("LDL cholesterol and bone density")]
    assert "hidden" in _docs(await rank_local(graph, [SPACE], query, 8))  # the spy
    assert "hidden" not in _docs(await rank_local(graph, [SPACE], query, 8, everything))


# ---------------------------------------------------------------- the embedded vector store


@pytest.fixture
def vectors(tmp_path: Path) -> Iterator[VectorStore]:
    store = open_vector_store(Settings(data_dir=tmp_path), DIM)
    for doc_id in ("open-1", "open-2"):
        _points(store, doc_id, None, through_the_table=True)
    yield store
    store.close()


def _points(
    store: VectorStore, doc_id: str, access: DocumentAccess | None, *, through_the_table: bool
) -> None:
    doc = DocumentIn(id=doc_id, title=doc_id, text=f"Harbour pilots {doc_id}.", access=access)
    chunks = chunk_document(doc)
    dense = np.ones((len(chunks), DIM), np.float32)
    sparse = [SparseEncoder().encode_document(c.text) for c in chunks]
    if through_the_table:
        store.upsert_chunks(
            SPACE, chunks, dense, sparse, doc.content_hash(), None, doc.stored_metadata()
        )
        return
    # as a write is between its points and the table learning its metadata
    points = [
        stored_point(SPACE, c, d, s, doc.content_hash(), len(chunks), None, doc.stored_metadata())
        for c, d, s in zip(chunks, dense, sparse, strict=True)
    ]
    store._upsert(SPACE, points)  # type: ignore[attr-defined]


def _found(store: VectorStore, where: Any) -> set[str]:
    query = np.ones(DIM, np.float32)
    return {c.document_id for c in store.search_dense([SPACE], query, 10, where)}


def test_a_chunk_the_table_does_not_know_yet_is_judged_by_its_own_metadata(
    vectors: VectorStore,
) -> None:
    where = readable_by(BOB)
    assert _found(vectors, where) == {"open-1", "open-2"}  # decided: every document passes
    _points(vectors, "legal", DocumentAccess(groups=["legal"]), through_the_table=False)
    assert "legal" in _found(vectors, None)  # the spy: its chunks are there
    assert _found(vectors, where) == {"open-1", "open-2"}


def test_narrower_readers_announced_before_the_write_hold_at_once(vectors: VectorStore) -> None:
    """The indexer announces a new version's metadata before its text reaches the graph: the
    graph's scope and the vector searches leave the document out from then on."""
    where = readable_by(BOB)
    assert "open-1" in vectors.matching_documents(SPACE, where)
    narrowed = DocumentIn(
        id="open-1", text="x", access=DocumentAccess(groups=["legal"])
    ).stored_metadata()
    vectors.announce(SPACE, "open-1", narrowed)
    assert "open-1" not in vectors.matching_documents(SPACE, where)
    assert _found(vectors, where) == {"open-2"}


@pytest.fixture(params=["edge", "qdrant-local"])
def both(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    """A store of each backend: an open document, one for group legal, one for alice."""
    from qdrant_client import QdrantClient

    from infra.retrieval.vectors.qdrant import QdrantVectorStore

    if request.param == "edge":
        store: VectorStore = open_vector_store(Settings(data_dir=tmp_path), DIM)
    else:
        store = QdrantVectorStore(QdrantClient(path=str(tmp_path / "local")), DIM)
    _points(store, "open", None, through_the_table=True)
    _points(store, "legal", DocumentAccess(groups=["legal"]), through_the_table=True)
    _points(store, "alices", DocumentAccess(users=["alice"]), through_the_table=True)
    yield store
    store.close()


@pytest.mark.parametrize(
    ("reader", "expected"),
    [
        (Reader(user="bob", groups=("sales",)), {"open"}),
        (Reader(user="alice"), {"open", "alices"}),
        (Reader(user="carol", groups=("legal",)), {"open", "legal"}),
        (Reader(user="legal"), {"open"}),
    ],
)
def test_each_backend_keeps_a_user_to_what_it_may_read(
    both: VectorStore, reader: Reader, expected: set[str]
) -> None:
    where = readable_by(reader)
    assert _found(both, where) == expected
    assert both.matching_documents(SPACE, where) == expected
    narrowed = DocumentIn(id="open", text="x", access=DocumentAccess(groups=["board"]))
    both.announce(SPACE, "open", narrowed.stored_metadata())  # as the indexer does, first
    assert _found(both, where) == expected - {"open"}
