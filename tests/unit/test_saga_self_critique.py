"""A generation that judged its own answer (`GenerateCommand.critique_attempts_left`,
`RAGBUS_CRITIQUE_WITH_GENERATION`): the saga takes the verdict with the answer and sends no
critic command; without a verdict, the critic step judges as before."""

from __future__ import annotations

from contracts.commands import CriticCommand, GenerateCommand, SearchCommand
from contracts.enums import RequestStatus
from contracts.events import PhaseEvent
from contracts.results import Critique
from tests.unit.saga_support import Run, kinds


def to_generation(run: Run) -> GenerateCommand:
    run.submit()
    run.classify()
    run.search_all()
    run.fuse()
    cmd: GenerateCommand = run.last(GenerateCommand)
    return cmd


def test_generation_is_asked_to_judge_its_answer_within_both_deadlines() -> None:
    run = Run(max_attempts=2)
    cmd = to_generation(run)
    assert cmd.critique_attempts_left == 1
    assert run.state is not None and run.state.pending is not None
    settings = run.settings
    both = settings.generate_timeout_s + settings.critic_timeout_s
    assert run.state.pending.deadline_at == run.now + both


def test_a_verdict_with_the_answer_completes_without_a_critic_command() -> None:
    run = Run()
    to_generation(run)
    sent = run.generate(critique=Critique(verdict="accept", confidence=0.9, reasons=["ok"]))
    assert kinds(sent) == ["AnswerEvent", "DoneEvent"]
    assert not any(isinstance(m, CriticCommand) for m in run.sent)
    assert run.state is not None and run.state.status is RequestStatus.COMPLETED
    [attempt] = run.state.attempts
    assert (attempt.verdict, attempt.confidence) == ("accept", 0.9)


def test_a_retry_verdict_with_the_answer_starts_the_next_attempt() -> None:
    run = Run(max_attempts=2)
    to_generation(run)
    sent = run.generate(
        critique=Critique(verdict="retry", confidence=0.2, strategy="broaden", reasons=["weak"])
    )
    retry = next(m for m in sent if isinstance(m, PhaseEvent))
    assert retry.data.phase.value == "retry"
    assert run.state is not None and run.state.attempt == 2
    assert all(m.attempt == 2 for m in sent if isinstance(m, SearchCommand))
    run.search_all()
    run.fuse()
    assert run.last(GenerateCommand).critique_attempts_left == 0


def test_an_answer_without_a_verdict_goes_to_the_critic() -> None:
    run = Run()
    to_generation(run)
    assert kinds(run.generate()) == ["CriticCommand"]


def test_with_the_setting_off_the_critic_is_a_step_of_its_own() -> None:
    run = Run(critique_with_generation=False)
    cmd = to_generation(run)
    assert cmd.critique_attempts_left is None
    assert run.state is not None and run.state.pending is not None
    assert run.state.pending.deadline_at == run.now + run.settings.generate_timeout_s
    assert kinds(run.generate()) == ["CriticCommand"]


def test_when_both_deadlines_would_outlast_the_request_the_critic_judges_alone() -> None:
    run = Run(request_timeout_s=60, generate_timeout_s=55, critic_timeout_s=10)
    cmd = to_generation(run)
    assert cmd.critique_attempts_left is None
    assert run.state is not None and run.state.pending is not None
    assert run.state.pending.deadline_at == run.now + 55
