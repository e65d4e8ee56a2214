"""What every saga decision shares: how a request ends (answer, passages, error, each with its
session turn and its research parent told), and the helpers that build commands, events and
deadlines. Pure, like the decisions (`orchestrator.saga`, `orchestrator.research`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from contracts import subjects as sj
from contracts.enums import (
    Channel,
    Phase,
    PhaseStatus,
    RequestStatus,
    Step,
)
from contracts.envelope import Envelope, utcnow
from contracts.events import (
    AnswerEvent,
    DoneEvent,
    ErrorData,
    ErrorEvent,
    PhaseData,
    PhaseEvent,
)
from contracts.models import contexts_claim, to_resolve
from infra.settings import Settings
from orchestrator import research
from orchestrator.answer import build_answer, passages_draft
from orchestrator.state import PendingStep, RequestState
from orchestrator.store import Outgoing, Transition
from orchestrator.turns import remember_turn


@dataclass(frozen=True)
class Clock:
    now: float

    @classmethod
    def system(cls) -> Clock:
        return cls(time.time())


class SagaBase:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # ----------------------------------------------------------------- endings
    def _complete(
        self, state: RequestState, messages: list[Outgoing], critic_note: str | None = None
    ) -> Transition:
        finished = utcnow()
        if state.mode == "research":
            state.answer = research.research_answer(state, finished)
        else:
            state.answer = build_answer(state, finished, critic_note)
        state.status = RequestStatus.COMPLETED
        state.pending = None
        state.finished_at = finished
        answer = AnswerEvent(**self._corr(state), data=state.answer)
        ending = [
            *messages,
            self._event(DoneEvent.ending_with(answer, RequestStatus.COMPLETED)),
            *self._remember(state),
            *research.child_finished(state),
        ]
        return self._moved(state, ending)

    def _passages_answer(self, state: RequestState, reason: str) -> Transition:
        """When generation fails but retrieval worked, the answer is the best passages,
        quoted and cited, and says so: a degraded answer rather than none."""
        drafted = passages_draft(state.fused)
        if drafted is None:
            return self._finish_error(
                state, RequestStatus.FAILED, "generate_failed", reason, Phase.GENERATION
            )
        state.draft, state.draft_citations = drafted
        state.generator = "passages"
        failed = self._phase(
            state, Phase.GENERATION, PhaseStatus.FAILED, reason=reason, fallback="passages"
        )
        return self._complete(state, [failed], critic_note=f"not critiqued: {reason}")

    def _finish_error(
        self,
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
        error = ErrorEvent(**self._corr(state), data=state.error)
        ending = [
            self._event(DoneEvent.ending_with(error, status)),
            *self._remember(state),
            *research.child_finished(state),
        ]
        return self._moved(state, ending)

    # ----------------------------------------------------------------- helpers
    def _has_memory(self, state: RequestState) -> bool:
        """Whether the request has a memory scope: its session's, or its tenant's."""
        return state.session_id is not None or self.settings.memory_scope == "tenant"

    @staticmethod
    def _remember(state: RequestState) -> list[Outgoing]:
        """A session's turn, recorded by the memory worker once the request has ended."""
        turn = remember_turn(state)
        if turn is None:
            return []
        return [Outgoing(sj.cmd_subject(Step.MEMORY), sj.STREAM_CMD, turn)]

    @staticmethod
    def _vector_of(state: RequestState, text: str) -> str | None:
        """The request's embedding of a query text: classify's for the question, a dense
        channel's for a follow-up."""
        if text == state.question and state.query_vector:
            return state.query_vector
        return state.query_vectors.get(text)

    @staticmethod
    def _contexts(state: RequestState) -> dict[str, Any]:
        """The fused list for a command to a step that resolves its claims (generate,
        critic): the claim fusion made of it while the list is still the one it claimed,
        else the list itself (`to_resolve`). The state keeps the openings and the channels'
        ranks, for citations and the fallback answer."""
        ids = (chunk.chunk_id for chunk in state.fused)
        if state.fused_claim is not None and state.fused_claim == contexts_claim(ids):
            return {"contexts_claim": state.fused_claim}
        return {"contexts": to_resolve(state.fused)}

    @staticmethod
    def _corr(state: RequestState) -> dict[str, object]:
        return {
            "request_id": state.request_id,
            "tenant": state.tenant,
            "attempt": state.attempt,
            "trace": state.trace,
        }

    @staticmethod
    def _pending(step: Step, awaited: dict[str, str], timeout: float, clock: Clock) -> PendingStep:
        return PendingStep(step=step.value, command_ids=awaited, deadline_at=clock.now + timeout)

    @staticmethod
    def _moved(state: RequestState, messages: list[Outgoing]) -> Transition:
        state.updated_at = utcnow()
        return Transition(state, messages)

    @staticmethod
    def _cmd(cmd: Envelope, step: Step, channel: Channel | None = None) -> Outgoing:
        return Outgoing(sj.cmd_subject(step, channel), sj.STREAM_CMD, cmd)

    @staticmethod
    def _event(event: Envelope) -> Outgoing:
        return Outgoing(sj.events_subject(event.tenant, event.request_id), sj.STREAM_EVENTS, event)

    def _phase(
        self, state: RequestState, phase: Phase, status: PhaseStatus, **metadata: object
    ) -> Outgoing:
        now = utcnow()
        running = status is PhaseStatus.IN_PROGRESS  # a research child: it ends later
        event = PhaseEvent(
            **self._corr(state),
            occurred_at=now,  # a finished phase's end (`PhaseData.ended_at`)
            data=PhaseData(
                phase=phase,
                status=status,
                started_at=now,
                duration_ms=None if running else 0.0,
                metadata=dict(metadata),
            ),
        )
        return self._event(event)
