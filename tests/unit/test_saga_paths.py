"""The saga's query path decisions, without a broker or Redis: submission, classification,
routing (tool intent, retrieve mode), generation's tool calls and the critic's verdicts."""

from __future__ import annotations

from contracts.commands import (
    ClassifyCommand,
    CriticCommand,
    FuseCommand,
    GenerateCommand,
    SearchCommand,
    ToolCommand,
)
from contracts.enums import DOCUMENT_CHANNELS, Channel, Intent, RequestStatus
from contracts.events import AnswerEvent, DoneEvent, PhaseEvent
from contracts.models import RetrievedChunk, ToolOutcome
from contracts.queries import QuerySubmitted
from contracts.results import (
    ClassifyResult,
    FuseResult,
    StepFailure,
    ToolResult,
)
from infra.retrieval.intent_profiles import EVEN
from infra.retrieval.vectors.codec import pack_query
from orchestrator.classify import FALLBACK_WEIGHTS
from orchestrator.saga import Clock
from orchestrator.state import RequestState
from tests.unit.saga_support import FACTUAL, Run, kinds


def test_happy_path_reaches_completed_with_one_answer_and_one_done() -> None:
    run = Run()
    assert kinds(run.submit()) == ["ClassifyCommand"]
    assert run.state and run.state.status is RequestStatus.CLASSIFYING
    sent = run.classify()
    searches = [m for m in sent if isinstance(m, SearchCommand)]
    assert {s.channel for s in searches} == {Channel.VECTOR, Channel.SPARSE, Channel.GRAPH_LOCAL}
    skipped = [m for m in sent if isinstance(m, PhaseEvent)]
    assert skipped[0].data.phase.value == "graph_global_search"
    assert skipped[0].data.status.value == "skipped"
    sent = run.search_all()
    assert kinds(sent) == ["FuseCommand"]
    assert kinds(run.fuse()) == ["GenerateCommand"]
    assert kinds(run.generate()) == ["CriticCommand"]
    sent = run.critic()
    assert kinds(sent) == ["AnswerEvent", "DoneEvent"]
    # published as one message: the done carries the answer, and callers get both
    closing = run.published[-1]
    assert isinstance(closing, DoneEvent) and closing.split() == sent
    assert kinds(run.published).count("AnswerEvent") == 0
    answer: AnswerEvent = sent[0]
    assert answer.data.citations[1].chunk_id == "c1"
    assert answer.data.citations[1].snippet == "Pharos light."  # the passage, for its card
    assert answer.data.metadata["attempts"] == 1
    assert run.state.status is RequestStatus.COMPLETED
    assert run.state.pending is None


def test_steps_that_resolve_claims_get_claimed_passages_without_their_openings() -> None:
    run = Run()
    run.submit()
    run.classify()
    run.search_all()
    cmd = run.last(FuseCommand)
    claimed = RetrievedChunk(chunk_id="c1", document_id="d1", text="Pharos light.", claimed=True)
    inline = RetrievedChunk(chunk_id="m1", document_id="d2", text="A remembered fact.")
    run.result(FuseResult(**run.corr(cmd), chunks=[claimed, inline]))
    generate = run.last(GenerateCommand)
    assert [c.text for c in generate.contexts] == ["", "A remembered fact."]
    assert '"Pharos' not in generate.compact_json()
    assert run.state
    assert [c.text for c in run.state.fused] == ["Pharos light.", "A remembered fact."]
    run.generate()
    assert [c.text for c in run.last(CriticCommand).contexts] == ["", "A remembered fact."]
    answer = run.critic()[0]
    assert isinstance(answer, AnswerEvent)
    assert answer.data.citations[1].snippet == "Pharos light."  # from the state's opening


def test_a_result_for_another_command_or_attempt_is_ignored() -> None:
    run = Run()
    run.submit()
    cmd = run.last(ClassifyCommand)
    stale = ClassifyResult(
        request_id="r1",
        attempt=1,
        command_id="someone-else",
        intent=Intent.FACTUAL,
        confidence=1,
        method="x",
        weights=FACTUAL,
    )
    assert run.saga.on_result(run.state, stale, Clock(run.now)).state is None
    wrong_attempt = ClassifyResult(
        request_id="r1",
        attempt=2,
        command_id=cmd.event_id,
        intent=Intent.FACTUAL,
        confidence=1,
        method="x",
        weights=FACTUAL,
    )
    assert run.saga.on_result(run.state, wrong_attempt, Clock(run.now)).state is None


def test_a_submission_the_api_never_recorded_runs_nothing() -> None:
    run = Run()
    forged = QuerySubmitted(request_id="forged", query="who built the lighthouse")
    transition = run.saga.on_submitted(None, forged, Clock(run.now))
    assert transition.state is None and transition.messages == []


def test_resubmission_of_a_started_request_changes_nothing() -> None:
    run = Run()
    run.submit()
    again = QuerySubmitted(request_id="r1", query="who built the lighthouse")
    assert run.saga.on_submitted(run.state, again, Clock(run.now)).state is None


def test_classification_failure_degrades_to_the_prior_weights() -> None:
    run = Run()
    run.submit()
    cmd = run.last(ClassifyCommand)
    sent = run.result(StepFailure(**run.corr(cmd), step="classify"))
    searched = {m.channel for m in sent if isinstance(m, SearchCommand)}
    # no session: no memory channel, whatever its weight
    assert searched == {c for c, w in FALLBACK_WEIGHTS.items() if w > 0} - {Channel.MEMORY}
    assert run.state.weights == FALLBACK_WEIGHTS
    assert run.state.intent_method == "fallback"


def test_tool_intent_goes_straight_to_the_tool_worker_then_generation() -> None:
    run = Run()
    run.submit()
    sent = run.classify(intent=Intent.TOOL, weights=EVEN)
    assert kinds(sent) == ["ToolCommand"]
    tool_cmd: ToolCommand = sent[0]
    sent = run.result(
        ToolResult(
            **run.corr(tool_cmd),
            outcomes=[ToolOutcome(call_id="1", name="calculator", ok=True, output="395")],
        )
    )
    assert kinds(sent) == ["GenerateCommand"]
    assert sent[0].tool_results[0].output == "395"


def test_generation_may_ask_for_tools_within_the_budget() -> None:
    run = Run(max_tool_calls=1)
    run.submit()
    run.classify()
    run.search_all()
    run.fuse()
    sent = run.generate(
        answer="",
        citations={},
        tool_calls=[{"id": "t1", "name": "calculator", "arguments": {"expression": "2+2"}}],
    )
    assert kinds(sent) == ["ToolCommand"]
    run.result(ToolResult(**run.corr(sent[0]), outcomes=[]))
    sent = run.generate(
        answer="",
        citations={},
        tool_calls=[{"id": "t2", "name": "calculator", "arguments": {"expression": "3+3"}}],
    )
    assert kinds(sent) == ["CriticCommand"], "a spent tool budget goes on to the critic"


def test_retrieve_mode_searches_every_channel_and_completes_after_fusion() -> None:
    run = Run()
    run.submit(mode="retrieve", top_k=100)
    sent = run.classify()
    assert {m.channel for m in sent if isinstance(m, SearchCommand)} == DOCUMENT_CHANNELS
    run.search_all()
    sent = run.fuse()
    assert kinds(sent) == ["AnswerEvent", "DoneEvent"]
    retrieval = sent[0].data.metadata["retrieval"]
    assert retrieval["fused"][0]["document_id"] == "d1"
    assert set(retrieval["channels"]) == {c.value for c in DOCUMENT_CHANNELS}


def test_retrieve_mode_retrieves_even_for_a_tool_intent() -> None:
    run = Run()
    run.submit(mode="retrieve")
    sent = run.classify(intent=Intent.TOOL, weights=EVEN)
    assert {m.channel for m in sent if isinstance(m, SearchCommand)} == DOCUMENT_CHANNELS


def test_critic_retry_broadens_then_accepts_on_the_second_attempt() -> None:
    run = Run(max_attempts=2)
    run.to_critic()
    top_k_before = run.state.channel_top_k
    sent = run.critic("retry", strategy="broaden", confidence=0.2, reasons=["weak retrieval"])
    retry = next(m for m in sent if isinstance(m, PhaseEvent))
    assert retry.data.phase.value == "retry"
    assert retry.data.metadata["to_attempt"] == 2
    assert run.state.attempt == 2
    assert run.state.channel_top_k == top_k_before * 2
    assert all(m.attempt == 2 for m in sent if isinstance(m, SearchCommand))
    run.search_all()
    run.fuse()
    run.generate(answer="Sostratus of Cnidus built it [1].")
    sent = run.critic("accept")
    assert kinds(sent) == ["AnswerEvent", "DoneEvent"]
    answer = sent[0].data
    assert answer.metadata["attempts"] == 2
    # the rejected draft is kept; the final one is the event's content, not sent twice
    first, final = answer.metadata["attempt_history"]
    assert first["answer"] == "Sostratus built it [1]." and first["verdict"] == "retry"
    assert "answer" not in final and final["verdict"] == "accept"
    assert answer.content == "Sostratus of Cnidus built it [1]."


def test_attempts_spent_answers_with_a_low_confidence_flag() -> None:
    run = Run(max_attempts=1)
    run.to_critic()
    sent = run.critic(
        "retry", strategy="rewrite", rewritten_query="lighthouse builder", confidence=0.2
    )
    assert kinds(sent) == ["AnswerEvent", "DoneEvent"]
    assert sent[0].data.metadata["low_confidence"] is True
    assert "Low confidence (0.20) after 1 attempt" in sent[0].data.metadata["note"]
    assert sent[0].data.metadata["attempt_history"][0]["documents"] == ["d1"]


def test_a_low_confidence_verdict_answers_with_the_note_and_its_reason() -> None:
    run = Run(max_attempts=2)
    run.to_critic()
    sent = run.critic("low_confidence", confidence=0.31, reasons=["retrieval was weak"])
    assert kinds(sent) == ["AnswerEvent", "DoneEvent"]
    metadata = sent[0].data.metadata
    assert metadata["low_confidence"] is True
    assert metadata["note"].startswith(
        "Low confidence (0.31) after 1 attempt(s): retrieval was weak"
    )


def test_rewrite_strategy_changes_the_searched_query_and_drops_the_cached_vector() -> None:
    run = Run(max_attempts=2)
    run.submit()
    cmd = run.last(ClassifyCommand)
    run.result(
        ClassifyResult(
            **run.corr(cmd),
            intent=Intent.FACTUAL,
            confidence=0.9,
            method="setfit",
            weights=FACTUAL,
            query_vector=pack_query([0.1, 0.2]),
        )
    )
    searches = [m for m in run.sent if isinstance(m, SearchCommand)]
    # only the channels that search by embedding carry it
    assert all(
        m.query_vector == (pack_query([0.1, 0.2]) if m.channel.reads_query_vector else None)
        for m in searches
    )
    assert any(m.query_vector for m in searches)
    run.search_all()
    run.fuse()
    run.generate()
    sent = run.critic("retry", strategy="rewrite", rewritten_query="lighthouse builder")
    searches = [m for m in sent if isinstance(m, SearchCommand)]
    assert searches and all(s.query == "lighthouse builder" for s in searches)
    assert all(s.query_vector is None for s in searches)


def test_rebalance_with_bridge_terms_searches_every_channel_with_the_expanded_query() -> None:
    run = Run(max_attempts=2)
    run.to_critic()
    sent = run.critic(
        "retry", strategy="rebalance", rewritten_query="who built the lighthouse Sostratus"
    )
    searches = [m for m in sent if isinstance(m, SearchCommand)]
    assert {s.channel for s in searches} == DOCUMENT_CHANNELS
    assert all(s.query == "who built the lighthouse Sostratus" for s in searches)
    assert run.state.weights == dict(EVEN)


def test_a_state_saved_with_one_search_query_still_loads() -> None:
    run = Run()
    run.submit()
    saved = run.state.model_dump(mode="json")
    saved["search_query"] = saved.pop("search_queries")[0]
    assert RequestState.model_validate(saved).search_queries == ["who built the lighthouse"]
