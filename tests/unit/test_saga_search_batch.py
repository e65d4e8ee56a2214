"""The saga with `RAGBUS_SEARCH_BATCH` on (the default): one search command per query for its
document channels, one result answering for each, memory on its own."""

from __future__ import annotations

from contracts.commands import FuseCommand, SearchCommand
from contracts.enums import Channel, RequestStatus
from contracts.events import PhaseEvent
from contracts.models import ErrorInfo, RetrievedChunk
from contracts.results import ChannelOutcome, SearchResult, StepFailure
from tests.unit.saga_support import CHUNK, FACTUAL, Run

OTHER = RetrievedChunk(chunk_id="c2", document_id="d2", text="Ptolemy paid for it.")


def batched() -> Run:
    return Run(search_batch=True)


def searches(run: Run) -> list[SearchCommand]:
    return [m for m in run.sent if isinstance(m, SearchCommand)]


def test_one_command_searches_every_document_channel_of_the_query() -> None:
    run = batched()
    run.submit()
    sent = run.classify()
    [cmd] = searches(run)
    live = [c for c, w in FACTUAL.items() if w > 0]
    assert cmd.channels == live  # its own channel first, then the others, in channel order
    assert [m for m in sent if isinstance(m, SearchCommand)] == [cmd]
    assert set(run.state.pending.command_ids) == {c.value for c in live}
    assert set(run.state.pending.command_ids.values()) == {cmd.event_id}


def test_one_result_answers_for_every_channel_and_fusion_follows() -> None:
    run = batched()
    run.submit()
    run.classify()
    [cmd] = searches(run)
    sent = run.result(
        SearchResult(
            **run.corr(cmd),
            channel=cmd.channel,
            ranking_claim=f"ranking:{cmd.event_id}",
            count=4,
            also=[
                ChannelOutcome(channel=c, ranking_claim=f"ranking:{cmd.event_id}:{c}", count=3)
                for c in cmd.also
            ],
        )
    )
    fuse = sent[-1]
    assert isinstance(fuse, FuseCommand)
    assert fuse.claimed_results == {
        Channel.VECTOR.value: f"ranking:{cmd.event_id}",
        **{c.value: f"ranking:{cmd.event_id}:{c}" for c in cmd.also},
    }
    reports = run.state.channel_reports
    assert reports[Channel.VECTOR].count == 4
    assert all(reports[c].status == "completed" and reports[c].count == 3 for c in cmd.also)


def test_a_channel_that_failed_inside_the_command_is_reported_and_left_out() -> None:
    run = batched()
    run.submit()
    run.classify()
    [cmd] = searches(run)
    failed = cmd.also[-1]
    run.result(
        SearchResult(
            **run.corr(cmd),
            channel=cmd.channel,
            chunks=[CHUNK],
            also=[
                ChannelOutcome(channel=c, chunks=[OTHER])
                if c is not failed
                else ChannelOutcome(
                    channel=c,
                    status="failed",
                    error=ErrorInfo(code="channel_failed", message="graph away"),
                )
                for c in cmd.also
            ],
        )
    )
    fuse = run.last(FuseCommand)
    assert set(fuse.results) == set(cmd.channels) - {failed}
    assert fuse.results[Channel.VECTOR] == [CHUNK]
    report = run.state.channel_reports[failed]
    assert report.status == "failed" and report.reason == "graph away"


def test_the_own_channel_failing_leaves_the_others_answered() -> None:
    run = batched()
    run.submit()
    run.classify()
    [cmd] = searches(run)
    run.result(
        SearchResult(
            **run.corr(cmd),
            channel=cmd.channel,
            status="failed",
            error=ErrorInfo(code="channel_failed", message="vectors away"),
            also=[ChannelOutcome(channel=c, chunks=[OTHER]) for c in cmd.also],
        )
    )
    fuse = run.last(FuseCommand)
    assert set(fuse.results) == set(cmd.also)
    assert run.state.channel_reports[Channel.VECTOR].status == "failed"


def test_a_command_that_failed_whole_fails_each_channel_it_searched() -> None:
    run = batched()
    run.submit()
    run.classify()
    [cmd] = searches(run)
    sent = run.result(
        StepFailure(
            **run.corr(cmd),
            step="search",
            channel=cmd.channel,
            error=ErrorInfo(code="step_failed", message="poison"),
        )
    )
    assert isinstance(sent[-1], FuseCommand) and sent[-1].results == {}
    assert all(run.state.channel_reports[c].status == "failed" for c in cmd.channels)


def test_a_silent_command_times_out_every_channel_it_searched() -> None:
    # the command fuses as well (`RAGBUS_FUSE_WITH_SEARCH`): its deadline has both steps' time
    run = Run(search_batch=True, search_timeout_s=5, fuse_timeout_s=3)
    run.submit()
    run.classify()
    [cmd] = searches(run)
    assert cmd.fuse is not None
    assert run.tick(7.5) == [], "not before the search and fusion deadlines together"
    sent = run.tick(1)
    dropped = {m.data.phase.value for m in sent if isinstance(m, PhaseEvent)}
    assert dropped == {f"{c.value}_search" for c in cmd.channels}
    assert isinstance(sent[-1], FuseCommand)
    assert all(run.state.channel_reports[c].status == "timed_out" for c in cmd.channels)


def test_a_channel_the_command_was_not_asked_for_changes_nothing() -> None:
    run = batched()
    run.submit()
    run.classify()
    [cmd] = searches(run)
    run.result(
        SearchResult(
            **run.corr(cmd),
            channel=cmd.channel,
            chunks=[CHUNK],
            also=[ChannelOutcome(channel=Channel.GRAPH_GLOBAL, chunks=[OTHER])],  # weight 0
        )
    )
    assert run.state.status is RequestStatus.SEARCHING  # the asked-for others still awaited
    assert Channel.GRAPH_GLOBAL not in run.state.channel_results
    assert set(run.state.pending.command_ids) == {c.value for c in cmd.also}


def test_memory_searches_on_its_own_beside_the_document_command() -> None:
    run = batched()
    run.submit(session_id="s-1")
    run.classify(weights={**FACTUAL, Channel.MEMORY: 0.2})
    cmds = searches(run)
    memory = [c for c in cmds if c.channel is Channel.MEMORY]
    documents = [c for c in cmds if c.channel is not Channel.MEMORY]
    assert len(memory) == 1 and memory[0].also == []
    assert len(documents) == 1 and Channel.MEMORY not in documents[0].channels
    run.search_all()
    assert isinstance(run.last(FuseCommand), FuseCommand)


def test_follow_up_queries_get_a_command_each() -> None:
    run = Run(search_batch=True, max_attempts=2)
    run.to_critic()
    follow_ups = ["Sostratus of Cnidus birthplace", "Ptolemy II reign"]
    sent = run.critic("retry", strategy="decompose", sub_queries=follow_ups, confidence=0.3)
    cmds = [m for m in sent if isinstance(m, SearchCommand)]
    assert sorted(c.query for c in cmds) == sorted(follow_ups)
    assert all(len(c.channels) > 1 for c in cmds)
    run.search_all()
    fuse = run.last(FuseCommand)
    assert fuse.attempt == 2 and len(fuse.sub_results) == 1
