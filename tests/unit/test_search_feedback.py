"""Pseudo-relevance feedback (`engines.search.feedback`): the query moved toward its first
hits, RM3's expanded terms, and the title rule that keeps a question about a particular thing
as it was asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.models import RetrievedChunk, listed, scored
from engines.search import channels, feedback
from infra.retrieval.entities import normalize
from infra.retrieval.lexical import analyze, term_id
from infra.retrieval.vectors.codec import pack_query, unpack_query
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.unit.conftest import WorkerHarness, worker_harness
from tests.unit.fakes import FakeEncoder
from tests.unit.test_search_worker import _index
from workers.search import create_router


def test_every_span_of_the_question_is_a_title_candidate_longest_first() -> None:
    found = feedback.title_candidates("Who founded Publix Super Markets?")
    assert found[0] == normalize(["Who", "founded", "Publix", "Super", "Markets?"])
    assert normalize(["Publix"]) in found and normalize(["Publix", "Super", "Markets?"]) in found
    assert len(found) == len(set(found))
    many = " ".join(f"w{i}" for i in range(20))
    assert max(len(span.split()) for span in feedback.title_candidates(many)) == 6
    long = feedback.title_candidates(" ".join(f"w{i}" for i in range(1000)))
    assert "w63" in long and "w64" not in long


def test_the_query_moves_toward_its_feedback_and_stays_unit_length() -> None:
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    hits = [np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.8, 0.6])]
    moved = feedback.moved(query, hits)
    assert np.linalg.norm(moved) == pytest.approx(1.0)
    mean = np.mean(hits, axis=0)
    assert moved @ mean > query @ mean and moved[0] > moved[1]  # nearer, still the query's
    assert feedback.moved(query, []) is query


def test_rm3_keeps_half_for_the_question_and_adds_its_hits_likeliest_terms() -> None:
    hits = [
        ("statin therapy lowers ldl cholesterol; statin therapy", 3.0),
        ("ldl cholesterol and statin use", 1.0),
        ("bread dough bread dough", 0.0),  # no score: no say
    ]
    terms = feedback.rm3("statin", hits)
    assert sum(terms.values()) == pytest.approx(1.0)
    own = analyze("statin")[0]
    assert terms[own] > 0.5  # half for the question, and it is also its hits' likeliest term
    assert analyze("cholesterol")[0] in terms and analyze("therapy")[0] in terms
    assert analyze("bread")[0] not in terms
    assert len(terms) <= 1 + feedback.RM3_TERMS
    assert feedback.rm3("statin", []) == {own: 1.0}


def test_weighted_terms_become_a_bm25_query() -> None:
    indices, values = feedback.sparse_query({"ldl": 0.25, "statin": 0.75})
    assert indices == sorted([term_id("ldl"), term_id("statin")])
    assert dict(zip(indices, values, strict=True)) == {
        term_id("ldl"): 0.25,
        term_id("statin"): 0.75,
    }


def ids(chunks: list[RetrievedChunk]) -> list[str]:
    return [chunk.chunk_id for chunk in chunks]


def _cmd(query: str) -> SearchCommand:
    return SearchCommand(
        request_id="req-1", channel=Channel.VECTOR, query=query, namespaces=["default"], top_k=3
    )


Indexed = tuple[WorkerHarness, FakeEncoder]


@pytest.fixture
async def indexed(tmp_path: Path) -> AsyncIterator[Indexed]:
    """A search worker over the test documents (`test_search_worker.DOCS`), and its encoder."""
    encoder = FakeEncoder()
    async with worker_harness(create_router, Settings(data_dir=tmp_path), encoder) as harness:
        await _index(harness.resources)
        yield harness, encoder


async def _first_lists(
    resources: Resources, cmd: SearchCommand
) -> dict[Channel, list[RetrievedChunk]]:
    vector = await channels.search_vector(resources, cmd)
    sparse = await channels.search_sparse(resources, cmd)
    return {Channel.VECTOR: vector.chunks, Channel.SPARSE: sparse.chunks}


async def test_feedback_searches_again_with_the_moved_query_and_the_expanded_terms(
    indexed: Indexed,
) -> None:
    harness, encoder = indexed
    cmd = _cmd("LDL lowering therapy for patients")  # names no document's title
    vector = encoder.encode([cmd.query])[0]
    found = await feedback.search_again(
        harness.resources, cmd, pack_query(vector), await _first_lists(harness.resources, cmd)
    )
    assert found is not None
    lists, moved, terms = found
    moved_vector = unpack_query(moved)
    assert moved_vector is not None and not np.allclose(moved_vector, vector)
    store = await harness.resources.vectors()
    again = store.search_dense(cmd.namespaces, moved_vector, cmd.top_k)
    assert [c.chunk_id for c in lists[Channel.VECTOR]] == [c.chunk_id for c in again]
    assert len(terms[0]) > len(analyze(cmd.query))  # the hits' terms joined the question's
    expanded = store.search_sparse(cmd.namespaces, *terms, cmd.top_k)
    assert [c.chunk_id for c in lists[Channel.SPARSE]] == [c.chunk_id for c in expanded]


async def test_a_question_that_names_a_documents_title_keeps_its_first_lists(
    indexed: Indexed,
) -> None:
    harness, encoder = indexed
    cmd = _cmd("is vitamin d deficiency common in winter")  # "Vitamin D" titles a document
    vector = pack_query(encoder.encode([cmd.query])[0])
    first = await _first_lists(harness.resources, cmd)
    assert await feedback.search_again(harness.resources, cmd, vector, first) is None
    # nor without both text channels, or without the query's embedding
    assert await feedback.search_again(harness.resources, _cmd("LDL"), vector, {}) is None
    assert await feedback.search_again(harness.resources, _cmd("LDL"), None, first) is None


async def test_a_title_the_collection_mentions_everywhere_is_a_topic_not_a_thing(
    indexed: Indexed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule asks the graph for *particular* titles: one it finds generic ("Diet" in a
    nutrition collection) lets the feedback search run."""
    harness, encoder = indexed
    cmd = _cmd("is vitamin d deficiency common in winter")
    graph = await harness.resources.graph()
    asked: list[list[str]] = []

    async def generic(namespaces: list[str], norms: list[str]) -> list[str]:
        asked.append(list(norms))
        return []

    monkeypatch.setattr(graph, "particular_titles", generic)
    vector = pack_query(encoder.encode([cmd.query])[0])
    first = await _first_lists(harness.resources, cmd)
    assert await feedback.search_again(harness.resources, cmd, vector, first) is not None
    assert asked == [feedback.title_candidates(cmd.query)]


@pytest.mark.parametrize("fails", [False, True])
async def test_the_worker_ranks_what_feedback_found_or_keeps_its_first_lists_when_it_fails(
    indexed: Indexed, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    from contracts import subjects as sj
    from contracts.enums import Step
    from contracts.results import SearchResult

    harness, encoder = indexed
    cmd = _cmd("LDL lowering therapy for patients").model_copy(
        update={"also": [Channel.SPARSE], "claim_ranking": True}
    )
    first = await _first_lists(harness.resources, cmd)
    swapped = {Channel.VECTOR: first[Channel.SPARSE], Channel.SPARSE: first[Channel.VECTOR]}

    async def search_again(*_: object) -> object:
        if fails:
            raise RuntimeError("the store went away")
        return swapped, pack_query(encoder.encode([cmd.query])[0]), ([1], [1.0])

    monkeypatch.setattr(feedback, "search_again", search_again)
    await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)
    result = SearchResult.model_validate(harness.on("rag.res.search.")[0])
    fields = [result.ranking_claim, result.also[0].ranking_claim]
    vector, sparse = await harness.resources.claims().rankings("req-1", fields)  # type: ignore[arg-type]
    # the channels report their own rankings either way
    assert [c.chunk_id for c in listed(vector)] == ids(first[Channel.VECTOR])
    assert [c.chunk_id for c in listed(sparse)] == ids(first[Channel.SPARSE])
    assert [c.rank for c in listed(vector)] == list(range(1, len(listed(vector)) + 1))
    # and fusion reads the feedback search's lists, when there were any
    fed = [c for c in scored(vector) if c.feedback and not c.completion]
    if fails:
        assert fed == [] and scored(vector) == vector
    else:
        assert ids(fed) == ids(swapped[Channel.VECTOR])
        assert [c.rank for c in fed] == list(range(1, len(fed) + 1))
        assert all(c.feedback for c in scored(sparse))
    assert result.status == "ok"
