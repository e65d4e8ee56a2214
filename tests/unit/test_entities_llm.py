"""LLM entity extraction and LLM community summaries against the local OpenAI-compatible
server (tests/fake_llm.py): parsing, normalisation, offline fallbacks, acronym merging,
summaries with their extractive fallback, and ingestion with an LLM configured."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import NatsBroker

from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.retrieval.entities import (
    Entity,
    entity_from_name,
    extract_entities,
    normalize,
    query_entities,
)
from infra.retrieval.entities_llm import LLMEntityExtractor, merge, parse_answer
from infra.retrieval.graph.communities import MAX_SUMMARY_FAILURES, SUMMARY_CONCURRENCY, _summaries
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.graph.llm_summaries import LLMCommunitySummariser
from infra.retrieval.graph.model import CommunityBrief
from infra.runtime.bus import Bus
from infra.runtime.ingest_jobs import read_job
from infra.runtime.ingest_producer import publish_job
from infra.runtime.resources import Resources
from infra.runtime.services import LocalService
from infra.settings import Settings
from tests.fake_llm import FakeLLM
from tests.unit.conftest import worker_harness
from tests.unit.fakes import FakeEncoder
from tests.unit.graph_corpus import DOCS
from workers.ingest import create_router
from workers.ingest.indexer import index_document

TEXTS = [
    "Researchers at the Mayo Clinic measured LDL in adults. Atorvastatin lowered "
    "cardiovascular events.",
    "Breast Cancers were typed with immunohistochemistry. Carriers of BRCA1 were counted.",
    "Water (H2O) intake was recorded in Finland with questionnaires.",
]


def _norms(entities: list[Entity]) -> dict[str, Entity]:
    return {e.norm: e for e in entities}


# ---------------------------------------------------------------- extraction


async def test_llm_entities_are_parsed_normalised_grounded_and_merged(
    server: FakeLLM, client_for: Any
) -> None:
    before = len(server.calls_for("graph"))
    found = await LLMEntityExtractor(client_for("graph", max_retries=1), batch_chunks=2).extract(
        TEXTS
    )
    assert len(server.calls_for("graph")) - before == 2  # three chunks, two per request
    assert (found.requests, found.llm_chunks, found.fallback_chunks) == (2, 3, 0)

    first, second, third = (_norms(e) for e in found.entities)
    # found by the model only: said once, lower-case (the offline extractor needs two mentions)
    cardio = normalize(["cardiovascular"])
    assert cardio not in _norms(extract_entities(TEXTS[0]))
    assert first[cardio] == Entity("Cardiovascular", cardio, "term")
    assert first["mayo clinic"].kind == "proper"
    # normalised like the offline extractor: "Breast Cancers" is the query's "breast cancer"
    assert "breast cancer" in second and "breast cancer" in query_entities("breast cancer")
    assert normalize(["immunohistochemistry"]) in second
    # the model skipped the acronyms; the offline extractor's are merged in, ranked first
    assert first["ldl"] == Entity("LDL", "ldl", "acronym")
    assert second["brca1"].kind == "acronym" and third["h2o"].kind == "acronym"
    assert found.entities[0][0].kind == "acronym"
    # names the passage never mentions, and passages that do not exist, are dropped
    assert all("quantum gravity" not in norms for norms in (first, second, third))
    assert found.dropped == 3  # "Quantum Gravity" once per passage; index 99 is ignored


async def test_garbage_answer_falls_back_to_the_offline_extractor(client_for: Any) -> None:
    found = await LLMEntityExtractor(client_for("graph_garbage", max_retries=1)).extract(TEXTS)
    assert found.entities == [extract_entities(t) for t in TEXTS]
    assert (found.llm_chunks, found.fallback_chunks) == (0, 3)
    assert found.reasons == ["the model's answer is not JSON"]


async def test_chunks_missing_from_the_answer_fall_back_alone(client_for: Any) -> None:
    found = await LLMEntityExtractor(client_for("graph_partial", max_retries=1)).extract(TEXTS)
    assert (found.llm_chunks, found.fallback_chunks) == (1, 2)
    assert normalize(["cardiovascular"]) in _norms(found.entities[0])
    assert found.entities[1:] == [extract_entities(t) for t in TEXTS[1:]]


async def test_unreachable_model_falls_back_after_retries(server: FakeLLM, client_for: Any) -> None:
    before = len(server.calls_for("fail500"))
    found = await LLMEntityExtractor(client_for("fail500", max_retries=1)).extract(TEXTS[:2])
    assert found.entities == [extract_entities(t) for t in TEXTS[:2]]
    assert found.fallback_chunks == 2 and found.reasons == ["HTTP 500 from the model server"]
    assert len(server.calls_for("fail500")) - before == 2  # one try and one retry


def test_parse_answer_is_defensive() -> None:
    texts = ["Gatun Locks opened.", "The Panama Canal Authority runs them."]
    content = (
        '{"chunks": ['
        '{"index": "1", "entities": ["Gatun Locks", {"name": 7}, {"kind": "proper"}, "the"]},'
        '{"index": 1, "entities": [{"name": "Overwritten", "kind": "proper"}]},'
        '{"index": true, "entities": []}, "junk",'
        '{"index": 2, "entities": [{"name": "Panama  Canal Authority", "kind": "weird"}]}'
        "]}"
    )
    covered, dropped = parse_answer(content, texts)
    assert covered == {
        0: [Entity("Gatun Locks", "gatun lock", "proper")],
        1: [Entity("Panama Canal Authority", "panama canal author", "proper")],
    }
    assert dropped == 3  # the non-string name, the nameless entry, the lone stop word
    assert entity_from_name("IL-6") == Entity("IL-6", "il6", "acronym")
    assert entity_from_name("statin therapy") == Entity("statin therapy", "statin therapi", "term")
    assert entity_from_name("...") is None


def test_merge_keeps_the_models_entities_and_adds_missing_acronyms() -> None:
    llm = [
        Entity("statin use", "statin use", "term"),
        Entity("Mayo Clinic", "mayo clinic", "proper"),
    ]
    offline = [Entity("LDL", "ldl", "acronym"), Entity("Finland", "finland", "proper")]
    assert [e.norm for e in merge(llm, offline)] == ["ldl", "mayo clinic", "statin use"]


# ---------------------------------------------------------------- community summaries


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedGraphStore]:
    graph = EmbeddedGraphStore(tmp_path / "graph")
    graph.load()
    for doc_id, text in DOCS.items():
        doc = DocumentIn(id=doc_id, title=doc_id, text=text)
        chunks = chunk_document(doc)
        await graph.upsert_document(
            "default", doc_id, doc.title, chunks, [extract_entities(c.text) for c in chunks]
        )
    yield graph
    await graph.aclose()


async def _summaries_of(graph: EmbeddedGraphStore) -> dict[str, str]:
    return {c.key: c.summary for c in await graph.communities(["default"])}


async def test_llm_writes_community_summaries_and_caches_them(
    store: EmbeddedGraphStore, client_for: Any, server: FakeLLM
) -> None:
    await store.recompute_communities()
    extractive = await _summaries_of(store)
    assert len(extractive) >= 2

    summariser = LLMCommunitySummariser(client_for("graph", max_retries=1))
    embed = FakeEncoder().aencode
    assert await store.recompute_communities(embed=embed, summarise=summariser) == len(extractive)
    written = await _summaries_of(store)
    assert written.keys() == extractive.keys()
    for key, text in written.items():
        assert text.startswith("This community centres on ") and text != extractive[key]
    assert all(c.vector is not None for c in await store.communities(["default"]))
    prompt = server.calls_for("graph")[-1]["messages"][1]["content"]
    assert "Entities:" in prompt and "Sentences:" in prompt

    asked = summariser.requests
    await store.recompute_communities()  # remembered, and unchanged communities are cached
    assert await _summaries_of(store) == written and summariser.requests == asked
    assert (await store.stats())["communities_dirty"] is False


@pytest.mark.parametrize("model", ["fail500", "graph_garbage"])
async def test_failing_summariser_keeps_the_extractive_summary(
    store: EmbeddedGraphStore, client_for: Any, model: str
) -> None:
    await store.recompute_communities()
    extractive = await _summaries_of(store)
    summariser = LLMCommunitySummariser(client_for(model, max_retries=0))
    await store.recompute_communities(summarise=summariser)
    assert await _summaries_of(store) == extractive


async def test_documents_written_while_summarising_are_not_blocked_and_keep_it_dirty(
    store: EmbeddedGraphStore,
) -> None:
    written: list[str] = []

    async def slow_summariser(brief: CommunityBrief) -> str:
        if not written:  # the write lock is free while the model thinks
            written.append("late")  # (summaries are written concurrently)
            doc = DocumentIn(id="late", title="Late", text="Folate intake matters. " * 2)
            await store.upsert_document("default", "late", "Late", chunk_document(doc), [[]])
        return f"About {brief.entities[0]}."

    await store.recompute_communities(summarise=slow_summariser)
    assert written == ["late"]
    assert (await store.stats())["communities_dirty"] is True  # recomputed on the next search
    assert all(s.startswith("About ") for s in (await _summaries_of(store)).values())


async def test_an_unreachable_summariser_is_not_asked_about_every_community() -> None:
    calls = 0

    async def broken(brief: CommunityBrief) -> str:
        nonlocal calls
        calls += 1
        raise ConnectionError("down")

    briefs = [CommunityBrief(f"ns:{i}", "ns", ["a"], [], f"extractive {i}") for i in range(40)]
    assert await _summaries(briefs, broken) == [b.extractive for b in briefs]
    assert calls < MAX_SUMMARY_FAILURES + SUMMARY_CONCURRENCY


# ---------------------------------------------------------------- ingestion


def _settings(tmp_path: Path, server: FakeLLM, model: str, **extra: Any) -> Settings:
    return Settings(
        data_dir=tmp_path,
        llm_base_url=server.base_url,
        llm_model=model,
        llm_max_retries=0,
        llm_retry_backoff_s=0.01,
        **extra,
    )


async def _resources(settings: Settings) -> Resources:
    resources = Resources(settings, Bus(NatsBroker()))
    encoder = FakeEncoder()

    async def shared_encoder() -> Any:
        return encoder

    resources.encoder = shared_encoder  # type: ignore[method-assign]
    return resources


IHC = normalize(["immunohistochemistry"])
DOC = DocumentIn(id="bc", title="Typing", text=TEXTS[1])


@pytest.mark.parametrize(
    ("model", "extra", "extractor", "fallbacks", "found"),
    [
        ("graph", {}, "llm", 0, True),
        ("fail500", {}, "llm", 1, False),  # the model failed: offline, and counted
        ("graph", {"llm_entities": False}, "offline", 0, False),  # kept offline on purpose
    ],
)
async def test_index_document_uses_the_llm_extractor_when_configured(
    tmp_path: Path,
    server: FakeLLM,
    model: str,
    extra: dict[str, Any],
    extractor: str,
    fallbacks: int,
    found: bool,
) -> None:
    resources = await _resources(_settings(tmp_path, server, model, **extra))
    try:
        outcome = await index_document(resources, DOC)
        assert outcome.status == "done" and outcome.chunks == 1
        assert (outcome.extractor, outcome.entity_fallbacks) == (extractor, fallbacks)
        graph = await resources.graph()
        hits = await graph.local_search(["default"], [IHC], 5)
        assert bool(hits) is found
        brca = await graph.local_search(["default"], ["brca1"], 5)
        assert [h.document_id for h in brca] == ["bc"]  # acronyms either way
    finally:
        await resources.aclose()


async def test_ingest_job_with_an_llm_indexes_llm_entities_and_summaries(
    tmp_path: Path, server: FakeLLM, redis_service: LocalService
) -> None:
    settings = _settings(tmp_path, server, "graph", redis_url=redis_service.url)
    docs = [DocumentIn(id=f"d{i}", title=f"Doc {i}", text=text) for i, text in enumerate(TEXTS)] + [
        DocumentIn(id=doc_id, title=doc_id, text=text) for doc_id, text in DOCS.items()
    ]
    async with worker_harness(create_router, settings, FakeEncoder()) as harness:
        receipt = await publish_job(harness.resources.bus, docs, job_id=uuid.uuid4().hex)
        job = await read_job(harness.resources.redis(), receipt.job_id)
        assert job is not None and job["status"] == "completed"
        assert job["documents_done"] == len(docs) and job["documents_failed"] == 0
        graph = await harness.resources.graph()
        hits = await graph.local_search(["default"], [IHC], 5)
        assert [h.document_id for h in hits] == ["d1"]
        for _ in range(200):  # a finished job's communities are recomputed beside it, at once
            communities = await graph.communities(["default"])  # type: ignore[attr-defined]
            if communities:
                break
            await asyncio.sleep(0.05)
        assert communities
        assert all(c.summary.startswith("This community centres on ") for c in communities)
