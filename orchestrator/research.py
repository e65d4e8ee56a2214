"""Research mode: a parent request whose children are ordinary requests. Pure decisions, like
the rest of the saga (`orchestrator.saga` calls these).

submitted -> classifying -> searching -> fusing (a first retrieval, for the planner's bridges)
-> planning (`cmd.plan`) -> researching (one child request per sub-question, each with its own
id, stream and saga, `parent_id` set) -> completed, with a report whose sections are the
children's answers and whose sources are theirs, merged and numbered once.

Every child's end comes back as `query.child` (from the child's outbox, with its terminal
events); the parent reports it as a `research_step` and writes the report when the last one
is in. A child that fails, times out or is cancelled is reported and the report goes on
without it; children still running when the wait (`RAGBUS_RESEARCH_WAIT_S`) ends are
cancelled and reported the same way. Cancelling the parent cancels its running children.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from contracts import subjects as sj
from contracts.commands import PlanCommand
from contracts.enums import Phase, PhaseStatus, RequestStatus, Step
from contracts.events import AnswerData
from contracts.models import Citation, to_resolve
from contracts.queries import ChildFinished, QueryCancelled, QuerySubmitted
from orchestrator.state import ChildRecord, PendingStep, RequestState
from orchestrator.store import Outgoing, Transition

if TYPE_CHECKING:
    from orchestrator.saga import Clock, Saga

RESEARCH_STEP = "research"
"""The pending step of a parent waiting on its children (`command_ids`: child id -> child id)."""
PLANNED_CONTEXTS = 3
_MARK = re.compile(r"\[(\d+)\]")


def child_id(parent_id: str, index: int) -> str:
    """Stable per parent and sub-question: a re-decided plan names the same children."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"ragbus/research/{parent_id}/{index}").hex


def start_plan(saga: Saga, state: RequestState, clock: Clock) -> Transition:
    cmd = PlanCommand(
        **saga._corr(state),
        query=state.question,
        contexts=to_resolve(state.fused[:PLANNED_CONTEXTS]),
        max_questions=saga.settings.research_max_children,
    )
    state.status = RequestStatus.PLANNING
    state.pending = saga._pending(
        Step.PLAN, {Step.PLAN.value: cmd.event_id}, saga.settings.plan_timeout_s, clock
    )
    return saga._moved(state, [saga._cmd(cmd, Step.PLAN)])


def on_planned(
    saga: Saga,
    state: RequestState,
    questions: list[str],
    planner: str,
    clock: Clock,
    broad: list[bool] | None = None,
) -> Transition:
    """Spawn one child per sub-question (the question itself when the plan is empty). A
    sub-question with parts of its own is researched in turn while the depth allows
    (`RAGBUS_RESEARCH_MAX_DEPTH`); the question itself never is, so nothing recurses."""
    questions = (questions or [state.question])[: saga.settings.research_max_children]
    deeper = state.research_depth + 1 < saga.settings.research_max_depth
    broad = broad or []
    state.plan, state.planner = questions, planner
    state.children = [
        ChildRecord(request_id=child_id(state.request_id, n), query=q)
        for n, q in enumerate(questions)
    ]
    messages: list[Outgoing] = []
    for n, child in enumerate(state.children):
        research = deeper and n < len(broad) and broad[n] and child.query != state.question
        submitted = QuerySubmitted(
            request_id=child.request_id,
            tenant=state.tenant,
            query=child.query,
            namespaces=state.namespaces,
            top_k=state.top_k,
            mode="research" if research else "answer",
            parent_id=state.request_id,
            research_depth=state.research_depth + 1,
            trace=state.trace,
        )
        messages.append(Outgoing(sj.QUERY_SUBMITTED, sj.STREAM_QUERIES, submitted))
        messages.append(_step(saga, state, child, PhaseStatus.IN_PROGRESS, mode=submitted.mode))
    state.status = RequestStatus.RESEARCHING
    state.pending = PendingStep(
        step=RESEARCH_STEP,
        command_ids={c.request_id: c.request_id for c in state.children},
        deadline_at=min(clock.now + saga.settings.research_wait_s, state.deadline_at - 1.0),
    )
    return saga._moved(state, messages)


def on_child(saga: Saga, state: RequestState | None, msg: ChildFinished) -> Transition:
    """One child ended: report it; write the report when it was the last."""
    pending = state.pending if state is not None else None
    if state is None or state.status.is_terminal or pending is None:
        return Transition(None)
    if pending.step != RESEARCH_STEP or msg.child_id not in pending.command_ids:
        return Transition(None)  # a child already counted, or not this request's
    pending.command_ids.pop(msg.child_id)
    child = _child(state, msg.child_id)
    child.status, child.answer, child.error = msg.status, msg.answer, msg.error
    ok = msg.status == RequestStatus.COMPLETED.value
    step = _step(
        saga,
        state,
        child,
        PhaseStatus.COMPLETED if ok else PhaseStatus.FAILED,
        child_status=msg.status,
        reason=None if ok else (msg.error or msg.status),
    )
    if pending.command_ids:
        return saga._moved(state, [step])
    return synthesize(saga, state, [step])


def wait_over(saga: Saga, state: RequestState) -> Transition:
    """The wait ended: cancel the children still running, report them, write the report."""
    assert state.pending is not None
    messages: list[Outgoing] = []
    for cid in list(state.pending.command_ids):
        child = _child(state, cid)
        child.status = RequestStatus.TIMED_OUT.value
        child.error = f"no answer within {saga.settings.research_wait_s:g}s"
        messages.append(cancel_child(state, cid, "its research request stopped waiting"))
        messages.append(
            _step(
                saga,
                state,
                child,
                PhaseStatus.FAILED,
                child_status=child.status,
                reason=child.error,
            )
        )
    state.pending.command_ids.clear()
    return synthesize(saga, state, messages)


def _child(state: RequestState, cid: str) -> ChildRecord:
    return next(c for c in state.children if c.request_id == cid)


def _step(
    saga: Saga, state: RequestState, child: ChildRecord, status: PhaseStatus, **metadata: object
) -> Outgoing:
    """A `research_step` phase: one child's start or end, named by its id, place and question."""
    return saga._phase(
        state,
        Phase.RESEARCH_STEP,
        status,
        child_id=child.request_id,
        index=state.children.index(child),
        query=child.query,
        **metadata,
    )


def cancel_child(state: RequestState, cid: str, reason: str) -> Outgoing:
    cancel = QueryCancelled(request_id=cid, tenant=state.tenant, trace=state.trace, reason=reason)
    return Outgoing(sj.QUERY_CANCEL, sj.STREAM_QUERIES, cancel)


def cancel_running_children(state: RequestState) -> list[Outgoing]:
    """A cancelled parent's running children are cancelled too."""
    if state.pending is None or state.pending.step != RESEARCH_STEP:
        return []
    return [
        cancel_child(state, cid, "its research request was cancelled")
        for cid in state.pending.command_ids
    ]


def synthesize(saga: Saga, state: RequestState, messages: list[Outgoing]) -> Transition:
    answered = [c for c in state.children if c.status == RequestStatus.COMPLETED.value]
    report = saga._phase(
        state,
        Phase.RESEARCH_SYNTHESIS,
        PhaseStatus.COMPLETED,
        sections=len(answered),
        failed=len(state.children) - len(answered),
    )
    if not answered:
        failures = "; ".join(f"{c.query}: {c.error or c.status}" for c in state.children)
        transition = saga._finish_error(
            state,
            RequestStatus.FAILED,
            "research_failed",
            f"no sub-question was answered ({failures})"[:2000],
            Phase.RESEARCH_SYNTHESIS,
        )
        transition.messages[:0] = [*messages, report]
        return transition
    return saga._complete(state, [*messages, report])


def child_finished(state: RequestState) -> list[Outgoing]:
    """What a child's end tells its parent (nothing for a request without a parent)."""
    if state.parent_id is None:
        return []
    finished = ChildFinished(
        request_id=state.parent_id,
        tenant=state.tenant,
        trace=state.trace,
        child_id=state.request_id,
        status=state.status.value,
        answer=state.answer,
        error=state.error.message[:2000] if state.error else None,
    )
    return [Outgoing(sj.QUERY_CHILD, sj.STREAM_QUERIES, finished)]


def research_answer(state: RequestState, finished: datetime) -> AnswerData:
    """The report: a section per answered sub-question, its citations renumbered into one
    list where each source (chunk) has one number; then what could not be answered."""
    numbers: dict[str, int] = {}
    citations: dict[int, Citation] = {}
    sections: list[str] = []
    for child in state.children:
        if child.status != RequestStatus.COMPLETED.value or child.answer is None:
            continue
        own = child.answer.citations

        def renumber(match: re.Match[str], own: dict[int, Citation] = own) -> str:
            cited = own.get(int(match.group(1)))
            if cited is None:
                return ""
            if cited.chunk_id not in numbers:
                numbers[cited.chunk_id] = len(numbers) + 1
                citations[numbers[cited.chunk_id]] = cited
            return f"[{numbers[cited.chunk_id]}]"

        body = _MARK.sub(renumber, child.answer.content).strip()
        sections.append(f"## {child.query}\n\n{body}")
    missing = [c for c in state.children if c.status != RequestStatus.COMPLETED.value]
    if missing:
        lines = "\n".join(f"- {c.query}: {c.error or c.status}" for c in missing)
        sections.append(f"## Not answered\n\n{lines}")
    content = f"# {state.question}\n\n" + "\n\n".join(sections)
    metadata: dict[str, Any] = {
        "mode": "research",
        "children": [c.request_id for c in state.children],
        "plan": state.plan,
        "planner": state.planner,
        "failed_children": [
            {"request_id": c.request_id, "query": c.query, "status": c.status, "error": c.error}
            for c in missing
        ],
        "standalone_query": state.question,
        "session_id": state.session_id,
        "latency_ms": round((finished - state.created_at).total_seconds() * 1000, 2),
        "trace_id": state.trace.trace_id,
    }
    return AnswerData(content=content, citations=citations, metadata=metadata)
