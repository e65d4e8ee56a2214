"""The saga with `RAGBUS_FUSE_WITH_SEARCH` on (the default): an attempt whose channels are all
in one search command asks that command's worker to fuse, and its fused list moves the
request straight on to generation; anything else keeps the fuse step."""

from __future__ import annotations

from contracts.commands import FuseCommand, GenerateCommand, SearchCommand
from contracts.enums import Channel, Intent, RequestStatus
from contracts.results import ChannelOutcome, Fused, SearchResult
from orchestrator.handoffs import StartSearch
from orchestrator.saga import Clock
from tests.unit.saga_support import CHUNK, FACTUAL, Run


def searches(run: Run) -> list[SearchCommand]:
    return [m for m in run.sent if isinstance(m, SearchCommand)]


def fused_result(run: Run, cmd: SearchCommand) -> SearchResult:
    return SearchResult(
        **run.corr(cmd),
        channel=cmd.channel,
        count=3,
        also=[ChannelOutcome(channel=c, count=2) for c in cmd.also],
        fused=Fused(
            chunks=[CHUNK.model_copy(update={"claimed": True})],
            effective_weights={Channel.VECTOR: 0.5, Channel.SPARSE: 0.5},
            channel_counts={Channel.VECTOR: 3, Channel.SPARSE: 2},
        ),
    )


def test_the_only_search_command_of_an_attempt_asks_for_fusion() -> None:
    run = Run(search_batch=True, rrf_k=30, fusion="rrf")
    run.submit()
    run.classify()
    [cmd] = searches(run)
    assert cmd.fuse is not None and run.state is not None
    assert cmd.fuse.weights == FACTUAL
    assert (cmd.fuse.top_k, cmd.fuse.rrf_k, cmd.fuse.fusion) == (run.state.top_k, 30, "rrf")
    assert cmd.fuse.question is None, "the searched query is the question"


def test_a_fused_search_result_goes_straight_to_generation() -> None:
    run = Run(search_batch=True)
    run.submit()
    run.classify()
    [cmd] = searches(run)
    sent = run.result(fused_result(run, cmd))
    assert not any(isinstance(m, FuseCommand) for m in run.sent)
    [generate] = [m for m in sent if isinstance(m, GenerateCommand)]
    assert [c.chunk_id for c in generate.contexts] == [CHUNK.chunk_id]
    state = run.state
    assert state is not None and state.status is RequestStatus.GENERATING
    assert [c.chunk_id for c in state.fused] == [CHUNK.chunk_id]
    assert state.channel_counts == {Channel.VECTOR: 3, Channel.SPARSE: 2}
    assert state.channel_reports[Channel.VECTOR].count == 3
    assert state.channel_reports[Channel.SPARSE].count == 2
    assert state.channel_results == {} and state.claimed_results == {}


def test_a_search_result_without_the_fused_list_falls_back_to_the_fuse_step() -> None:
    run = Run(search_batch=True)
    run.submit()
    run.classify()
    [cmd] = searches(run)
    claim = f"ranking:{cmd.event_id}"
    sent = run.result(
        SearchResult(
            **run.corr(cmd),
            channel=cmd.channel,
            ranking_claim=claim,
            count=3,
            also=[ChannelOutcome(channel=c, ranking_claim=f"{claim}:{c}") for c in cmd.also],
        )
    )
    fuse = sent[-1]
    assert isinstance(fuse, FuseCommand)
    assert fuse.claimed_results[Channel.VECTOR.value] == claim


def test_a_single_channel_intent_fuses_in_its_one_command() -> None:
    run = Run(search_batch=True)
    run.submit()
    run.classify(weights={Channel.VECTOR: 1.0, Channel.SPARSE: 0.0})
    [cmd] = searches(run)
    assert cmd.channels == [Channel.VECTOR] and cmd.fuse is not None


def test_no_fusion_in_search_where_the_attempt_has_more_than_one_command() -> None:
    per_channel = Run(search_batch=False)  # a command per channel
    per_channel.submit()
    per_channel.classify()
    assert len(searches(per_channel)) > 1
    assert all(cmd.fuse is None for cmd in searches(per_channel))

    in_session = Run(search_batch=True)  # memory is its own command, to the memory worker
    in_session.submit(session_id="chat-1")
    in_session.classify(weights={**FACTUAL, Channel.MEMORY: 0.2})
    assert Channel.MEMORY in {cmd.channel for cmd in searches(in_session)}
    assert all(cmd.fuse is None for cmd in searches(in_session))


def test_no_fusion_in_search_for_a_retrieval_answer_or_when_switched_off() -> None:
    retrieve = Run(search_batch=True)
    retrieve.submit(mode="retrieve")  # it shows the channels' own rankings
    retrieve.classify()
    assert [cmd.fuse for cmd in searches(retrieve)] == [None]

    off = Run(search_batch=True, fuse_with_search=False)
    off.submit()
    off.classify()
    assert [cmd.fuse for cmd in searches(off)] == [None]


def test_a_rewritten_search_names_the_question_for_the_reranker() -> None:
    run = Run(search_batch=True)
    run.submit(query="and who paid for it?")
    run.classify(intent=Intent.FACTUAL)
    state = run.state
    assert state is not None
    state.search_queries = ["who paid for the lighthouse"]  # as a `rewrite` retry leaves it
    transition = run.saga.follow(state, StartSearch(), Clock(run.now))
    [cmd] = [m.message for m in transition.messages if isinstance(m.message, SearchCommand)]
    assert cmd.fuse is not None and cmd.fuse.question == "and who paid for it?"
