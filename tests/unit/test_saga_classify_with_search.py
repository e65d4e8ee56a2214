"""The saga with `RAGBUS_CLASSIFY_WITH_SEARCH` on: a question asked for an answer outside a
conversation goes straight to one search command that classifies it first, and the result's
classification is applied before its channels are; anything else keeps the classify step.
A classifying search that fails, or misses its deadline, degrades classification as the
classify step's failure does, and the search starts again with the prior's weights."""

from __future__ import annotations

from typing import Any

from contracts.commands import ClassifyCommand, GenerateCommand, SearchCommand, ToolCommand
from contracts.enums import (
    DOCUMENT_CHANNELS,
    Channel,
    Intent,
    Phase,
    PhaseStatus,
    RequestStatus,
    StepStatus,
)
from contracts.events import PhaseEvent
from contracts.models import ErrorInfo
from contracts.results import (
    CHANNEL_TIMED_OUT,
    ChannelOutcome,
    Classified,
    Fused,
    SearchResult,
    StepFailure,
)
from infra.retrieval.intent_profiles import PRIOR
from tests.unit.saga_support import CHUNK, FACTUAL, Run

ON = {"classify_with_search": True, "search_batch": True}


def searches(run: Run) -> list[SearchCommand]:
    return [m for m in run.sent if isinstance(m, SearchCommand)]


def answered(run: Run, cmd: SearchCommand, **fields: Any) -> SearchResult:
    """The worker's answer: classified as `fields` say, the weighed channels searched and
    fused."""
    classified = fields.pop("classified", None)
    weights = classified.weights if classified else {}
    searched = [c for c in cmd.also if weights.get(c, 0.0) > 0.0]
    return SearchResult(
        **run.corr(cmd),
        channel=cmd.channel,
        count=3,
        also=[ChannelOutcome(channel=c, count=2) for c in searched],
        fused=Fused(chunks=[CHUNK.model_copy(update={"claimed": True})]),
        classified=classified,
        **fields,
    )


FACTUAL_CLASSIFIED = Classified(
    intent=Intent.FACTUAL, confidence=0.9, method="setfit", weights=FACTUAL
)


def test_the_first_search_classifies_and_no_classify_step_runs() -> None:
    run = Run(**ON)
    run.submit(intent="comparison")
    assert not any(isinstance(m, ClassifyCommand) for m in run.sent)
    [cmd] = searches(run)
    assert cmd.classify is not None and cmd.classify.intent_override is Intent.COMPARISON
    assert set(cmd.channels) == DOCUMENT_CHANNELS
    assert cmd.fuse is not None and cmd.fuse.weights == PRIOR
    state = run.state
    assert state is not None and state.status is RequestStatus.SEARCHING
    assert state.pending is not None and set(state.pending.command_ids.values()) == {cmd.event_id}
    assert state.channel_reports[Channel.MEMORY].reason == "no session"


def test_its_classification_is_applied_and_the_fused_list_goes_to_generation() -> None:
    run = Run(**ON)
    run.submit()
    [cmd] = searches(run)
    sent = run.result(
        answered(run, cmd, classified=FACTUAL_CLASSIFIED, query_vector="claim:vector:abc")
    )
    state = run.state
    assert state is not None and state.status is RequestStatus.GENERATING
    assert (state.intent, state.intent_method, state.weights) == (
        Intent.FACTUAL,
        "setfit",
        FACTUAL,
    )
    assert state.query_vector == "claim:vector:abc"
    assert state.query_vectors == {}, "the question's vector is the classification's"
    skipped = state.channel_reports[Channel.GRAPH_GLOBAL]
    assert (skipped.status, skipped.reason) == ("skipped", "weight 0 for this intent")
    assert state.channel_reports[Channel.VECTOR].count == 3
    [generate] = [m for m in sent if isinstance(m, GenerateCommand)]
    assert generate.query_vectors == {generate.query: "claim:vector:abc"}


def test_a_tool_question_goes_to_the_tool_step_unsearched() -> None:
    run = Run(**ON)
    run.submit(query="what is 17 * 23")
    [cmd] = searches(run)
    tool = Classified(intent=Intent.TOOL, confidence=0.9, method="rules", weights=FACTUAL)
    sent = run.result(SearchResult(**run.corr(cmd), channel=cmd.channel, classified=tool))
    assert [type(m) for m in sent if not isinstance(m, PhaseEvent)] == [ToolCommand]
    assert run.state is not None and run.state.intent is Intent.TOOL


def degraded(run: Run, sent: list[Any]) -> SearchCommand:
    """The request classified by fallback, searching again with the prior's weights."""
    state = run.state
    assert state is not None
    assert (state.intent, state.intent_method, state.weights) == (Intent.FACTUAL, "fallback", PRIOR)
    [again] = [m for m in sent if isinstance(m, SearchCommand)]
    assert again.classify is None and again.fuse is not None and again.fuse.weights == PRIOR
    return again


def test_a_failed_classifying_search_degrades_and_searches_again() -> None:
    run = Run(**ON)
    run.submit()
    [cmd] = searches(run)
    sent = run.result(StepFailure(**run.corr(cmd), step="search", channel=cmd.channel))
    degraded(run, sent)


def test_a_result_without_a_classification_degrades_too() -> None:
    run = Run(**ON)
    run.submit()
    [cmd] = searches(run)
    degraded(run, run.result(answered(run, cmd)))


def test_a_missed_deadline_degrades_with_a_failed_classification_event() -> None:
    run = Run(**ON)
    run.submit()
    [first] = searches(run)
    settings = run.settings
    waited = settings.classify_timeout_s + settings.search_timeout_s + settings.fuse_timeout_s
    assert run.tick(waited - 1) == []
    sent = run.tick(2)
    [event] = [
        m for m in sent if isinstance(m, PhaseEvent) and m.data.phase is Phase.INTENT_CLASSIFICATION
    ]
    assert event.data.status is PhaseStatus.FAILED
    degraded(run, sent)
    # the classifying command's answer, arriving late, is not the one awaited now
    assert run.result(answered(run, first, classified=FACTUAL_CLASSIFIED)) == []


def test_anything_else_keeps_the_classify_step() -> None:
    for fields, settings in (
        ({"session_id": "chat-1"}, ON),  # a follow-up is made standalone first
        ({"mode": "retrieve"}, ON),  # the channels' own rankings, fused by the fuse step
        ({"mode": "research"}, ON),
        ({}, {**ON, "memory_scope": "tenant"}),  # the memory channel: a command of its own
        ({}, {**ON, "classify_with_search": False}),
        ({}, {**ON, "fuse_with_search": False}),
    ):
        run = Run(**settings)
        run.submit(**fields)
        assert [type(m) for m in run.sent] == [ClassifyCommand], (fields, settings)


def test_the_command_carries_its_search_deadline_and_a_channel_dropped_there_is_timed_out() -> None:
    """The worker drops a channel still silent at the command's `deadline_at` (classify and
    search time from the transition; the saga's own deadline adds the fuse step's) and the
    saga reports it timed out, as one its own deadline drops."""
    run = Run(**ON)
    run.submit()
    [cmd] = searches(run)
    settings = run.settings
    assert cmd.deadline_at is not None
    assert cmd.deadline_at.timestamp() == run.now + (
        settings.classify_timeout_s + settings.search_timeout_s
    )
    state = run.state
    assert state is not None and state.pending is not None
    assert state.pending.deadline_at == cmd.deadline_at.timestamp() + settings.fuse_timeout_s

    result = answered(run, cmd, classified=FACTUAL_CLASSIFIED)
    dropped = ErrorInfo(code=CHANNEL_TIMED_OUT, message="no answer by the search deadline")
    result.also[0] = result.also[0].model_copy(
        update={"status": StepStatus.FAILED, "error": dropped, "count": 0}
    )
    run.result(result)
    state = run.state
    assert state is not None and state.status is RequestStatus.GENERATING
    report = state.channel_reports[result.also[0].channel]
    assert (report.status, report.reason) == ("timed_out", "no answer by the search deadline")
