"""How a request ends, below the phases that end it: completed with its answer (`complete`),
with the best passages when generation failed (`passages_answer`), or with an error
(`finish_error`); each with its session's turn remembered (`remember`) and its research parent
told (`orchestrator.lineage.child_finished`). Pure, like the decisions (`orchestrator.saga`).
"""

from __future__ import annotations

from contracts import subjects as sj
from contracts.enums import Phase, PhaseStatus, RequestStatus, Step
from contracts.envelope import utcnow
from contracts.events import AnswerEvent, DoneEvent, ErrorData, ErrorEvent
from orchestrator import lineage, moves
from orchestrator.answer import build_answer, passages_draft
from orchestrator.state import RequestState
from orchestrator.transition import Outgoing, Transition
from orchestrator.turns import remember_turn


def complete(
    state: RequestState, messages: list[Outgoing], critic_note: str | None = None
) -> Transition:
    finished = utcnow()
    if state.mode == "research":
        state.answer = lineage.research_answer(state, finished)
    else:
        state.answer = build_answer(state, finished, critic_note)
    state.status = RequestStatus.COMPLETED
    state.pending = None
    state.finished_at = finished
    answer = AnswerEvent(**moves.corr(state), data=state.answer)
    ending = [
        *messages,
        moves.event(DoneEvent.ending_with(answer, RequestStatus.COMPLETED)),
        *remember(state),
        *lineage.child_finished(state),
    ]
    return moves.moved(state, ending)


def passages_answer(state: RequestState, reason: str) -> Transition:
    """When generation fails but retrieval worked, the answer is the best passages,
    quoted and cited, and says so: a degraded answer rather than none."""
    drafted = passages_draft(state.fused)
    if drafted is None:
        return finish_error(
            state, RequestStatus.FAILED, "generate_failed", reason, Phase.GENERATION
        )
    state.draft, state.draft_citations = drafted
    state.generator = "passages"
    failed = moves.phase(
        state, Phase.GENERATION, PhaseStatus.FAILED, reason=reason, fallback="passages"
    )
    return complete(state, [failed], critic_note=f"not critiqued: {reason}")


def finish_error(
    state: RequestState,
    status: RequestStatus,
    code: str,
    message: str,
    phase: Phase | None,
) -> Transition:
    state.error = ErrorData(code=code, message=message, phase=phase)
    state.status = status
    state.pending = None
    state.finished_at = utcnow()
    error = ErrorEvent(**moves.corr(state), data=state.error)
    ending = [
        moves.event(DoneEvent.ending_with(error, status)),
        *remember(state),
        *lineage.child_finished(state),
    ]
    return moves.moved(state, ending)


def remember(state: RequestState) -> list[Outgoing]:
    """A session's turn, recorded by the memory worker once the request has ended."""
    turn = remember_turn(state)
    if turn is None:
        return []
    return [Outgoing(sj.cmd_subject(Step.MEMORY), sj.STREAM_CMD, turn)]
