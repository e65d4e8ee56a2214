"""A research request's lineage, below the phases because every ending needs it: what a
child's end tells its parent (`child_finished`), a parent's cancelling of its children, and
the report made of the children's answers (`research_answer`). Pure, like the decisions
(`orchestrator.research` starts and awaits the children; `orchestrator.endings` ends a
request with these).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from contracts import subjects as sj
from contracts.enums import RequestStatus
from contracts.events import AnswerData
from contracts.models import Citation
from contracts.queries import ChildFinished, QueryCancelled
from orchestrator.state import RequestState
from orchestrator.transition import Outgoing

RESEARCH_STEP = "research"
"""The pending step of a parent waiting on its children (`command_ids`: child id -> child id)."""
_MARK = re.compile(r"\[(\d+)\]")


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
