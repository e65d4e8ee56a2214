"""The fusion step's graph bridge: second-hop documents join after the first hop, found by
the entities the best chunks mention, and nothing changes when there is no bridge."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from contracts.ingest import DocumentIn
from contracts.models import RetrievedChunk
from engines.fuse.bridge import BRIDGE_CHANNEL, INSERT_AT, MAX_BRIDGED, bridge
from infra.retrieval.chunking import chunk_document
from infra.retrieval.entities import extract_entities, title_norms
from infra.retrieval.graph.store import GraphStore, open_graph_store
from infra.retrieval.scope import Scope
from infra.settings import Settings

CORPUS = {
    "book": (
        "Alexander and the Terrible, Horrible, No Good, Very Bad Day",
        "The children's book was written by Judith Viorst and illustrated by Ray Cruz.",
    ),
    "viorst": ("Judith Viorst", "Viorst graduated from Rutgers University in Newark."),
    "cruz": ("Ray Cruz", "Cruz illustrated many picture books in New York."),
    "rutgers": ("Rutgers University", "Rutgers is a public research university."),
    "other1": ("Picture books", "Picture books combine text and illustration."),
    "other2": ("Newark", "Newark is a city in New Jersey."),
}


async def _graph(tmp_path: Path) -> GraphStore:
    graph = await open_graph_store(Settings(data_dir=tmp_path))
    for doc_id, (title, text) in CORPUS.items():
        doc = DocumentIn(id=doc_id, title=title, text=text)
        chunks = chunk_document(doc)
        await graph.upsert_document(
            "default", doc_id, title, chunks, [extract_entities(c.text) for c in chunks]
        )
    return graph


def _fused(doc_ids: Sequence[str]) -> list[RetrievedChunk]:
    return [
        RetrievedChunk(
            chunk_id=chunk_document(DocumentIn(id=doc_id, title=CORPUS[doc_id][0], text="x"))[
                0
            ].chunk_id,
            document_id=doc_id,
            title=CORPUS[doc_id][0],
            text=CORPUS[doc_id][1],
            score=1.0 / rank,
            rank=rank,
            channels={"vector": rank},
        )
        for rank, doc_id in enumerate(doc_ids, start=1)
    ]


def test_title_norms_cover_disambiguated_and_qualified_titles() -> None:
    assert title_norms("Judith Viorst") == ["judith viorst"]
    assert title_norms("Folk Songs (Berio)") == ["folk songs berio", "folk song"]
    assert title_norms("Johnnycake, West Virginia") == ["johnnycake west virginia", "johnnycak"]


async def test_second_hop_documents_join_right_after_the_first_hop(tmp_path: Path) -> None:
    graph = await _graph(tmp_path)
    fused = _fused(["book", "other1", "other2", "rutgers"])
    chunks, added = await bridge(graph, fused, top_k=5)
    ids = [c.document_id for c in chunks]
    assert added == MAX_BRIDGED == 2
    assert ids[:INSERT_AT] == ["book", "other1", "other2"]
    # the book names its author first, then its illustrator: both are bridged, in that order
    assert ids[INSERT_AT:] == ["viorst", "cruz"]
    assert [c.rank for c in chunks] == [1, 2, 3, 4, 5]
    assert chunks[INSERT_AT].channels == {BRIDGE_CHANNEL: 1}
    assert [c.score for c in chunks] == sorted((c.score for c in chunks), reverse=True)
    await graph.aclose()


async def test_a_bridged_chunk_already_fused_lower_moves_up_and_keeps_its_channels(
    tmp_path: Path,
) -> None:
    graph = await _graph(tmp_path)
    fused = _fused(["book", "other1", "other2", "rutgers", "viorst"])
    chunks, _ = await bridge(graph, fused, top_k=10)
    ids = [c.document_id for c in chunks]
    assert ids == ["book", "other1", "other2", "viorst", "cruz", "rutgers"]
    assert chunks[3].channels == {"vector": 5, BRIDGE_CHANNEL: 1}
    await graph.aclose()


async def test_no_bridge_leaves_the_fused_list_alone(tmp_path: Path) -> None:
    graph = await _graph(tmp_path)
    fused = _fused(["other2", "rutgers"])  # they mention nothing that titles a document
    fused[0] = fused[0].model_copy(update={"text": "a city in a state"})
    fused[1] = fused[1].model_copy(update={"text": "a public research university"})
    chunks, added = await bridge(graph, fused, top_k=10)
    assert added == 0 and chunks == fused
    await graph.aclose()


async def test_a_filtered_request_bridges_only_to_documents_of_its_scope(tmp_path: Path) -> None:
    graph = await _graph(tmp_path)
    fused = _fused(["book", "other1", "other2", "rutgers"])
    keep = {"book", "other1", "other2", "rutgers", "cruz"}  # the author's page is filtered out
    scope = Scope(frozenset(("default", doc) for doc in keep))
    chunks, added = await bridge(graph, fused, top_k=5, scope=scope)
    assert [c.document_id for c in chunks][INSERT_AT:] == ["cruz", "rutgers"]
    assert added == 1
    await graph.aclose()
