"""The search worker on FastStream's in-memory broker: each channel end to end over real
stores, failures reported, and channel functions replaceable at call time."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import subjects as sj
from contracts.commands import ClassifySpec, FuseSpec, SearchCommand
from contracts.enums import CHANNEL_PHASE, DOCUMENT_CHANNELS, Channel, Intent, Step
from contracts.envelope import utcnow
from contracts.ingest import DocumentIn
from contracts.models import RetrievedChunk, listed
from contracts.results import CHANNEL_TIMED_OUT, SearchResult, any_result_adapter
from engines.search.channels import Found
from infra.retrieval.chunking import chunk_document
from infra.retrieval.entities import extract_entities
from infra.retrieval.intent_profiles import PRIOR, weights_for
from infra.retrieval.lexical import SparseEncoder
from infra.retrieval.vectors.codec import pack_query
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.unit.conftest import worker_harness
from tests.unit.fakes import FakeEncoder
from workers.search import create_router

DOCS = [
    DocumentIn(
        id="statins",
        title="Statins and cholesterol",
        text="Statin therapy lowers LDL cholesterol. Statin therapy helps patients with high "
        "LDL cholesterol avoid myocardial infarction.",
    ),
    DocumentIn(
        id="vitd",
        title="Vitamin D",
        text="Vitamin D deficiency weakens bone density. Vitamin D deficiency is common in "
        "Finland during winter.",
    ),
    DocumentIn(
        id="kitchen",
        title="Baking",
        text="Knead the dough for ten minutes. Bake the bread at two hundred degrees.",
    ),
]


async def _index(resources: Resources) -> None:
    encoder, vectors, graph = (
        await resources.encoder(),
        await resources.vectors(),
        await resources.graph(),
    )
    sparse = SparseEncoder()
    for doc in DOCS:
        chunks = chunk_document(doc)
        texts = [c.embedding_text for c in chunks]
        await asyncio.to_thread(
            vectors.upsert_chunks,
            doc.namespace,
            chunks,
            encoder.encode(texts),
            [sparse.encode_document(t) for t in texts],
            doc.content_hash(),
        )
        entities = [extract_entities(c.text) for c in chunks]
        await graph.upsert_document(doc.namespace, doc.id, doc.title, chunks, entities)
    await graph.recompute_communities(embed=encoder.aencode)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, max_deliver=3, retry_delay_s=0)


@pytest.fixture
def encoder() -> FakeEncoder:
    return FakeEncoder()


def _command(channel: Channel, query: str, **kw: object) -> SearchCommand:
    return SearchCommand(
        request_id="req-1", channel=channel, query=query, namespaces=["default"], top_k=2, **kw
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("channel", "query", "expected"),
    [
        (Channel.VECTOR, "how do I bake bread?", "kitchen"),
        (Channel.SPARSE, "statin cholesterol", "statins"),
        (Channel.GRAPH_LOCAL, "what does LDL cholesterol cause?", "statins"),
        (Channel.GRAPH_GLOBAL, "vitamin D deficiency overview", "vitd"),
    ],
)
async def test_each_channel_answers_with_ranked_chunks(
    settings: Settings, encoder: FakeEncoder, channel: Channel, query: str, expected: str
) -> None:
    async with worker_harness(create_router, settings, encoder) as harness:
        await _index(harness.resources)
        cmd = _command(channel, query)
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, channel), sj.STREAM_CMD)

        results = harness.on(sj.res_subject(Step.SEARCH, channel))
        assert len(results) == 1
        result = SearchResult.model_validate(results[0])
        assert result.command_id == cmd.event_id and result.channel is channel
        assert result.status == "ok" and result.duration_ms > 0
        assert result.chunks[0].document_id == expected
        assert [c.rank for c in result.chunks] == list(range(1, len(result.chunks) + 1))
        assert all(c.channels == {channel.value: c.rank} for c in result.chunks)
        assert len(result.chunks) <= cmd.top_k

        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        assert [p["status"] for p in phases] == ["in_progress", "completed"]
        assert {p["phase"] for p in phases} == {CHANNEL_PHASE[channel].value}
        assert phases[1]["metadata"] == {
            "channel": channel.value,
            "query": cmd.query,
            "count": len(result.chunks),
        }


async def test_vector_channel_reuses_the_query_vector(
    settings: Settings, encoder: FakeEncoder
) -> None:
    async with worker_harness(create_router, settings, encoder) as harness:
        await _index(harness.resources)
        vector = pack_query(encoder.encode(["Vitamin D and bones"])[0])
        cmd = _command(Channel.VECTOR, "bake bread", query_vector=vector)
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)
        result = SearchResult.model_validate(harness.on("rag.res.search.vector")[0])
        assert result.chunks[0].document_id == "vitd"  # the vector wins over the text


async def test_empty_namespace_is_an_empty_result(settings: Settings, encoder: FakeEncoder) -> None:
    async with worker_harness(create_router, settings, encoder) as harness:
        for channel in DOCUMENT_CHANNELS:
            cmd = _command(channel, "anything at all")
            await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, channel), sj.STREAM_CMD)
        results = [SearchResult.model_validate(r) for r in harness.on("rag.res.search.")]
        assert sorted(r.channel for r in results) == sorted(DOCUMENT_CHANNELS)
        assert all(r.status == "ok" and r.chunks == [] for r in results)


async def test_channel_function_is_looked_up_at_call_time(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fake(resources: Resources, cmd: SearchCommand) -> Found:
        return Found(
            [RetrievedChunk(chunk_id=f"c{i}", document_id="d", text="t") for i in range(5)]
        )

    async with worker_harness(create_router, settings) as harness:
        # patched after the router exists: the subscriber must not hold the old function
        monkeypatch.setattr("engines.search.channels.search_graph_local", fake)
        cmd = _command(Channel.GRAPH_LOCAL, "anything")
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.GRAPH_LOCAL), sj.STREAM_CMD)
        result = SearchResult.model_validate(harness.on("rag.res.search.graph_local")[0])
        assert [c.chunk_id for c in result.chunks] == ["c0", "c1"]  # cut to top_k
        assert [c.rank for c in result.chunks] == [1, 2]
        assert all(c.text == "" for c in result.chunks)  # references: fusion hydrates


async def test_a_failing_channel_is_dead_lettered_and_reported(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(resources: Resources, cmd: SearchCommand) -> Found:
        raise ValueError("index corrupted")

    monkeypatch.setattr("engines.search.channels.search_sparse", broken)
    async with worker_harness(create_router, settings) as harness:
        cmd = _command(Channel.SPARSE, "anything")
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.SPARSE), sj.STREAM_CMD)
        failure = any_result_adapter.validate_python(harness.on("rag.res.search.sparse")[0])
        assert failure.status == "failed" and failure.command_id == cmd.event_id
        assert "index corrupted" in (failure.error.message if failure.error else "")
        assert harness.on("rag.dlq.rag.cmd.search.sparse")[0]["reason"] == "failed"
        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        assert phases[-1]["status"] == "failed"


async def test_a_command_on_the_wrong_channel_is_poison(settings: Settings) -> None:
    async with worker_harness(create_router, settings) as harness:
        cmd = _command(Channel.SPARSE, "anything")
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)
        assert harness.on("rag.dlq.rag.cmd.search.vector")[0]["reason"] == "poison"


async def test_a_command_for_a_request_that_is_not_live_is_dropped_unrun(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    async def searched(resources: Resources, cmd: SearchCommand) -> Found:
        ran.append(cmd.request_id)
        raise AssertionError("a dropped command's search never runs")

    monkeypatch.setattr("engines.search.channels.search_sparse", searched)
    async with worker_harness(create_router, settings, live=lambda rid: rid != "req-1") as harness:
        cmd = _command(Channel.SPARSE, "anything")
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.SPARSE), sj.STREAM_CMD)
        assert ran == []
        assert harness.on("rag.res.") == [], "no result for an unknown request"
        assert harness.on("rag.events.") == [], "and no events under its id"
        assert harness.on("rag.dlq.") == [], "dropped, not dead-lettered: nothing is wrong with it"


async def test_one_command_searches_several_channels_and_answers_for_each(
    settings: Settings, encoder: FakeEncoder
) -> None:
    async with worker_harness(create_router, settings, encoder) as harness:
        await _index(harness.resources)
        # no step announces itself (an announcement sends what is held at once)
        harness.resources.bus.phase_start_after_s = 60.0
        cmd = _command(
            Channel.VECTOR,
            "statin cholesterol",
            also=[Channel.SPARSE, Channel.GRAPH_LOCAL],
            claim_ranking=True,
        )
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)

        [raw] = harness.on("rag.res.search.")  # one result, on the command's own subject
        result = SearchResult.model_validate(raw)
        assert result.channel is Channel.VECTOR and result.status == "ok"
        assert [o.channel for o in result.also] == [Channel.SPARSE, Channel.GRAPH_LOCAL]
        fields = [result.ranking_claim, *(o.ranking_claim for o in result.also)]
        assert fields == [
            f"ranking:{cmd.event_id}",
            f"ranking:{cmd.event_id}:sparse",
            f"ranking:{cmd.event_id}:graph_local",
        ]
        rankings = await harness.resources.claims().rankings("req-1", fields)  # type: ignore[arg-type]
        assert rankings[1][0].document_id == "statins"
        counts = [result.count, *(o.count for o in result.also)]
        assert [len(listed(r)) for r in rankings] == counts  # completions follow their own

        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        ended = {p["phase"] for p in phases if p["status"] == "completed"}
        assert ended == {CHANNEL_PHASE[c].value for c in cmd.channels}
        # ended side by side, they went out as one message, before the result
        [sent] = harness.messages(sj.events_subject("default", "req-1"))
        assert sent["type"] == "phases" and len(sent["data"]["events"]) == 3


async def test_a_failing_channel_inside_a_command_is_reported_beside_the_others(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(resources: Resources, cmd: SearchCommand) -> Found:
        raise ValueError("index corrupted")

    async def fine(resources: Resources, cmd: SearchCommand) -> Found:
        return Found([RetrievedChunk(chunk_id="c1", document_id="d", text="t")])

    monkeypatch.setattr("engines.search.channels.search_sparse", broken)
    monkeypatch.setattr("engines.search.channels.search_vector", fine)
    async with worker_harness(create_router, settings) as harness:
        cmd = _command(Channel.VECTOR, "anything", also=[Channel.SPARSE])
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)
        result = SearchResult.model_validate(harness.on("rag.res.search.vector")[0])
        assert result.status == "ok" and [c.chunk_id for c in result.chunks] == ["c1"]
        [sparse] = result.also
        assert sparse.status == "failed" and sparse.error is not None
        assert "index corrupted" in sparse.error.message
        assert harness.on("rag.dlq.") == [], "the command itself did not fail"
        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        ended = {p["phase"]: p["status"] for p in phases if p["status"] != "in_progress"}
        assert ended == {"vector_search": "completed", "sparse_search": "failed"}


async def test_a_channel_silent_past_the_commands_deadline_is_dropped_and_the_rest_fused(
    settings: Settings, encoder: FakeEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One wedged channel does not hold the command: at `deadline_at` it is reported timed
    out (its phase event marked dropped), and the others are fused and answered."""
    release = asyncio.Event()

    async def silent(resources: Resources, cmd: SearchCommand) -> Found:
        await release.wait()
        raise AssertionError("released only at the end of the test")

    monkeypatch.setattr("engines.search.channels.search_sparse", silent)
    async with worker_harness(create_router, settings, encoder) as harness:
        await _index(harness.resources)
        cmd = _command(
            Channel.VECTOR,
            "statin cholesterol",
            claim_ranking=True,
            also=[Channel.SPARSE],
            fuse=FuseSpec(weights={Channel.VECTOR: 0.5, Channel.SPARSE: 0.5}, top_k=2),
            deadline_at=utcnow() + timedelta(seconds=0.3),
        )
        subject = sj.cmd_subject(Step.SEARCH, Channel.VECTOR)
        try:  # without the deadline the command would wait for the silent channel for ever
            await asyncio.wait_for(harness.publish(cmd, subject, sj.STREAM_CMD), timeout=10)
        finally:
            release.set()
        [raw] = harness.on("rag.res.search.")
        result = SearchResult.model_validate(raw)
        [sparse] = result.also
        assert sparse.status == "failed" and sparse.error is not None
        assert sparse.error.code == CHANNEL_TIMED_OUT
        assert result.fused is not None
        assert result.fused.chunks[0].document_id == "statins"
        assert result.fused.channel_counts.get(Channel.SPARSE, 0) == 0
        assert harness.on("rag.dlq.") == []
        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        ended = {p["phase"]: p for p in phases if p["status"] != "in_progress"}
        assert ended["sparse_search"]["status"] == "failed"
        assert ended["sparse_search"]["metadata"]["dropped"] is True
        assert ended["vector_search"]["status"] == "completed"


async def test_a_command_naming_the_memory_channel_is_refused() -> None:
    with pytest.raises(ValueError, match="document channels"):
        _command(Channel.VECTOR, "anything", also=[Channel.MEMORY])
    with pytest.raises(ValueError, match="twice"):
        _command(Channel.VECTOR, "anything", also=[Channel.VECTOR])


async def _search_and_fuse(harness: Any, weights: dict[Channel, float]) -> SearchCommand:
    """One command for the vector and sparse channels that asks its worker to fuse them."""
    cmd = _command(
        Channel.VECTOR,
        "statin cholesterol",
        also=[Channel.SPARSE],
        claim_ranking=True,
        fuse=FuseSpec(weights=weights, top_k=2),
    )
    await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)
    return cmd


async def test_a_command_that_asks_fuses_its_channels_and_answers_with_the_list(
    settings: Settings, encoder: FakeEncoder
) -> None:
    weights = {Channel.VECTOR: 0.5, Channel.SPARSE: 0.5}
    async with worker_harness(create_router, settings, encoder) as harness:
        await _index(harness.resources)
        await _search_and_fuse(harness, weights)

        [raw] = harness.on("rag.res.search.")
        result = SearchResult.model_validate(raw)
        assert result.fused is not None
        assert result.fused.chunks[0].document_id == "statins"
        assert all(chunk.claimed for chunk in result.fused.chunks)  # passages in the claim store
        assert set(result.fused.effective_weights) >= set(weights)
        # the rankings went into the fused list: neither inline nor claimed, only counted
        outcomes = [result, *result.also]
        assert [(o.chunks, o.ranking_claim) for o in outcomes] == [([], None), ([], None)]
        assert all(o.count > 0 for o in outcomes)
        resolved = await harness.resources.claims().resolve("req-1", result.fused.chunks)
        assert "Statin" in resolved.chunks[0].text

        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        ended = [p["phase"] for p in phases if p["status"] == "completed"]
        assert ended[-1] == "fusion", "fusion ends after the channels it fused"
        assert set(ended) == {"vector_search", "sparse_search", "fusion"}


async def test_fusion_that_fails_in_the_search_worker_leaves_the_rankings_to_the_fuse_step(
    settings: Settings, encoder: FakeEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object) -> None:
        raise ConnectionError("vector store away")

    monkeypatch.setattr("workers.search.fuse_rankings", broken)
    async with worker_harness(create_router, settings, encoder) as harness:
        await _index(harness.resources)
        cmd = await _search_and_fuse(harness, {Channel.VECTOR: 1.0})

        result = SearchResult.model_validate(harness.on("rag.res.search.")[0])
        assert result.status == "ok" and result.fused is None
        assert result.ranking_claim == f"ranking:{cmd.event_id}"  # claimed, as without fuse
        assert result.also[0].ranking_claim == f"ranking:{cmd.event_id}:sparse"
        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        [fusion] = [p for p in phases if p["phase"] == "fusion" and p["status"] != "in_progress"]
        assert fusion["status"] == "failed"
        assert fusion["metadata"]["fallback"] == "the fuse step"
        assert "vector store away" in fusion["metadata"]["error"]
        assert harness.on("rag.dlq.") == []


async def test_only_document_channels_fuse_in_a_search_command() -> None:
    with pytest.raises(ValueError, match="document channels"):
        _command(Channel.MEMORY, "anything", fuse=FuseSpec(weights={}, top_k=2))


def _classifying(intent: Intent) -> SearchCommand:
    return _command(
        Channel.VECTOR,
        "statin cholesterol",
        also=[Channel.SPARSE, Channel.GRAPH_LOCAL, Channel.GRAPH_GLOBAL],
        claim_ranking=True,
        fuse=FuseSpec(weights=dict(PRIOR), top_k=2),
        classify=ClassifySpec(intent_override=intent),
    )


async def _classify_and_search(harness: Any, intent: Intent) -> SearchResult:
    """A classifying command over the indexed corpus, with `intent` as its override; the
    worker's one result."""
    await _index(harness.resources)
    cmd = _classifying(intent)
    await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)
    [raw] = harness.on("rag.res.search.")
    return SearchResult.model_validate(raw)


async def test_a_classifying_command_searches_and_fuses_what_the_intent_weighs(
    settings: Settings, encoder: FakeEncoder
) -> None:
    weights = weights_for(Intent.FACTUAL, 1.0)
    skipped = {c for c in DOCUMENT_CHANNELS if weights.get(c, 0.0) <= 0.0}
    assert skipped, "the factual profile weighs some channel 0"
    async with worker_harness(create_router, settings, encoder) as harness:
        result = await _classify_and_search(harness, Intent.FACTUAL)
        assert result.classified is not None
        assert (result.classified.intent, result.classified.method) == (Intent.FACTUAL, "override")
        assert result.classified.weights == weights
        assert Channel.VECTOR not in skipped and result.count > 0
        assert {o.channel for o in result.also} == DOCUMENT_CHANNELS - skipped - {Channel.VECTOR}
        assert result.fused is not None and result.fused.chunks
        assert all(result.fused.channel_counts.get(c, 0) == 0 for c in skipped)
        assert result.query_vector is not None and result.query_vector.startswith("claim:")

        phases = [e["data"] for e in harness.on(sj.events_subject("default", "req-1"))]
        ended = {p["phase"]: p for p in phases if p["status"] != "in_progress"}
        assert ended["intent_classification"]["metadata"]["intent"] == "factual"
        for channel in skipped:
            event = ended[CHANNEL_PHASE[channel].value]
            assert (event["status"], event["metadata"]) == (
                "skipped",
                {"reason": "weight 0 for this intent"},
            )
        assert ended["fusion"]["status"] == "completed"
        assert harness.on("rag.dlq.") == []


async def test_a_classifying_command_leaves_a_tool_question_unsearched(
    settings: Settings, encoder: FakeEncoder
) -> None:
    async with worker_harness(create_router, settings, encoder) as harness:
        result = await _classify_and_search(harness, Intent.TOOL)
        assert result.classified is not None and result.classified.intent is Intent.TOOL
        assert (result.fused, result.also, result.count) == (None, [], 0)
        phases = [e["data"]["phase"] for e in harness.on(sj.events_subject("default", "req-1"))]
        assert set(phases) == {"intent_classification"}


async def test_a_classifying_command_must_fuse() -> None:
    with pytest.raises(ValueError, match="also fuses"):
        _command(Channel.VECTOR, "anything", classify=ClassifySpec())


@pytest.mark.parametrize("completion", [True, False])
async def test_the_text_channels_score_what_the_other_found(
    settings: Settings, encoder: FakeEncoder, completion: bool
) -> None:
    """Score completion (`engines.search.completion`): after its own ranking, each text
    channel's list holds its exact score for the chunks only the other listed; none with
    `RAGBUS_SCORE_COMPLETION=false`."""
    # completion alone: feedback (test_search_feedback) searches again with other queries
    update = {"score_completion": completion, "search_feedback": False}
    settings = settings.model_copy(update=update)
    async with worker_harness(create_router, settings, encoder) as harness:
        await _index(harness.resources)
        # one chunk a channel, for a question of two topics: the channels list different ones
        cmd = _command(
            Channel.VECTOR,
            "statin cholesterol bread dough knead",
            also=[Channel.SPARSE],
            claim_ranking=True,
        ).model_copy(update={"top_k": 1})
        await harness.publish(cmd, sj.cmd_subject(Step.SEARCH, Channel.VECTOR), sj.STREAM_CMD)

        [raw] = harness.on("rag.res.search.")
        result = SearchResult.model_validate(raw)
        fields = [result.ranking_claim, result.also[0].ranking_claim]
        vector, sparse = await harness.resources.claims().rankings("req-1", fields)  # type: ignore[arg-type]
        own = {c.chunk_id for c in listed(vector)}, {c.chunk_id for c in listed(sparse)}
        added = [c for c in vector if c.completion], [c for c in sparse if c.completion]
        if not completion:
            assert added == ([], [])
            return
        assert {c.chunk_id for c in added[0]} == own[1] - own[0]
        assert {c.chunk_id for c in added[1]} <= own[0] - own[1]  # none where no term matches
        assert added[0] or added[1], "the two channels listed the same chunks: no test"
        assert all(c.rank == 0 and c.channels == {} for c in [*added[0], *added[1]])
        store = await harness.resources.vectors()
        query = encoder.encode([cmd.query])[0]
        assert {c.chunk_id: c.score for c in added[0]} == pytest.approx(
            store.dense_scores(added[0], query)
        )
