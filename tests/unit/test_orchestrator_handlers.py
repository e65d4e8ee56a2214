"""The orchestrator's subscribers under FastStream's TestNatsBroker, with a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import JStream, NatsBroker, TestNatsBroker

from contracts import subjects as sj
from contracts.enums import Channel, Intent, Phase, PhaseStatus, RequestStatus
from contracts.events import DoneData, DoneEvent, PhaseData, PhaseEvent
from contracts.queries import QuerySubmitted
from contracts.results import ClassifyResult
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.runtime.services import LocalService
from infra.settings import Settings
from orchestrator.service import Orchestrator, create_router
from orchestrator.store import Outgoing, StateStore, Transition, outbox_key

WEIGHTS = {
    Channel.VECTOR: 0.5,
    Channel.SPARSE: 0.5,
    Channel.GRAPH_LOCAL: 0.0,
    Channel.GRAPH_GLOBAL: 0.0,
}


def recorder(seen: dict[str, list[dict[str, Any]]], subject: str) -> Any:
    async def record(body: dict[str, Any]) -> None:
        seen.setdefault(subject, []).append(body)

    return record


Harness = tuple[Any, Orchestrator, dict[str, list[dict[str, Any]]]]


@asynccontextmanager
async def _harness(redis_url: str, tmp_path: Path, **overrides: Any) -> AsyncIterator[Harness]:
    settings = Settings(redis_url=redis_url, data_dir=tmp_path, **overrides)
    broker = NatsBroker()
    resources = Resources(settings, Bus(broker))
    orchestrator = Orchestrator(resources)
    broker.include_router(create_router(resources, orchestrator))
    seen: dict[str, list[dict[str, Any]]] = {}

    for subject, stream in (
        ("rag.cmd.classify", "RAG_CMD"),
        ("rag.cmd.search.vector", "RAG_CMD"),
        ("rag.cmd.search.sparse", "RAG_CMD"),
        ("rag.dlq.rag.query.submitted", "RAG_DLQ"),
        (sj.events_subject("default", "unit-late"), sj.STREAM_EVENTS),
    ):
        broker.subscriber(subject, stream=JStream(stream, declare=False))(recorder(seen, subject))

    async with TestNatsBroker(broker) as test_broker:
        yield test_broker, orchestrator, seen
    await resources.aclose()


@pytest.fixture
async def harness(redis_service: LocalService, tmp_path: Path) -> AsyncIterator[Harness]:
    """The default deployment: a plain question's first search command classifies it."""
    async with _harness(redis_service.url, tmp_path) as running:
        yield running


@pytest.fixture
async def classify_step_harness(
    redis_service: LocalService, tmp_path: Path
) -> AsyncIterator[Harness]:
    """A classify step of its own, as a question in a conversation (or every question with
    RAGBUS_CLASSIFY_WITH_SEARCH=false) has."""
    async with _harness(redis_service.url, tmp_path, classify_with_search=False) as running:
        yield running


async def test_submission_starts_a_classifying_search_and_a_duplicate_changes_nothing(
    harness: Harness,
) -> None:
    broker, orchestrator, seen = harness
    submitted = QuerySubmitted(request_id="unit-0", query="what is pharos")
    await orchestrator.store.create(submitted)
    await broker.publish(submitted.model_dump(mode="json"), "rag.query.submitted")
    await broker.publish(submitted.model_dump(mode="json"), "rag.query.submitted")
    assert "rag.cmd.classify" not in seen, "no classify step: the search classifies"
    (command,) = seen["rag.cmd.search.vector"]
    assert command["classify"] is not None and command["fuse"] is not None
    assert set(command["also"]) == {"sparse", "graph_local", "graph_global"}
    state = await orchestrator.store.get("unit-0")
    assert state is not None and state.status.value == "searching" and state.intent is None
    assert await orchestrator.store.pending_outbox("unit-0") == [], "outbox drained after publish"


async def test_a_question_handed_over_in_process_takes_its_first_step_without_a_read(
    harness: Harness,
) -> None:
    """`api.submission`: the state the API records is the one the first step starts from, so
    that step is one commit; a replay sends again only what was left unpublished."""
    _, orchestrator, seen = harness
    submitted = QuerySubmitted(request_id="unit-in-process", query="what is pharos")
    await orchestrator.store.create(submitted, drive=True)
    redis = orchestrator.store.redis
    calls_before = (await redis.info("commandstats")).get("cmdstat_get", {}).get("calls", 0)
    await orchestrator.handle_submission(submitted)
    calls_after = (await redis.info("commandstats")).get("cmdstat_get", {}).get("calls", 0)
    # one GET: the commit script's own version check; a read would add two (state, version)
    assert calls_after - calls_before == 1, "the first step read no state"
    (command,) = seen["rag.cmd.search.vector"]
    assert command["classify"] is not None
    state = await orchestrator.store.get("unit-in-process")
    assert state is not None and state.status.value == "searching" and state.version == 1

    await orchestrator.resume(submitted)  # a replay by its key: everything went out already
    assert len(seen["rag.cmd.search.vector"]) == 1
    assert await orchestrator.store.pending_outbox("unit-in-process") == []

    # a replay after a publish that failed: what the step committed goes out now
    lost = Outgoing(
        "rag.cmd.search.vector", "RAG_CMD", QuerySubmitted(request_id="unit-in-process", query="x")
    ).entry()
    await redis.hset(outbox_key("unit-in-process"), lost.event_id, lost.to_json())
    await orchestrator.resume(submitted)
    assert len(seen["rag.cmd.search.vector"]) == 2
    # published: kept for the request's next commit to delete, and never sent a third time
    assert await orchestrator.store.unpublished("unit-in-process") == []


async def test_submission_starts_classification_and_a_duplicate_changes_nothing(
    classify_step_harness: Harness,
) -> None:
    broker, orchestrator, seen = classify_step_harness
    submitted = QuerySubmitted(request_id="unit-1", query="what is pharos")
    await orchestrator.store.create(submitted)  # as the API does before publishing
    await broker.publish(submitted.model_dump(mode="json"), "rag.query.submitted")
    await broker.publish(submitted.model_dump(mode="json"), "rag.query.submitted")
    assert len(seen["rag.cmd.classify"]) == 1
    state = await orchestrator.store.get("unit-1")
    assert state is not None and state.status.value == "classifying"
    assert await orchestrator.store.pending_outbox("unit-1") == [], "outbox drained after publish"

    command = seen["rag.cmd.classify"][0]
    result = ClassifyResult(
        request_id="unit-1",
        command_id=command["event_id"],
        intent=Intent.NAVIGATION,
        confidence=0.8,
        method="rules",
        weights=WEIGHTS,
    )
    await broker.publish(result.model_dump(mode="json"), "rag.res.classify")
    await broker.publish(result.model_dump(mode="json"), "rag.res.classify")  # redelivery
    # one command searches the document channels (the vector one's subject), once
    assert [c["also"] for c in seen["rag.cmd.search.vector"]] == [["sparse"]]
    assert "rag.cmd.search.sparse" not in seen
    state = await orchestrator.store.get("unit-1")
    assert state is not None and state.status.value == "searching"


async def test_a_redelivered_event_republishes_an_unsent_outbox(
    harness: Harness,
) -> None:
    broker, orchestrator, seen = harness
    submitted = QuerySubmitted(request_id="unit-2", query="what is pharos")
    store: StateStore = orchestrator.store
    await store.create(submitted)
    # Simulate a crash between commit and publish: commit, but never publish.
    applied = await store.apply(
        "unit-2",
        submitted.event_id,
        lambda state: orchestrator.saga.on_submitted(state, submitted, _clock()),
    )
    assert applied.outbox and await store.redis.hlen(outbox_key("unit-2")) == 1
    await broker.publish(submitted.model_dump(mode="json"), "rag.query.submitted")
    assert len(seen.get("rag.cmd.search.vector", [])) == 1
    assert await store.redis.hlen(outbox_key("unit-2")) == 0


async def test_a_late_progress_event_never_follows_its_requests_done(
    harness: Harness,
) -> None:
    """A transition's phase event stayed queued (its process died before publishing it) while
    the request went on to its done: a redelivery leaves the phase event out. Queued together
    with the done, it goes out first, as decided."""
    _, orchestrator, seen = harness
    store: StateStore = orchestrator.store
    rid = "unit-late"
    subject = sj.events_subject("default", rid)
    await store.create(QuerySubmitted(request_id=rid, query="what is pharos"))

    def emit(*events: PhaseEvent | DoneEvent, finish: bool = False) -> Any:
        def decide(state: Any) -> Transition:
            if finish:
                state.status = RequestStatus.COMPLETED
            return Transition(state, [Outgoing(subject, sj.STREAM_EVENTS, e) for e in events])

        return decide

    phase = PhaseEvent(
        request_id=rid,
        data=PhaseData(phase=Phase.VECTOR_SEARCH, status=PhaseStatus.SKIPPED),
    )
    done = DoneEvent(request_id=rid, data=DoneData(status=RequestStatus.COMPLETED))
    await store.apply(rid, "e1", emit(phase))  # committed, never published
    finished = await store.apply(rid, "e2", emit(done, finish=True))
    await orchestrator._publish(rid, finished.outbox)  # the done goes out
    assert [m["type"] for m in seen[subject]] == ["done"]

    await orchestrator._publish(rid, await store.pending_outbox(rid), late=True)
    assert [m["type"] for m in seen[subject]] == ["done"], "nothing after the done"
    assert await store.pending_outbox(rid) == []

    # queued with its done (the terminal transition's process died): all of it, in order
    seen[subject].clear()
    last = PhaseEvent(
        request_id=rid, data=PhaseData(phase=Phase.CRITIC, status=PhaseStatus.COMPLETED)
    )
    applied = await store.apply(rid, "e3", emit(last, done))
    await orchestrator._publish(rid, applied.outbox, late=True)
    assert [m["type"] for m in seen[subject]] == ["phase", "done"]


async def test_malformed_submission_is_dead_lettered(
    harness: Harness,
) -> None:
    broker, _, seen = harness
    await broker.publish({"request_id": "bad id with spaces", "query": ""}, "rag.query.submitted")
    letters = seen["rag.dlq.rag.query.submitted"]
    assert letters[0]["reason"] == "poison"
    assert "request_id" in letters[0]["error"]


def _clock() -> Any:
    from orchestrator.saga import Clock

    return Clock.system()


async def test_a_replica_that_loses_the_race_reads_and_decides_again(
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Optimistic concurrency: a commit whose version moved since the read is refused, and the
    loser decides again on the winner's state; nothing is lost or applied twice."""
    _, orchestrator, _ = harness
    store: StateStore = orchestrator.store
    await store.create(QuerySubmitted(request_id="unit-3", query="who built the pharos"))
    real_commit = store._commit
    seen_by_loser: list[str] = []

    async def racing_commit(*args: Any) -> int:
        if len(seen_by_loser) == 1:  # between the loser's read and its commit, a winner commits
            await real_commit_once_by_winner()
        return await real_commit(*args)

    async def real_commit_once_by_winner() -> None:
        monkeypatch.setattr(store, "_commit", real_commit)
        winner = await store.get("unit-3")
        assert winner is not None
        winner.query = "changed by the winner"
        await store.apply("unit-3", "winner-event", lambda _: Transition(winner))
        monkeypatch.setattr(store, "_commit", racing_commit)

    def loser(state: Any) -> Transition:
        seen_by_loser.append(state.query)
        return Transition(state.model_copy(update={"intent_method": "loser"}))

    monkeypatch.setattr(store, "_commit", racing_commit)
    applied = await store.apply("unit-3", "loser-event", loser)
    final = await store.get("unit-3")
    assert applied.transition is not None and final is not None
    assert seen_by_loser == ["who built the pharos", "changed by the winner"]
    assert (final.query, final.intent_method, final.version) == (
        "changed by the winner",
        "loser",
        2,
    )
    again = await store.apply("unit-3", "loser-event", loser)  # redelivered: changes nothing
    assert again.duplicate and again.transition is None
    unchanged = await store.get("unit-3")
    assert unchanged is not None and unchanged.version == 2
