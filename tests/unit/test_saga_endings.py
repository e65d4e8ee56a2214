"""The saga's endings other than an accepted answer, without a broker or Redis: failed steps,
missed deadlines and cancellation, each with one terminal event."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.commands import (
    FuseCommand,
    GenerateCommand,
)
from contracts.enums import Channel, RequestStatus
from contracts.events import AnswerEvent, DoneEvent, ErrorEvent
from contracts.models import ErrorInfo
from contracts.queries import QueryCancelled
from contracts.results import (
    FuseResult,
    StepFailure,
)
from tests.unit.saga_support import CHUNK, Run, kinds


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
    # the generation's deadline covers the critique it makes of its own answer
    silent = 20 + run.settings.critic_timeout_s + 1
    sent = run.result(_failure(run, cmd, "generate")) if how == "failure" else run.tick(silent)
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
    run = Run(
        request_timeout_s=30,
        classify_timeout_s=29,
        generate_timeout_s=20,
        critic_timeout_s=5,
        tool_timeout_s=20,
    )
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
