"""The saga's search fan-out and fan-in, without a broker or Redis: failed and silent channels,
claimed rankings, and a decomposed retry's follow-up searches fused onto the first attempt."""

from __future__ import annotations

from contracts.commands import (
    FuseCommand,
    SearchCommand,
)
from contracts.enums import Channel, RequestStatus
from contracts.events import PhaseEvent
from contracts.models import ErrorInfo, RetrievedChunk
from contracts.results import (
    FuseResult,
    SearchResult,
    StepFailure,
)
from tests.unit.saga_support import CHUNK, FACTUAL, Run


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
