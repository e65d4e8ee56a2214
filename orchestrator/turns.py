"""What a session's finished request leaves behind: its turn, for the memory worker.

Pure, like the saga it serves: the turn is built from the request's final state and sent
through the outbox with the request's terminal events, so it is recorded exactly when the
request ends, whichever process dies around the commit.
"""

from __future__ import annotations

from contracts.enums import RequestStatus
from contracts.limits import MAX_PAGE_LABEL_CHARS
from contracts.sessions import (
    MAX_TURN_ANSWER_CHARS,
    MAX_TURN_CITATIONS,
    RememberTurn,
    SessionTurn,
    TurnCitation,
)
from orchestrator.state import RequestState


def finished_turn(state: RequestState) -> SessionTurn:
    answer = state.answer
    citations = (
        [
            TurnCitation(
                n=n,
                title=c.title[:500],
                document_id=c.document_id[:512],
                source=c.source[:1000],
                page=c.page,
                page_label=c.page_label[:MAX_PAGE_LABEL_CHARS],
                section=c.section[:500],
                kind=c.kind,
            )
            for n, c in sorted(answer.citations.items())
        ][:MAX_TURN_CITATIONS]
        if answer
        else []
    )
    return SessionTurn(
        request_id=state.request_id,
        query=state.query,
        standalone_query=state.question,
        rewrite_method=_method(state.rewrite_method),
        answer=answer.content[:MAX_TURN_ANSWER_CHARS] if answer else None,
        status=state.status.value,
        citations=citations,
        submitted_at=state.created_at.timestamp(),
        finished_at=state.finished_at.timestamp() if state.finished_at else None,
    )


def remember_turn(state: RequestState) -> RememberTurn | None:
    """The command that records a finished request's turn; None outside a session."""
    if state.session_id is None:
        return None
    answer = state.answer
    accepted = (
        state.status is RequestStatus.COMPLETED
        and state.mode == "answer"
        and answer is not None
        and not answer.metadata.get("low_confidence")
        and state.generator != "passages"
    )
    return RememberTurn(
        request_id=state.request_id,
        tenant=state.tenant,
        attempt=state.attempt,
        trace=state.trace,
        session_id=state.session_id,
        reader=state.reader,
        turn=finished_turn(state),
        accepted=accepted,
    )


def _method(method: str | None) -> str | None:
    return method if method in ("none", "rules", "llm") else None
