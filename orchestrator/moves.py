"""A decision's building blocks, below every phase of the saga: the clock it decides at, the
step it then waits on (`pending`), the commands and events it sends, and the move itself
(`moved`). Pure, like the decisions (`orchestrator.saga`): they build what the service commits
and publishes, and act on nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from contracts import subjects as sj
from contracts.enums import Channel, Phase, PhaseStatus, Step
from contracts.envelope import Envelope, utcnow
from contracts.events import PhaseData, PhaseEvent
from contracts.models import contexts_claim, to_resolve
from infra.settings import Settings
from orchestrator.state import PendingStep, RequestState
from orchestrator.transition import Outgoing, Transition


@dataclass(frozen=True)
class Clock:
    now: float

    @classmethod
    def system(cls) -> Clock:
        return cls(time.time())


def has_memory(settings: Settings, state: RequestState) -> bool:
    """Whether the request has a memory scope: its session's, or its tenant's."""
    return state.session_id is not None or settings.memory_scope == "tenant"


def scoped(state: RequestState) -> bool:
    """Whether the request draws on only some documents: a metadata filter, or a user's
    access (`contracts.access`)."""
    return state.filter is not None or state.reader is not None


def vector_of(state: RequestState, text: str) -> str | None:
    """The request's embedding of a query text: classify's for the question, a dense
    channel's for a follow-up."""
    if text == state.question and state.query_vector:
        return state.query_vector
    return state.query_vectors.get(text)


def contexts(state: RequestState) -> dict[str, Any]:
    """The fused list for a command to a step that resolves its claims (generate,
    critic): the claim fusion made of it while the list is still the one it claimed,
    else the list itself (`to_resolve`). The state keeps the openings and the channels'
    ranks, for citations and the fallback answer."""
    ids = (chunk.chunk_id for chunk in state.fused)
    if state.fused_claim is not None and state.fused_claim == contexts_claim(ids):
        return {"contexts_claim": state.fused_claim}
    return {"contexts": to_resolve(state.fused)}


def corr(state: RequestState) -> dict[str, object]:
    """What every command and event of the request carries: whose, which attempt, the trace."""
    return {
        "request_id": state.request_id,
        "tenant": state.tenant,
        "attempt": state.attempt,
        "trace": state.trace,
    }


def pending(step: Step, awaited: dict[str, str], timeout: float, clock: Clock) -> PendingStep:
    """The step the request now waits on: the commands it awaits, and until when."""
    return PendingStep(step=step.value, command_ids=awaited, deadline_at=clock.now + timeout)


def moved(state: RequestState, messages: list[Outgoing]) -> Transition:
    """The transition to commit: the changed state, and what to send once it is committed."""
    state.updated_at = utcnow()
    return Transition(state, messages)


def command(cmd: Envelope, step: Step, channel: Channel | None = None) -> Outgoing:
    return Outgoing(sj.cmd_subject(step, channel), sj.STREAM_CMD, cmd)


def event(message: Envelope) -> Outgoing:
    return Outgoing(
        sj.events_subject(message.tenant, message.request_id), sj.STREAM_EVENTS, message
    )


def phase(state: RequestState, name: Phase, status: PhaseStatus, /, **metadata: object) -> Outgoing:
    """A phase event of the request: one that started and ended now, or (in progress) a
    research child that ends later."""
    now = utcnow()
    running = status is PhaseStatus.IN_PROGRESS  # a research child: it ends later
    message = PhaseEvent(
        **corr(state),
        occurred_at=now,  # a finished phase's end (`PhaseData.ended_at`)
        data=PhaseData(
            phase=name,
            status=status,
            started_at=now,
            duration_ms=None if running else 0.0,
            metadata=dict(metadata),
        ),
    )
    return event(message)
