"""The graph channels' ranking primitives: the walk's PageRank and the top-k cut."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.retrieval.entities import extract_entities
from infra.retrieval.graph.model import entity_key
from infra.retrieval.graph.ranking import pagerank, ranked
from infra.retrieval.graph.store import open_graph_store
from infra.settings import Settings


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pagerank_is_networkx_personalised_pagerank(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [f"e{i}" for i in range(40)]
    edges: dict[tuple[str, str], float] = {}
    for _ in range(90):
        a, b = rng.sample(nodes[:35], 2)  # e35..e39 stay dangling
        edges[(a, b) if a < b else (b, a)] = rng.uniform(0.1, 3.0)
    restart = {nodes[0]: 2.0, nodes[7]: 1.0, nodes[36]: 0.5}
    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    for (a, b), weight in edges.items():
        graph.add_edge(a, b, weight=weight)
    personalization = {key: restart.get(key, 0.0) for key in nodes}
    expected = nx.pagerank(graph, alpha=0.5, personalization=personalization, weight="weight")
    got = pagerank(nodes, edges, restart, 0.5)
    assert got.keys() == expected.keys()
    assert max(abs(got[k] - expected[k]) for k in nodes) < 1e-5
    assert sum(got.values()) == pytest.approx(1.0)


def test_ranked_is_the_full_sort_cut_to_top_k() -> None:
    rng = random.Random(7)
    scores = {f"c{i:04d}": float(rng.randint(0, 30)) for i in range(2000)}  # many ties
    hits = Counter({cid: rng.randint(1, 3) for cid in scores})
    full = sorted(scores, key=lambda cid: (-scores[cid], -hits[cid], cid))
    for top_k in (1, 10, 20, 2000, 5000):
        assert ranked(scores, hits, top_k) == full[:top_k]
    assert ranked({}, Counter(), 5) == []


async def test_an_entitys_work_is_capped_however_common_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.retrieval.graph import embedded_index

    monkeypatch.setattr(embedded_index, "MENTIONS_CAP", 10)
    monkeypatch.setattr(embedded_index, "WALK_SCAN", 4)
    store = await open_graph_store(Settings(data_dir=tmp_path))
    for i in range(30):  # zinc everywhere; selenium only with zinc in the first documents
        partner = "Selenium" if i < 3 else f"Mineral{i:02d}"
        text = f"Zinc and {partner} matter. Zinc and {partner} are studied."
        doc = DocumentIn(id=f"d{i:02d}", title=f"D{i}", text=text, namespace="default")
        chunks = chunk_document(doc)
        await store.upsert_document(
            "default", doc.id, doc.title, chunks, [extract_entities(c.text) for c in chunks]
        )
    zinc = entity_key("default", "zinc")
    mentioned = (await store.mentions([zinc]))[zinc]
    assert len(mentioned) == 10 and mentioned == sorted(mentioned)
    (neighbours,) = (await store.neighbours([zinc], 50)).values()
    assert sum(shared for _, shared, _ in neighbours) <= 4 * 3  # 4 chunks read, few entities each
    await store.delete_document("default", "d00")  # a write forgets what it changes
    after = (await store.mentions([zinc]))[zinc]
    assert len(await store.fetch_chunks(after)) == len(after) == 10  # no deleted chunk kept
    await store.aclose()


async def test_an_entitys_neighbours_are_kept_until_a_write_changes_them(tmp_path: Path) -> None:
    """The embedded index answers a repeated expansion from what it kept (the walk's
    expansions are most of a local search), and any write, an upsert or a delete, drops it."""
    store = await open_graph_store(Settings(data_dir=tmp_path))

    async def put(doc_id: str, text: str) -> None:
        doc = DocumentIn(id=doc_id, title=doc_id, text=text, namespace="default")
        chunks = chunk_document(doc)
        await store.upsert_document(
            "default", doc.id, doc.title, chunks, [extract_entities(c.text) for c in chunks]
        )

    def names(related: dict[str, list[tuple[str, int, int]]]) -> set[str]:
        return {key.split("|", 1)[-1] for key, _, _ in related[zinc]}

    await put("a", "Zinc and Selenium matter. Zinc and Selenium are studied.")
    zinc = entity_key("default", "zinc")
    first = await store.neighbours([zinc], 8)
    assert "selenium" in names(first)
    assert await store.neighbours([zinc], 8) == first  # kept: the same answer

    await put("b", "Zinc and Copper matter. Zinc and Copper are studied.")
    assert "copper" in names(await store.neighbours([zinc], 8))  # the upsert dropped it
    await store.delete_document("default", "a")
    assert "selenium" not in names(await store.neighbours([zinc], 8))  # so did the delete
    await store.aclose()
