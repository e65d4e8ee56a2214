"""Research mode: a parent request whose children are ordinary requests. Pure decisions, like
the rest of the saga (`orchestrator.saga` runs them; what a child's end tells its parent, the
cancelling of children and the report are `orchestrator.lineage`, which every ending uses).

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

import uuid

from contracts import subjects as sj
from contracts.commands import PlanCommand
from contracts.enums import Phase, PhaseStatus, RequestStatus, Step
from contracts.models import to_resolve
from contracts.queries import ChildFinished, QuerySubmitted
from infra.settings import Settings
from orchestrator import endings, moves
from orchestrator.lineage import RESEARCH_STEP, cancel_child
from orchestrator.moves import Clock
from orchestrator.state import ChildRecord, PendingStep, RequestState
from orchestrator.transition import Outgoing, Transition

PLANNED_CONTEXTS = 3


def child_id(parent_id: str, index: int) -> str:
    """Stable per parent and sub-question: a re-decided plan names the same children."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"ragbus/research/{parent_id}/{index}").hex


def start_plan(settings: Settings, state: RequestState, clock: Clock) -> Transition:
    cmd = PlanCommand(
        **moves.corr(state),
        query=state.question,
        contexts=to_resolve(state.fused[:PLANNED_CONTEXTS]),
        max_questions=settings.research_max_children,
    )
    state.status = RequestStatus.PLANNING
    state.pending = moves.pending(
        Step.PLAN, {Step.PLAN.value: cmd.event_id}, settings.plan_timeout_s, clock
    )
    return moves.moved(state, [moves.command(cmd, Step.PLAN)])


def on_planned(
    settings: Settings,
    state: RequestState,
    questions: list[str],
    planner: str,
    clock: Clock,
    broad: list[bool] | None = None,
) -> Transition:
    """Spawn one child per sub-question (the question itself when the plan is empty). A
    sub-question with parts of its own is researched in turn while the depth allows
    (`RAGBUS_RESEARCH_MAX_DEPTH`); the question itself never is, so nothing recurses."""
    questions = (questions or [state.question])[: settings.research_max_children]
    deeper = state.research_depth + 1 < settings.research_max_depth
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
            filter=state.filter,
            reader=state.reader,
            top_k=state.top_k,
            mode="research" if research else "answer",
            parent_id=state.request_id,
            research_depth=state.research_depth + 1,
            trace=state.trace,
        )
        messages.append(Outgoing(sj.QUERY_SUBMITTED, sj.STREAM_QUERIES, submitted))
        messages.append(_step(state, child, PhaseStatus.IN_PROGRESS, mode=submitted.mode))
    state.status = RequestStatus.RESEARCHING
    state.pending = PendingStep(
        step=RESEARCH_STEP,
        command_ids={c.request_id: c.request_id for c in state.children},
        deadline_at=min(clock.now + settings.research_wait_s, state.deadline_at - 1.0),
    )
    return moves.moved(state, messages)


def on_child(state: RequestState | None, msg: ChildFinished) -> Transition:
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
        state,
        child,
        PhaseStatus.COMPLETED if ok else PhaseStatus.FAILED,
        child_status=msg.status,
        reason=None if ok else (msg.error or msg.status),
    )
    if pending.command_ids:
        return moves.moved(state, [step])
    return synthesize(state, [step])


def wait_over(settings: Settings, state: RequestState) -> Transition:
    """The wait ended: cancel the children still running, report them, write the report."""
    assert state.pending is not None
    messages: list[Outgoing] = []
    for cid in list(state.pending.command_ids):
        child = _child(state, cid)
        child.status = RequestStatus.TIMED_OUT.value
        child.error = f"no answer within {settings.research_wait_s:g}s"
        messages.append(cancel_child(state, cid, "its research request stopped waiting"))
        messages.append(
            _step(
                state,
                child,
                PhaseStatus.FAILED,
                child_status=child.status,
                reason=child.error,
            )
        )
    state.pending.command_ids.clear()
    return synthesize(state, messages)


def _child(state: RequestState, cid: str) -> ChildRecord:
    return next(c for c in state.children if c.request_id == cid)


def _step(
    state: RequestState, child: ChildRecord, status: PhaseStatus, **metadata: object
) -> Outgoing:
    """A `research_step` phase: one child's start or end, named by its id, place and question."""
    return moves.phase(
        state,
        Phase.RESEARCH_STEP,
        status,
        child_id=child.request_id,
        index=state.children.index(child),
        query=child.query,
        **metadata,
    )


def synthesize(state: RequestState, messages: list[Outgoing]) -> Transition:
    """The last child is in: the report (`orchestrator.lineage.research_answer`), or an error
    when no sub-question was answered."""
    answered = [c for c in state.children if c.status == RequestStatus.COMPLETED.value]
    report = moves.phase(
        state,
        Phase.RESEARCH_SYNTHESIS,
        PhaseStatus.COMPLETED,
        sections=len(answered),
        failed=len(state.children) - len(answered),
    )
    if not answered:
        failures = "; ".join(f"{c.query}: {c.error or c.status}" for c in state.children)
        transition = endings.finish_error(
            state,
            RequestStatus.FAILED,
            "research_failed",
            f"no sub-question was answered ({failures})"[:2000],
            Phase.RESEARCH_SYNTHESIS,
        )
        transition.messages[:0] = [*messages, report]
        return transition
    return endings.complete(state, [*messages, report])
