"""The saga's decisions, without a broker or Redis: every path from submit to terminal."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.commands import (
    ClassifyCommand,
    CriticCommand,
    FuseCommand,
    GenerateCommand,
    SearchCommand,
    ToolCommand,
)
from contracts.enums import DOCUMENT_CHANNELS, Channel, Intent, RequestStatus
from contracts.events import AnswerEvent, DoneEvent, ErrorEvent, PhaseEvent
from contracts.models import ErrorInfo, RetrievedChunk, ToolOutcome
from contracts.queries import QueryCancelled, QuerySubmitted
from contracts.results import (
    ChannelOutcome,
    ClassifyResult,
    CriticResult,
    FuseResult,
    GenerateResult,
    SearchResult,
    StepFailure,
    ToolResult,
)
from infra.retrieval.intent_profiles import EVEN
from infra.retrieval.vectors.codec import pack_query
from infra.settings import Settings
from orchestrator.saga import FALLBACK_WEIGHTS, Clock, Saga
from orchestrator.state import RequestState
from orchestrator.store import Transition, initial_state

FACTUAL = {
    Channel.VECTOR: 0.3,
    Channel.SPARSE: 0.3,
    Channel.GRAPH_LOCAL: 0.4,
    Channel.GRAPH_GLOBAL: 0.0,
}
CHUNK = RetrievedChunk(chunk_id="c1", document_id="d1", title="T", text="Pharos light.")


class Run:
    """Drives one request through the saga, keeping the state as Redis would."""

    def __init__(self, **settings: Any) -> None:
        # a command per channel unless a test asks for batches: the tests name channels
        self.settings = Settings(**{"search_batch": False, **settings})
        self.saga = Saga(self.settings)
        self.now = 1_000.0
        self.state: RequestState | None = None
        self.sent: list[Any] = []

    def _take(self, transition: Transition) -> list[Any]:
        if transition.state is not None:
            self.state = transition.state.model_copy(deep=True)
        messages = [m.message for m in transition.messages]
        self.sent.extend(messages)
        return messages

    def submit(self, **fields: Any) -> list[Any]:
        """What the API does, then what the orchestrator does with the submission."""
        fields.setdefault("query", "who built the lighthouse")
        msg = QuerySubmitted(request_id="r1", **fields)
        if self.state is None:
            self.state = initial_state(msg, self.settings, self.now)
        return self._take(self.saga.on_submitted(self.state, msg, Clock(self.now)))

    def result(self, result: Any) -> list[Any]:
        return self._take(self.saga.on_result(self.state, result, Clock(self.now)))

    def tick(self, advance: float) -> list[Any]:
        self.now += advance
        return self._take(self.saga.on_tick(self.state, Clock(self.now)))

    def last(self, kind: type) -> Any:
        return next(m for m in reversed(self.sent) if isinstance(m, kind))

    def corr(self, cmd: Any) -> dict[str, Any]:
        return {"request_id": cmd.request_id, "attempt": cmd.attempt, "command_id": cmd.event_id}

    # ---- steps answered the happy way
    def classify(
        self,
        weights: dict[Channel, float] = FACTUAL,
        intent: Intent = Intent.FACTUAL,
        confidence: float = 0.9,
    ) -> list[Any]:
        cmd = self.last(ClassifyCommand)
        return self.result(
            ClassifyResult(
                **self.corr(cmd),
                intent=intent,
                confidence=confidence,
                method="zero_shot",
                weights=weights,
            )
        )

    def search_all(self, chunks: list[RetrievedChunk] | None = None) -> list[Any]:
        out: list[Any] = []
        pending = self.state.pending if self.state else None
        awaited = set(pending.command_ids.values()) if pending else set()
        for cmd in [m for m in self.sent if isinstance(m, SearchCommand) and m.event_id in awaited]:
            found = chunks if chunks is not None else [CHUNK]
            out += self.result(
                SearchResult(
                    **self.corr(cmd),
                    channel=cmd.channel,
                    chunks=found,
                    also=[ChannelOutcome(channel=c, chunks=found) for c in cmd.also],
                )
            )
        return out

    def fuse(self) -> list[Any]:
        cmd = self.last(FuseCommand)
        return self.result(
            FuseResult(**self.corr(cmd), chunks=[CHUNK], effective_weights={Channel.VECTOR: 1.0})
        )

    def generate(self, **fields: Any) -> list[Any]:
        cmd = self.last(GenerateCommand)
        fields.setdefault("answer", "Sostratus built it [1].")
        fields.setdefault("citations", {1: "c1"})
        return self.result(GenerateResult(**self.corr(cmd), **fields))

    def to_critic(self) -> None:
        """Submit and answer every step the happy way, up to the critic's command."""
        self.submit()
        self.classify()
        self.search_all()
        self.fuse()
        self.generate()

    def critic(self, verdict: str = "accept", **fields: Any) -> list[Any]:
        cmd = self.last(CriticCommand)
        return self.result(
            CriticResult(
                **self.corr(cmd),
                verdict=verdict,
                confidence=fields.pop("confidence", 0.8),
                **fields,
            )
        )


def kinds(messages: list[Any]) -> list[str]:
    return [type(m).__name__ for m in messages]


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
    answer: AnswerEvent = sent[0]
    assert answer.data.citations[1].chunk_id == "c1"
    assert answer.data.citations[1].snippet == "Pharos light."  # the passage, for its card
    assert answer.data.metadata["attempts"] == 1
    assert run.state.status is RequestStatus.COMPLETED
    assert run.state.pending is None


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


def test_failed_channel_is_reported_and_fusion_gets_only_the_answering_channels() -> None:
    run = Run()
    run.submit()
    run.classify()
    cmds = {m.channel: m for m in run.sent if isinstance(m, SearchCommand)}
    run.result(
        StepFailure(
            **run.corr(cmds[Channel.GRAPH_LOCAL]),
            step="search",
            channel=Channel.GRAPH_LOCAL,
            error=ErrorInfo(code="step_failed", message="boom"),
        )
    )
    sent = run.search_all()
    fuse: FuseCommand = sent[-1]
    assert set(fuse.results) == {Channel.VECTOR, Channel.SPARSE}
    assert run.state.channel_reports[Channel.GRAPH_LOCAL].status == "failed"


def test_search_deadline_drops_silent_channels_and_fuses() -> None:
    run = Run(search_timeout_s=5)
    run.submit()
    run.classify()
    vector = next(
        m for m in run.sent if isinstance(m, SearchCommand) and m.channel is Channel.VECTOR
    )
    run.result(SearchResult(**run.corr(vector), channel=Channel.VECTOR, chunks=[CHUNK]))
    assert run.tick(4.0) == []
    sent = run.tick(1.5)
    dropped = [m for m in sent if isinstance(m, PhaseEvent)]
    assert {d.data.phase.value for d in dropped} == {"sparse_search", "graph_local_search"}
    assert all(d.data.status.value == "failed" and d.data.metadata["dropped"] for d in dropped)
    assert isinstance(sent[-1], FuseCommand)
    assert set(sent[-1].results) == {Channel.VECTOR}
    assert run.state.channel_reports[Channel.SPARSE].status == "timed_out"


def test_claimed_rankings_reach_fusion_by_their_fields_and_leave_the_state_after() -> None:
    run = Run()
    run.submit()
    run.classify()
    searches = [m for m in run.sent if isinstance(m, SearchCommand)]
    assert searches and all(m.claim_ranking for m in searches)
    for cmd in searches:
        run.result(
            SearchResult(
                **run.corr(cmd),
                channel=cmd.channel,
                ranking_claim=f"ranking:{cmd.event_id}",
                count=7,
            )
        )
    fuse = run.last(FuseCommand)
    assert fuse.results == {}
    assert fuse.claimed_results == {m.channel.value: f"ranking:{m.event_id}" for m in searches}
    assert all(run.state.channel_reports[m.channel].count == 7 for m in searches)
    run.result(FuseResult(**run.corr(fuse), chunks=[CHUNK]))
    assert run.state.claimed_results == {}


def test_a_retrieval_request_gets_its_rankings_inline() -> None:
    run = Run()
    run.submit(mode="retrieve")
    run.classify()
    assert not any(m.claim_ranking for m in run.sent if isinstance(m, SearchCommand))


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
    run.generate()
    sent = run.critic("accept")
    assert kinds(sent) == ["AnswerEvent", "DoneEvent"]
    assert sent[0].data.metadata["attempts"] == 2


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


def _failure(run: Run, cmd: Any, step: str) -> StepFailure:
    return StepFailure(
        **run.corr(cmd), step=step, error=ErrorInfo(code="step_failed", message="kaput")
    )


def test_a_failed_fusion_fails_the_request_with_an_error_event() -> None:
    run = Run()
    run.submit()
    run.classify()
    run.search_all()
    sent = run.result(_failure(run, run.last(FuseCommand), "fuse"))
    assert kinds(sent) == ["ErrorEvent", "DoneEvent"]
    error: ErrorEvent = sent[0]
    assert error.data.code == "fuse_failed"
    done: DoneEvent = sent[1]
    assert done.data.status is RequestStatus.FAILED


@pytest.mark.parametrize("how", ["failure", "deadline"])
def test_a_failed_generation_answers_with_the_best_passages_cited(how: str) -> None:
    run = Run(generate_timeout_s=20)
    run.submit()
    run.classify()
    run.search_all()
    run.fuse()
    cmd = run.last(GenerateCommand)
    sent = run.result(_failure(run, cmd, "generate")) if how == "failure" else run.tick(21)
    assert kinds(sent) == ["PhaseEvent", "AnswerEvent", "DoneEvent"]
    assert sent[0].data.status == "failed" and sent[0].data.metadata["fallback"] == "passages"
    answer: AnswerEvent = sent[1]
    assert "Pharos light. [1]" in answer.data.content
    assert answer.data.citations[1].chunk_id == "c1"
    assert answer.data.metadata["generator"] == "passages"
    assert "not critiqued" in answer.data.metadata["critic_note"]
    assert sent[2].data.status is RequestStatus.COMPLETED
    assert run.tick(200) == [], "one terminal event"


def test_a_failed_generation_with_no_passage_text_fails_the_request() -> None:
    run = Run()
    run.submit()
    run.classify()
    run.search_all()
    cmd = run.last(FuseCommand)
    run.result(
        FuseResult(
            **run.corr(cmd),
            chunks=[CHUNK.model_copy(update={"text": ""})],
            effective_weights={Channel.VECTOR: 1.0},
        )
    )
    sent = run.result(_failure(run, run.last(GenerateCommand), "generate"))
    assert kinds(sent) == ["ErrorEvent", "DoneEvent"]
    assert sent[0].data.code == "generate_failed"


def test_whole_request_deadline_times_out_with_one_terminal_event() -> None:
    run = Run(request_timeout_s=30, classify_timeout_s=29, generate_timeout_s=20, tool_timeout_s=20)
    run.submit()
    sent = run.tick(31)
    assert kinds(sent) == ["ErrorEvent", "DoneEvent"]
    assert sent[1].data.status is RequestStatus.TIMED_OUT
    assert run.tick(100) == [], "a finished request never gets a second terminal event"


def test_critic_silence_accepts_the_draft_rather_than_stranding_the_request() -> None:
    run = Run(critic_timeout_s=5)
    run.to_critic()
    sent = run.tick(6)
    assert kinds(sent)[-2:] == ["AnswerEvent", "DoneEvent"]
    assert sent[-2].data.metadata["critic_note"]


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


def test_decompose_searches_every_follow_up_and_fuses_them_onto_the_first_attempt() -> None:
    run = Run(max_attempts=2)
    run.to_critic()
    first_fused = list(run.state.fused)
    follow_ups = ["Sostratus of Cnidus birthplace", "Ptolemy II reign"]
    sent = run.critic("retry", strategy="decompose", sub_queries=follow_ups, confidence=0.3)
    retry = next(m for m in sent if isinstance(m, PhaseEvent))
    assert retry.data.metadata["search_queries"] == follow_ups
    searches = [m for m in sent if isinstance(m, SearchCommand)]
    searched = {(s.channel, s.query) for s in searches}
    live = {c for c, w in FACTUAL.items() if w > 0}
    assert searched == {(c, q) for c in live for q in follow_ups}
    assert all(s.query_vector is None for s in searches)

    answer = RetrievedChunk(chunk_id="c9", document_id="d9", text="Sostratus was born in Cnidus.")
    for search in searches:  # the second follow-up's answers come in first: order is free
        if search.query == follow_ups[1]:
            run.result(SearchResult(**run.corr(search), channel=search.channel, chunks=[CHUNK]))
    assert run.state.status is RequestStatus.SEARCHING
    for search in searches:
        if search.query == follow_ups[0]:
            run.result(SearchResult(**run.corr(search), channel=search.channel, chunks=[answer]))
    fuse = run.last(FuseCommand)
    assert fuse.attempt == 2
    assert fuse.carried == first_fused
    assert set(fuse.results) == live and fuse.results[Channel.VECTOR] == [answer]
    assert len(fuse.sub_results) == 1 and fuse.sub_results[0][Channel.VECTOR] == [CHUNK]

    sent = run.fuse()
    assert sent[0].follow_ups == follow_ups  # generation answers the follow-ups too
    run.generate()
    sent = run.critic("accept")
    history = sent[0].data.metadata["attempt_history"]
    assert history[0]["queries"] == ["who built the lighthouse"]
    assert history[0]["answer"] == "Sostratus built it [1]."
    assert history[1]["queries"] == follow_ups


def test_a_follow_up_search_that_misses_its_deadline_is_dropped_with_its_query() -> None:
    run = Run(max_attempts=2)
    run.to_critic()
    follow_ups = ["Sostratus birthplace", "Pharos height"]
    sent = run.critic("retry", strategy="decompose", sub_queries=follow_ups)
    for search in [m for m in sent if isinstance(m, SearchCommand)]:
        if not (search.channel is Channel.SPARSE and search.query == follow_ups[1]):
            run.result(SearchResult(**run.corr(search), channel=search.channel, chunks=[CHUNK]))
    sent = run.tick(run.settings.search_timeout_s + 1)
    dropped = [m for m in sent if isinstance(m, PhaseEvent)]
    assert [d.data.metadata["query"] for d in dropped] == ["Pharos height"]
    assert run.state.channel_reports[Channel.SPARSE].status == "completed"
    fuse = run.last(FuseCommand)
    assert Channel.SPARSE not in fuse.sub_results[0]


def test_a_search_result_for_a_query_not_awaited_is_stale() -> None:
    run = Run(max_attempts=2)
    run.to_critic()
    sent = run.critic("retry", strategy="decompose", sub_queries=["a b", "c d"])
    search = next(m for m in sent if isinstance(m, SearchCommand))
    wrong_channel = next(c for c in Channel if c is not search.channel)
    before = run.state.pending.model_copy(deep=True)
    assert run.result(SearchResult(**run.corr(search), channel=wrong_channel)) == []
    assert run.state.pending == before


def test_other_retries_start_over_without_the_carried_list() -> None:
    run = Run(max_attempts=3)
    run.to_critic()
    run.critic("retry", strategy="decompose", sub_queries=["Sostratus birthplace"])
    assert run.state.carried
    run.search_all()
    run.fuse()
    run.generate()
    sent = run.critic("retry", strategy="rewrite", rewritten_query="lighthouse builder")
    assert run.state.carried == []
    run.search_all()
    assert run.fuse()[0].follow_ups == []
    assert {m.query for m in sent if isinstance(m, SearchCommand)} == {"lighthouse builder"}


def test_a_state_saved_with_one_search_query_still_loads() -> None:
    run = Run()
    run.submit()
    saved = run.state.model_dump(mode="json")
    saved["search_query"] = saved.pop("search_queries")[0]
    assert RequestState.model_validate(saved).search_queries == ["who built the lighthouse"]


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


def test_a_cancelled_request_ends_cancelled_and_ignores_what_comes_after() -> None:
    run = Run()
    run.submit()
    run.classify()
    cancel = QueryCancelled(request_id="r1", reason="the user changed their mind")
    sent = run._take(run.saga.on_cancelled(run.state, cancel))
    assert kinds(sent) == ["ErrorEvent", "DoneEvent"]
    error, done = sent
    assert (error.data.code, error.data.message) == ("cancelled", "the user changed their mind")
    assert done.data.status is RequestStatus.CANCELLED
    assert run.state and run.state.status is RequestStatus.CANCELLED
    assert run.state.status.is_terminal and run.state.pending is None
    # the searches still on their way, a second cancel, and the deadline change nothing
    assert run.search_all() == []
    assert run.saga.on_cancelled(run.state, cancel).state is None
    assert run.tick(10_000) == []


def test_a_finished_request_is_not_cancelled() -> None:
    run = Run()
    run.to_critic()
    run.critic()
    cancelled = run.saga.on_cancelled(run.state, QueryCancelled(request_id="r1"))
    assert cancelled.state is None and cancelled.messages == []
    assert run.state and run.state.status is RequestStatus.COMPLETED
