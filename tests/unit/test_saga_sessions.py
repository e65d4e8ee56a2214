"""The saga with a session: the question made standalone is what every later step works on,
the memory channel is searched in the session's scope, and the request's end sends its turn
to the memory worker through the outbox, whatever the ending."""

from __future__ import annotations

from contracts import subjects as sj
from contracts.commands import (
    ClassifyCommand,
    CriticCommand,
    FuseCommand,
    GenerateCommand,
    SearchCommand,
)
from contracts.enums import Channel, Intent, Step
from contracts.results import ClassifyResult
from contracts.sessions import RememberTurn
from infra.retrieval.intent_profiles import PROFILES
from orchestrator import endings
from tests.unit.saga_support import Run

FACTUAL = dict(PROFILES[Intent.FACTUAL])

FOLLOW_UP = "who built it"
STANDALONE = "who built the Lighthouse of Alexandria"


def classify_as_standalone(run: Run) -> list[object]:
    cmd = run.last(ClassifyCommand)
    return run.result(
        ClassifyResult(
            **run.corr(cmd),
            intent=Intent.FACTUAL,
            confidence=0.9,
            method="zero_shot",
            weights=FACTUAL,
            standalone_query=STANDALONE,
            rewrite_method="rules",
        )
    )


def test_a_follow_up_is_searched_generated_and_judged_as_its_standalone_question() -> None:
    run = Run()
    run.submit(query=FOLLOW_UP, session_id="chat-1")
    classify = run.last(ClassifyCommand)
    assert (classify.query, classify.session_id) == (FOLLOW_UP, "chat-1")
    assert classify.submitted_at == run.state.created_at.timestamp()

    sent = classify_as_standalone(run)
    searches = [m for m in sent if isinstance(m, SearchCommand)]
    assert {s.query for s in searches} == {STANDALONE}
    assert Channel.MEMORY in {s.channel for s in searches}
    assert all(s.session_id == "chat-1" for s in searches)

    run.search_all()
    assert run.last(FuseCommand).query == STANDALONE
    run.fuse()
    assert run.last(GenerateCommand).query == STANDALONE
    run.generate()
    assert run.last(CriticCommand).query == STANDALONE
    sent = run.critic()
    answer = sent[0].data
    assert answer.metadata["standalone_query"] == STANDALONE
    assert answer.metadata["rewrite_method"] == "rules"
    assert run.state.query == FOLLOW_UP  # the question as asked is kept

    remember = sent[-1]
    assert isinstance(remember, RememberTurn)
    assert remember.session_id == "chat-1" and remember.accepted
    assert (remember.turn.query, remember.turn.standalone_query) == (FOLLOW_UP, STANDALONE)
    assert remember.turn.answer == "Sostratus built it [1]."
    assert remember.turn.citations[0].n == 1
    outgoing = endings.remember(run.state)[0]
    assert (outgoing.subject, outgoing.stream) == (sj.cmd_subject(Step.MEMORY), sj.STREAM_CMD)


def test_without_a_session_memory_is_skipped_and_nothing_is_remembered() -> None:
    run = Run()
    run.to_critic()
    assert Channel.MEMORY not in {m.channel for m in run.sent if isinstance(m, SearchCommand)}
    assert run.state.channel_reports[Channel.MEMORY].reason == "no session"
    assert not any(isinstance(m, RememberTurn) for m in run.critic())


def test_with_tenant_scoped_memory_a_request_without_session_searches_memory() -> None:
    run = Run(memory_scope="tenant")
    run.submit()
    sent = run.classify(weights=FACTUAL)
    assert Channel.MEMORY in {m.channel for m in sent if isinstance(m, SearchCommand)}


def test_a_failed_or_cancelled_request_of_a_session_still_records_its_turn() -> None:
    run = Run()
    run.submit(session_id="chat-1")
    sent = run.tick(10_000)  # the whole request's deadline
    remember = sent[-1]
    assert isinstance(remember, RememberTurn)
    assert (remember.turn.status, remember.turn.answer, remember.accepted) == (
        "timed_out",
        None,
        False,
    )
    assert remember.turn.finished_at is not None
