"""A question over HTTP travels the whole broker pipeline and streams back live."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from client import RagbusClient
from contracts.enums import Channel
from infra.retrieval.chunking import chunk_document
from launcher.runtime import Runtime
from tests.integration.corpus import DOCUMENTS, EXPECTED_DOCUMENT, QUESTION
from tests.integration.sse import SseEvent, read_events

pytestmark = pytest.mark.integration

SEARCH_PHASES = {"vector_search", "sparse_search", "graph_local_search", "graph_global_search"}


async def ask(http: httpx.AsyncClient, **body: Any) -> tuple[str, list[SseEvent]]:
    response = await http.post("/v1/queries", json={"query": QUESTION, **body})
    assert response.status_code == 202, response.text
    submitted = response.json()
    assert submitted["events_url"].endswith(f"/v1/queries/{submitted['request_id']}/events")
    events = await read_events(http, submitted["events_url"])
    return submitted["request_id"], events


def first(events: list[SseEvent], predicate: Any) -> int:
    return next(i for i, e in enumerate(events) if predicate(e))


def last(events: list[SseEvent], predicate: Any) -> int:
    return max(i for i, e in enumerate(events) if predicate(e))


def phase_is(name: str | set[str], status: str) -> Any:
    names = {name} if isinstance(name, str) else name
    return lambda e: (
        e.event == "phase"
        and e.data["data"]["phase"] in names
        and (e.data["data"]["status"] == status)
    )


def ingested_chunk_ids(settings_chunk_chars: int, overlap: int) -> set[str]:
    return {
        c.chunk_id for doc in DOCUMENTS for c in chunk_document(doc, settings_chunk_chars, overlap)
    }


async def test_query_streams_phases_in_causal_order_then_a_cited_answer(
    http: httpx.AsyncClient, stack: Runtime
) -> None:
    request_id, events = await ask(http)
    kinds = [e.event for e in events]
    assert kinds[-1] == "done"
    assert events[-1].data["data"]["status"] == "completed"
    assert kinds.count("answer") == 1 and kinds.count("done") == 1

    classified = last(events, phase_is("intent_classification", "completed"))
    # A step's `in_progress` is sent only once it has run RAGBUS_PHASE_START_AFTER_MS, so a
    # fast step's first event may be its `completed` one.
    searches_started = first(
        events, lambda e: e.event == "phase" and e.data["data"]["phase"] in SEARCH_PHASES
    )
    searches_ended = last(
        events,
        lambda e: (
            e.event == "phase"
            and e.data["data"]["phase"] in SEARCH_PHASES
            and e.data["data"]["status"] != "in_progress"
        ),
    )
    fusion = first(events, phase_is("fusion", "completed"))
    generating = first(
        events, lambda e: e.event == "phase" and e.data["data"]["phase"] == "generation"
    )
    generated = first(events, phase_is("generation", "completed"))
    critic = first(events, phase_is("critic", "completed"))
    answer = kinds.index("answer")
    assert classified < searches_started < fusion
    assert searches_ended < fusion < generating <= generated < critic < answer
    # only a model streams tokens: the extractive answer reaches the caller once, whole
    assert "token" not in kinds

    # Every phase that completed says how long it took, measured where it ran.
    for event in events:
        data = event.data["data"]
        if event.event == "phase" and data["status"] == "completed" and data["phase"] != "retry":
            assert data["duration_ms"] is not None and data["duration_ms"] >= 0

    # SSE ids are the stream sequence (and the part, for one of several phase events stored
    # in one message): strictly increasing, mirrored in the payload.
    keys = [e.key for e in events]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all((e.data["seq"], e.data.get("part", 0)) == e.key for e in events)
    # the search step's phases ended side by side: they travelled together
    assert any(part > 1 for _, part in keys), keys

    answer_data = events[answer].data["data"]
    settings = stack.settings
    known = ingested_chunk_ids(settings.chunk_chars, settings.chunk_overlap_chars)
    assert answer_data["citations"], "the answer cites its sources"
    for n, citation in answer_data["citations"].items():
        assert f"[{n}]" in answer_data["content"]
        assert citation["chunk_id"] in known
        assert citation["snippet"], "a source card shows the passage"
        assert citation["channels"] and all(r >= 1 for r in citation["channels"].values())
    cited_documents = {c["document_id"] for c in answer_data["citations"].values()}
    assert EXPECTED_DOCUMENT in cited_documents

    status = (await http.get(f"/v1/queries/{request_id}")).json()
    assert status["status"] == "completed"
    assert status["answer"]["content"] == answer_data["content"]
    assert status["answer"]["metadata"]["attempts"] >= 1


async def test_late_subscriber_gets_full_replay_and_last_event_id_resumes(
    http: httpx.AsyncClient,
) -> None:
    request_id, live = await ask(http)
    replay = await read_events(http, f"/v1/queries/{request_id}/events")
    assert [(e.id, e.event) for e in replay] == [(e.id, e.event) for e in live]

    cut = len(replay) // 2
    resumed = await read_events(
        http, f"/v1/queries/{request_id}/events", last_event_id=replay[cut].id
    )
    assert [e.id for e in resumed] == [e.id for e in replay[cut + 1 :]]
    # resumed between two phase events of one message: the rest of it, then the others
    cut = next(n for n, e in enumerate(replay) if e.key[1] == 1)
    resumed = await read_events(
        http, f"/v1/queries/{request_id}/events", last_event_id=replay[cut].id
    )
    assert [e.id for e in resumed] == [e.id for e in replay[cut + 1 :]]


async def test_one_request_asks_and_streams_as_the_events_url_does(api_url: str) -> None:
    """`POST /v1/chat` (the client's `ask`): a `submitted` message naming the request, then
    the very events its events URL gives, ids included, so a client cut off resumes there."""
    async with RagbusClient(api_url) as client:
        asked = [m async for m in client.ask(QUESTION)]
        assert asked[0].event == "submitted" and asked[-1].event == "done"
        request_id = asked[0].data["request_id"]
        assert [m.event for m in asked].count("answer") == 1
        replay = [m async for m in client.stream_events(request_id)]
        assert [(m.id, m.event) for m in asked[1:]] == [(m.id, m.event) for m in replay]
        cut = len(replay) // 2
        resumed = [m async for m in client.stream_events(request_id, replay[cut].id)]
        assert [m.id for m in resumed] == [m.id for m in replay[cut + 1 :]]


async def test_a_multi_hop_question_is_decomposed_and_followed_up_through_the_bus(
    http: httpx.AsyncClient, stack: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The critic (made strict, so the first answer is never enough) sends follow-up queries;
    every channel searches them on the real broker, fusion adds their findings to the first
    attempt's list, and the answer's history shows both attempts."""
    assert stack.resources is not None
    monkeypatch.setattr(stack.resources.settings, "critic_accept", 1.0)
    question = "Who was the pharaoh of the oldest of the Seven Wonders?"
    _, events = await ask(http, query=question)
    assert events[-1].data["data"]["status"] == "completed"

    retry = next(e for e in events if phase_is("retry", "completed")(e)).data["data"]["metadata"]
    assert retry["strategy"] == "decompose"
    follow_ups = retry["search_queries"]
    assert 1 <= len(follow_ups) <= 2 and question not in follow_ups
    searched_again = {
        e.data["data"]["metadata"]["query"]
        for e in events
        if phase_is(SEARCH_PHASES, "completed")(e) and e.data["attempt"] == 2
    }
    assert searched_again == set(follow_ups)

    answer = next(e for e in events if e.event == "answer").data["data"]
    metadata = answer["metadata"]
    assert metadata["attempts"] == 2
    first, second = metadata["attempt_history"]
    assert (first["strategy"], first["queries"]) == ("decompose", [question])
    assert second["queries"] == follow_ups
    assert second["documents"][0] == first["documents"][0]  # the first hop stays first
    assert set(first["documents"][:2]) <= set(second["documents"])
    assert metadata["low_confidence"] is True  # the strict critic never accepts
    assert "Low confidence" in metadata["note"]
    assert answer["citations"]


async def test_a_failing_channel_is_reported_and_its_weight_redistributed(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engines.search.channels as channels

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("graph backend exploded")

    monkeypatch.setattr(channels, "search_graph_local", broken)
    _, events = await ask(http, intent="factual")
    assert events[-1].data["data"]["status"] == "completed"
    failed = [e for e in events if phase_is("graph_local_search", "failed")(e)]
    assert failed, "the failed channel's phase says so"
    metadata = next(e for e in events if e.event == "answer").data["data"]["metadata"]
    effective = metadata["effective_weights"]
    assert metadata["weights"][Channel.GRAPH_LOCAL.value] > 0
    assert effective.get(Channel.GRAPH_LOCAL.value, 0.0) == 0.0
    assert sum(effective.values()) == pytest.approx(1.0)
    assert metadata["channels"]["graph_local"]["status"] == "failed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "   "}, "query"),
        ({"query": "x" * 4001}, "query"),
        ({"query": "fine", "intent": "astrology"}, "intent"),
        ({"query": "fine", "top_k": 0}, "top_k"),
        ({"query": "fine", "namespaces": ["Bad Namespace!"]}, "namespaces"),
        ({}, "query"),
    ],
)
async def test_bad_http_input_is_a_4xx_naming_the_field_and_publishes_nothing(
    http: httpx.AsyncClient, stack: Runtime, body: dict[str, Any], field: str
) -> None:
    assert stack.broker is not None
    js = stack.broker.connection.jetstream()
    before = (await js.stream_info("RAG_QUERIES")).state.last_seq
    response = await http.post("/v1/queries", json=body)
    assert 400 <= response.status_code < 500
    assert field in response.text
    after = (await js.stream_info("RAG_QUERIES")).state.last_seq
    assert after == before, "bad input must not reach the bus"


async def test_unknown_and_malformed_request_ids(http: httpx.AsyncClient) -> None:
    assert (await http.get("/v1/queries/no-such-request")).status_code == 404
    assert (await http.get("/v1/queries/no-such-request/events")).status_code == 404
    malformed = await http.get("/v1/queries/bad.id*>")
    assert 400 <= malformed.status_code < 500


async def test_documents_posted_over_http_are_indexed_and_answerable(
    http: httpx.AsyncClient,
) -> None:
    document = {
        "id": "mausoleum",
        "title": "The Mausoleum at Halicarnassus",
        "text": "The Mausoleum at Halicarnassus was the tomb of Mausolus, finished in 350 BC. "
        "Artemisia II of Caria commissioned the Mausoleum after Mausolus died.",
    }
    response = await http.post("/v1/documents", json={"documents": [document]})
    assert response.status_code == 202, response.text
    job = await wait_for_job(http, response.json()["job_id"])
    assert job["documents_done"] == 1
    assert job["chunks"] >= 1

    again = await http.post("/v1/documents", json={"documents": [document]})
    assert again.json()["duplicates"] == 1, "a re-sent document is dropped by the broker"

    response = await http.post(
        "/v1/queries", json={"query": "Who commissioned the Mausoleum at Halicarnassus?"}
    )
    events = await read_events(http, response.json()["events_url"])
    answer = next(e for e in events if e.event == "answer").data["data"]
    assert "mausoleum" in {c["document_id"] for c in answer["citations"].values()}
    assert (await http.get("/v1/ingest/no-such-job")).status_code == 404


async def test_deleting_a_document_removes_it_from_every_channel(
    http: httpx.AsyncClient,
) -> None:
    document = {
        "id": "temple-artemis",
        "title": "The Temple of Artemis",
        "text": "The Temple of Artemis at Ephesus was burned by Herostratus in 356 BC.",
    }
    job_id = (await http.post("/v1/documents", json={"documents": [document]})).json()["job_id"]
    await wait_for_job(http, job_id)

    async def cited_documents() -> set[str]:
        response = await http.post(
            "/v1/queries",
            json={"query": "Who burned the Temple of Artemis?", "mode": "retrieve", "top_k": 20},
        )
        events = await read_events(http, response.json()["events_url"])
        retrieval = next(e for e in events if e.event == "answer").data["data"]["metadata"][
            "retrieval"
        ]
        found = {item["document_id"] for item in retrieval["fused"]}
        for ranking in retrieval["channels"].values():
            found |= {item["document_id"] for item in ranking}
        return found

    assert "temple-artemis" in await cited_documents()
    deletion = await http.delete("/v1/documents/temple-artemis")
    assert deletion.status_code == 202
    job = await wait_for_job(http, deletion.json()["job_id"])
    assert job["documents_done"] == 1
    assert "temple-artemis" not in await cited_documents()
    missing = await http.delete("/v1/documents/never-was")
    assert (await wait_for_job(http, missing.json()["job_id"]))["documents_unchanged"] == 1


async def wait_for_job(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {}
    for _ in range(300):
        job = (await http.get(f"/v1/ingest/{job_id}")).json()
        if job["status"] != "running":
            break
        await asyncio.sleep(0.1)
    assert job["status"] == "completed", job
    return job
