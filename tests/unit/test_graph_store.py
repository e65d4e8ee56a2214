"""Contract tests every graph backend must pass: the embedded store always, Neo4j when
`RAGBUS_NEO4J_URI` points at a reachable server."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.retrieval.entities import extract_entities, normalize, query_entities
from infra.retrieval.graph.model import MATCHES_PER_NORM
from infra.retrieval.graph.ranking import strength, strongest_matches
from infra.retrieval.graph.store import EmbeddedGraphStore, GraphStore, open_graph_store
from infra.retrieval.scope import Scope
from infra.settings import Settings
from tests.unit.graph_corpus import DOCS


async def _put(graph: GraphStore, ns: str, doc_id: str, text: str) -> None:
    doc = DocumentIn(id=doc_id, title=doc_id.title(), text=text, namespace=ns)
    chunks = chunk_document(doc)
    await graph.upsert_document(
        ns, doc_id, doc.title, chunks, [extract_entities(c.text) for c in chunks]
    )


async def _fake_embed(texts: list[str]) -> np.ndarray:
    """Two topics, two axes: bone-ish summaries on one, everything else on the other."""
    return np.array(
        [
            [1.0, 0.0] if ("bone" in t.lower() or "vitamin" in t.lower()) else [0.0, 1.0]
            for t in texts
        ]
    )


@pytest.fixture(params=["embedded", "neo4j"])
async def graph(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[GraphStore]:
    if request.param == "embedded":
        store = await open_graph_store(Settings(data_dir=tmp_path))
    else:
        uri = os.environ.get("RAGBUS_NEO4J_URI")
        if not uri:
            pytest.skip("Neo4j contract tests need RAGBUS_NEO4J_URI (and _USER / _PASSWORD)")
        try:
            store = await open_graph_store(Settings(data_dir=tmp_path, neo4j_uri=uri))
        except Exception as exc:
            pytest.skip(f"Neo4j at {uri} is not reachable: {exc}")
    yield store
    await store.aclose()


@pytest.fixture
async def ns(graph: GraphStore) -> AsyncIterator[str]:
    """A namespace of its own per test, so a shared Neo4j server is left as it was found."""
    namespace = "t" + uuid.uuid4().hex[:12]
    for doc_id, text in DOCS.items():
        await _put(graph, namespace, doc_id, text)
    yield namespace
    for doc_id in DOCS:
        await graph.delete_document(namespace, doc_id)


def _ids(chunks: list) -> list[str]:  # type: ignore[type-arg]
    return [c.document_id for c in chunks]


async def test_local_search_ranks_by_matched_entities(graph: GraphStore, ns: str) -> None:
    found = await graph.local_search([ns], query_entities("statin therapy"), 5)
    assert found[0].document_id == "statin"
    assert found[0].namespace == ns and "Statin therapy" in found[0].text
    assert [c.rank for c in found] == [0] * len(found)  # ranks are the search worker's job
    assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)


async def test_local_search_one_hop_expansion_is_discounted(graph: GraphStore, ns: str) -> None:
    found = await graph.local_search([ns], query_entities("myocardial infarction"), 5)
    assert _ids(found)[0] == "heart"
    # "statin" never mentions the infarction, but shares LDL / cholesterol with its chunk.
    assert "statin" in _ids(found)
    assert found[_ids(found).index("statin")].score < 0.5 * found[0].score
    assert "bone" not in _ids(found)


async def test_rarer_entity_is_more_specific(graph: GraphStore, ns: str) -> None:
    await _put(graph, ns, "extra", "Cholesterol again. Cholesterol everywhere, cholesterol.")
    try:
        found = await graph.local_search([ns], ["cholesterol", "statin"], 5)
        assert _ids(found)[0] == "statin"  # both, and statin is the rarer one
    finally:
        await graph.delete_document(ns, "extra")


async def test_namespaces_filter(graph: GraphStore, ns: str) -> None:
    assert await graph.local_search(["t" + uuid.uuid4().hex[:12]], ["calcium"], 5) == []
    assert _ids(await graph.local_search([ns], ["calcium"], 5)) == ["bone"]


async def test_upsert_replaces_and_delete_removes(graph: GraphStore, ns: str) -> None:
    await _put(graph, ns, "bone", "Magnesium matters. Magnesium intake matters for adults.")
    assert await graph.local_search([ns], ["calcium"], 5) == []
    assert _ids(await graph.local_search([ns], ["magnesium"], 5)) == ["bone"]
    await graph.delete_document(ns, "bone")
    assert await graph.local_search([ns], ["magnesium"], 5) == []
    await graph.delete_document(ns, "bone")  # deleting twice is harmless


async def test_global_search_by_entities_and_by_summary_vector(graph: GraphStore, ns: str) -> None:
    assert await graph.recompute_communities(embed=_fake_embed) >= 2
    by_entities = await graph.global_search([ns], query_entities("cholesterol"), None, 5)
    assert set(_ids(by_entities)) == {"statin", "heart"}
    by_vector = await graph.global_search([ns], [], [1.0, 0.0], 5)
    assert set(_ids(by_vector)) <= {"vitd", "bone"} and by_vector
    assert await graph.global_search(["t" + uuid.uuid4().hex[:12]], ["cholesterol"], None, 5) == []


async def test_global_search_refreshes_communities_after_writes(graph: GraphStore, ns: str) -> None:
    """A write leaves the communities stale; the next global search answers from what there is
    at once (the embedded store never makes a query wait for a recompute) and the fresh
    communities follow."""
    await graph.recompute_communities()
    await _put(graph, ns, "zinc", "Zinc and selenium help. Zinc and selenium are trace minerals.")
    try:
        await graph.global_search([ns], ["selenium"], None, 5)
        for _ in range(400):
            if not (await graph.stats())["communities_dirty"]:
                break
            await asyncio.sleep(0.05)
        assert (await graph.stats())["communities_dirty"] is False
        assert _ids(await graph.global_search([ns], ["selenium"], None, 5)) == ["zinc"]
    finally:
        await graph.delete_document(ns, "zinc")


async def test_a_global_search_does_not_wait_for_a_recompute(tmp_path: Path) -> None:
    store = await open_graph_store(Settings(data_dir=tmp_path))
    assert isinstance(store, EmbeddedGraphStore)
    for doc_id, text in DOCS.items():
        await _put(store, "default", doc_id, text)
    await store.recompute_communities()
    gate = asyncio.Event()

    async def slow(function: Any, *args: Any) -> Any:
        await gate.wait()  # a detection that takes as long as the test wants
        return function(*args)

    store.run_cpu = slow
    await _put(store, "default", "zinc", "Zinc and selenium help. Zinc and selenium matter.")
    found = await asyncio.wait_for(store.global_search(["default"], ["cholesterol"], None, 5), 10)
    assert set(_ids(found)) == {"statin", "heart"}  # the communities there were
    assert (await store.stats())["communities_dirty"] is True
    gate.set()
    for _ in range(400):
        if not (await store.stats())["communities_dirty"]:
            break
        await asyncio.sleep(0.05)
    assert _ids(await store.global_search(["default"], ["selenium"], None, 5)) == ["zinc"]
    await store.aclose()


async def test_documents_about_an_entity_are_found_by_title(graph: GraphStore, ns: str) -> None:
    """Titles name what a document is about, with or without a disambiguation or qualifier;
    documents that merely mention the entity are not about it."""
    about = {
        "viorst": ("Judith Viorst", "Viorst graduated from Rutgers University in Newark."),
        "songs": ("Folk Songs (Berio)", "A song cycle by Luciano Berio, composed in 1964."),
        "town": ("Johnnycake, West Virginia", "Johnnycake lies in McDowell County."),
    }
    for doc_id, (title, text) in about.items():
        doc = DocumentIn(id=doc_id, title=title, text=text, namespace=ns)
        chunks = chunk_document(doc)
        await graph.upsert_document(
            ns, doc_id, title, chunks, [extract_entities(c.text) for c in chunks]
        )
    names = ["Folk Songs", "Judith Viorst", "Johnnycake", "Luciano Berio", "statin therapy"]
    wanted = [normalize(name.split()) for name in names]
    found = await graph.documents_about([ns], wanted)
    assert _ids(found) == ["songs", "viorst", "town"]
    assert found[1].text.startswith("Viorst graduated") and found[1].title == "Judith Viorst"
    assert await graph.documents_about(["elsewhere"], wanted) == []
    await graph.delete_document(ns, "viorst")
    assert _ids(await graph.documents_about([ns], wanted)) == ["songs", "town"]
    for doc_id in ("songs", "town"):
        await graph.delete_document(ns, doc_id)


async def test_particular_titles_leave_out_generic_ones(graph: GraphStore, ns: str) -> None:
    """A title names a particular thing unless the collection mentions it as often as a
    generic entity: "Diet" in most chunks of a nutrition collection is a topic, not a thing."""
    docs = {
        "diet": ("Diet", "Diet shapes health. A diet of plants is studied here."),
        "publix": ("Publix", "Publix is a chain of stores. Publix began in Florida."),
        **{
            f"note{i}": (f"Note {i}", f"The diet of group {i} was kept. Each diet was logged.")
            for i in range(24)
        },
    }
    for doc_id, (title, text) in docs.items():
        doc = DocumentIn(id=doc_id, title=title, text=text, namespace=ns)
        chunks = chunk_document(doc)
        await graph.upsert_document(
            ns, doc_id, title, chunks, [extract_entities(c.text) for c in chunks]
        )
    norms = [normalize([word]) for word in ("zebra", "diet", "publix")]
    assert await graph.particular_titles([ns], norms) == [normalize(["publix"])]
    assert await graph.particular_titles(["elsewhere"], norms) == []
    for doc_id in list(docs)[2:]:  # the notes gone, "diet" is in two chunks of two: particular
        await graph.delete_document(ns, doc_id)
    assert await graph.particular_titles([ns], norms) == norms[1:]
    for doc_id in list(docs)[:2]:
        await graph.delete_document(ns, doc_id)


async def test_stats_and_ping(graph: GraphStore, ns: str) -> None:
    stats = await graph.stats()
    assert stats["documents"] >= 4 and stats["chunks"] >= 4 and stats["entities"] > 4
    assert await graph.ping()


async def test_embedded_store_survives_reopen_and_torn_journal(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    first = await open_graph_store(settings)
    for doc_id, text in DOCS.items():
        await _put(first, "default", doc_id, text)
    await first.recompute_communities()  # folds the journal into a snapshot
    await _put(first, "default", "zinc", "Zinc and selenium help. Zinc and selenium matter.")
    assert isinstance(first, EmbeddedGraphStore)
    journal = first.journal_path
    # No aclose: the last write lives only in the journal, as after a crash; then a torn line.
    with journal.open("a") as fh:
        fh.write('{"op": "upsert", "docum')
    again = await open_graph_store(settings)
    assert _ids(await again.local_search(["default"], ["selenium"], 3)) == ["zinc"]
    assert _ids(await again.local_search(["default"], ["calcium"], 3)) == ["bone"]
    stats = await again.stats()
    assert stats["documents"] == 5 and stats["communities_dirty"] is True
    await again.aclose()
    assert not journal.exists() and (tmp_path / "graph" / "graph.json").exists()


async def test_a_snapshot_is_written_outside_the_lock_and_a_crash_in_it_loses_nothing(
    tmp_path: Path,
) -> None:
    """A snapshot (70 MB of JSON at 20,000 documents, seconds to write) no longer holds every
    write back: the journal is sealed, writes go to a fresh one, and the snapshot is written
    beside them. Killed before the snapshot is on disk, the store loses nothing: the sealed
    journal and the new one are replayed."""
    store = EmbeddedGraphStore(tmp_path / "graph")
    store.load()
    for doc_id, text in DOCS.items():
        await _put(store, "default", doc_id, text)
    started, release = asyncio.Event(), asyncio.Event()
    real_write = store._write_snapshot

    def slow_write(data: dict[str, Any]) -> None:
        started.set()
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        real_write(data)

    loop = asyncio.get_running_loop()
    store._write_snapshot = slow_write  # type: ignore[method-assign]
    await store.recompute_communities()  # seals the journal, starts the snapshot
    await started.wait()
    assert store.sealed_path.exists() and not store.journal_path.exists()
    # a write while the snapshot is being written does not wait for it
    zinc = "Zinc and selenium help. Zinc and selenium matter."
    await asyncio.wait_for(_put(store, "default", "zinc", zinc), 5)
    crashed = EmbeddedGraphStore(tmp_path / "graph")  # as if killed now
    crashed.load()
    assert (await crashed.stats())["documents"] == len(DOCS) + 1
    release.set()
    await store.aclose()
    assert not store.sealed_path.exists()
    reopened = EmbeddedGraphStore(tmp_path / "graph")
    reopened.load()
    assert (await reopened.stats())["documents"] == len(DOCS) + 1
    assert _ids(await reopened.local_search(["default"], ["selenium"], 3)) == ["zinc"]


async def test_a_scope_keeps_the_graph_channels_to_its_documents(
    graph: GraphStore, ns: str
) -> None:
    # a filtered request: "heart" is outside it; nothing of it may come back, and what the
    # scope keeps still ranks (the statin chunk through its own entities)
    scope = Scope(frozenset({(ns, "statin"), (ns, "vitd"), (ns, "bone")}))
    local = await graph.local_search([ns], query_entities("myocardial infarction ldl"), 5, scope)
    assert "heart" not in _ids(local) and "statin" in _ids(local)
    assert await graph.local_search([ns], query_entities("myocardial infarction"), 5, scope) == []
    await graph.recompute_communities(embed=_fake_embed)
    by_entities = await graph.global_search([ns], query_entities("cholesterol"), None, 5, scope)
    assert _ids(by_entities) == ["statin"]
    nothing = Scope(frozenset())
    assert await graph.global_search([ns], [], [1.0, 0.0], 5, nothing) == []
    assert await graph.local_search([ns], ["calcium"], 5, nothing) == []


async def test_matches_are_kept_until_a_write_or_new_communities(tmp_path: Path) -> None:
    """What a norm meets is found once (`EmbeddedGraphIndex._matched`: its strongest entities,
    each community's strongest) and never outlives a write, which changes the entities and
    how common each is, nor new communities, which a hit names."""
    graph = EmbeddedGraphStore(tmp_path)
    graph.load()
    ns = "kept"
    for doc_id, text in DOCS.items():
        await _put(graph, ns, doc_id, text)
    assert _ids(await graph.local_search([ns], ["calcium"], 5)) == ["bone"]
    first = await graph.match([ns], ["calcium"], MATCHES_PER_NORM)
    assert first and await graph.match([ns], ["calcium"], MATCHES_PER_NORM) == first
    await _put(graph, ns, "bone", "Magnesium matters. Magnesium intake matters for adults.")
    assert await graph.match([ns], ["calcium"], MATCHES_PER_NORM) == []
    assert await graph.local_search([ns], ["calcium"], 5) == []
    assert _ids(await graph.local_search([ns], ["magnesium"], 5)) == ["bone"]
    before = await graph.match([ns], ["magnesium"], MATCHES_PER_NORM)
    assert {hit.community for hit in before} == {None}
    assert await graph.match_communities([ns], ["magnesium"]) == []
    assert await graph.recompute_communities() > 0
    after = await graph.match([ns], ["magnesium"], MATCHES_PER_NORM)
    assert [hit.key for hit in after] == [hit.key for hit in before]
    assert all(hit.community is not None for hit in after)
    by_community = await graph.match_communities([ns], ["magnesium"])
    assert {hit.community for hit in by_community} == {hit.community for hit in after}
    await graph.aclose()


async def test_per_norm_keeps_each_norms_strongest_entities(tmp_path: Path) -> None:
    """`match(..., per_norm)` keeps, for each norm and namespace, the entities `rank_local`
    would keep of all of them (`strongest_matches`: strength, then key), in that order."""
    graph = EmbeddedGraphStore(tmp_path)
    graph.load()
    for doc_id, text in DOCS.items():
        await _put(graph, "a", doc_id, text)
        await _put(graph, "b", doc_id, text)
    norms = ["cholesterol", "vitamin", "ldl", "bone"]
    every = await graph.match(["a", "b"], norms)
    totals = await graph.chunk_totals(["a", "b"])
    strengths = {(h.query, h.key): strength(h, totals[h.namespace]) for h in every}
    assert len(every) > len(norms) * 2  # some norms meet several entities
    for per_norm in (1, 2):
        kept = await graph.match(["a", "b"], norms, per_norm)
        for norm in norms:
            for namespace in ("a", "b"):
                mine = [h for h in every if h.query == norm and h.namespace == namespace]
                best = sorted(mine, key=lambda h: (-strengths[(h.query, h.key)], h.key))
                assert [h for h in kept if h.query == norm and h.namespace == namespace] == (
                    best[:per_norm]
                )
        cut = strongest_matches({(h.query, h.key): strengths[(h.query, h.key)] for h in kept})
        assert cut == strongest_matches(strengths) or per_norm < MATCHES_PER_NORM
    assert strongest_matches(
        {
            (h.query, h.key): strengths[(h.query, h.key)]
            for h in await graph.match(["a", "b"], norms, MATCHES_PER_NORM)
        }
    ) == strongest_matches(strengths)
    # a global search weighs a community by each norm's strongest entity in it: kept
    await graph.recompute_communities()
    every = await graph.match(["a", "b"], norms)
    best: dict[tuple[str, str], float] = {}
    for h in every:
        if h.community is not None:
            slot = (h.query, h.community)
            best[slot] = max(best.get(slot, 0.0), strength(h, totals[h.namespace]))
    kept = await graph.match_communities(["a", "b"], norms)
    assert len({(h.query, h.community) for h in kept}) == len(kept)  # one a community
    assert {(h.query, h.community): strength(h, totals[h.namespace]) for h in kept} == best
    await graph.aclose()


async def test_changes_count_writes_and_new_communities_and_a_copy_holds_them(
    tmp_path: Path,
) -> None:
    """A search replica's fence: what a search can see change (a document written or deleted,
    communities detected again) is counted, and a copy records the count at its point."""
    graph = await open_graph_store(Settings(data_dir=tmp_path))
    assert isinstance(graph, EmbeddedGraphStore)
    try:
        assert graph.changes == 0
        for doc_id, text in list(DOCS.items())[:3]:
            await _put(graph, "ns", doc_id, text)
        assert graph.changes == 3
        await graph.local_search(["ns"], ["vitamin d"], 5)
        assert graph.changes == 3, "a search is no change"
        await graph.recompute_communities(_fake_embed)
        assert graph.changes == 4
        assert await graph.copy_to(tmp_path / "copy")
        assert graph.copied_changes == 4
        await graph.delete_document("ns", next(iter(DOCS)))
        assert graph.changes == 5 and graph.copied_changes == 4
    finally:
        await graph.aclose()
    copy = EmbeddedGraphStore(tmp_path / "copy")
    copy.load()
    assert len(copy._documents) == 3
