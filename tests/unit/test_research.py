"""Research mode's decisions: the plan fans out into child requests, each child's end is a
step, a failed child is reported and the report goes on, sources are merged and numbered once,
the wait ends with the stragglers cancelled, and a cancelled parent cancels its children.
And the planner's facets and entities."""

from __future__ import annotations

from typing import Any

from contracts import subjects as sj
from contracts.commands import PlanCommand
from contracts.enums import RequestStatus
from contracts.events import AnswerData, AnswerEvent, DoneEvent, ErrorEvent, PhaseEvent
from contracts.models import Citation
from contracts.queries import ChildFinished, QueryCancelled, QuerySubmitted
from contracts.results import PlanResult
from engines.critic.plan import facets, plan
from orchestrator import lineage
from tests.unit.saga_support import Run

QUESTION = "Compare the Lighthouse of Alexandria and the Colossus of Rhodes"
SUBS = [QUESTION, "the Lighthouse of Alexandria", "the Colossus of Rhodes"]


def cite(chunk: str, document: str) -> Citation:
    return Citation(chunk_id=chunk, document_id=document, title=document)


def planned(run: Run, questions: list[str] = SUBS, broad: list[bool] | None = None) -> list[Any]:
    run.submit(query=QUESTION, mode="research")
    run.classify()
    run.search_all()
    fuse_sent = run.fuse()
    cmd = fuse_sent[0]
    assert isinstance(cmd, PlanCommand)
    assert cmd.max_questions == run.settings.research_max_children
    return run.result(
        PlanResult(**run.corr(cmd), sub_questions=questions, planner="rules", broad=broad or [])
    )


def child_done(run: Run, index: int, status: str = "completed", **fields: Any) -> list[Any]:
    assert run.state is not None
    child = run.state.children[index]
    msg = ChildFinished(
        request_id=run.state.request_id, child_id=child.request_id, status=status, **fields
    )
    return run._take(run.saga.on_child(run.state, msg))


def steps(sent: list[Any]) -> list[tuple[str, str]]:
    return [
        (m.data.metadata["child_id"], m.data.status.value)
        for m in sent
        if isinstance(m, PhaseEvent) and m.data.phase.value == "research_step"
    ]


def test_the_plan_fans_out_into_child_requests_with_their_parent() -> None:
    run = Run()
    sent = planned(run)
    children = [m for m in sent if isinstance(m, QuerySubmitted)]
    assert [c.query for c in children] == SUBS
    assert {c.parent_id for c in children} == {"r1"}
    assert {c.mode for c in children} == {"answer"}
    assert len({c.request_id for c in children}) == 3
    assert [status for _, status in steps(sent)] == ["in_progress"] * 3
    assert run.state.status is RequestStatus.RESEARCHING
    assert set(run.state.pending.command_ids) == {c.request_id for c in children}


def test_a_failed_child_is_reported_and_the_report_merges_sources_once() -> None:
    run = Run()
    planned(run)
    shared, other = cite("a", "lighthouse"), cite("b", "colossus")
    first = AnswerData(content="Both were wonders [1].", citations={1: shared})
    third = AnswerData(content="Bronze [2], on Rhodes [1].", citations={1: shared, 2: other})
    assert steps(child_done(run, 0, answer=first)) == [
        (run.state.children[0].request_id, "completed")
    ]
    failed = child_done(run, 1, status="timed_out", error="the generate step did not answer")
    assert steps(failed)[0][1] == "failed"
    sent = child_done(run, 2, answer=third)
    answer = next(m for m in sent if isinstance(m, AnswerEvent)).data
    assert "## " + QUESTION in answer.content and "## the Colossus of Rhodes" in answer.content
    assert "Both were wonders [1]." in answer.content
    assert "Bronze [2], on Rhodes [1]." in answer.content  # one number per source
    assert {n: c.chunk_id for n, c in answer.citations.items()} == {1: "a", 2: "b"}
    assert "## Not answered" in answer.content and "the generate step" in answer.content
    meta = answer.metadata
    assert meta["children"] == [c.request_id for c in run.state.children]
    assert [f["status"] for f in meta["failed_children"]] == ["timed_out"]
    done = [m for m in sent if isinstance(m, DoneEvent)]
    assert len(done) == 1 and done[0].data.status is RequestStatus.COMPLETED
    # a child's end reported twice changes nothing
    assert child_done(run, 2, answer=third) == []


def test_when_every_child_fails_the_research_fails_with_one_done() -> None:
    run = Run()
    planned(run, SUBS[:2])
    child_done(run, 0, status="failed", error="x")
    sent = child_done(run, 1, status="cancelled", error="y")
    assert [type(m).__name__ for m in sent if not isinstance(m, PhaseEvent)] == [
        "ErrorEvent",
        "DoneEvent",
    ]
    error = next(m for m in sent if isinstance(m, ErrorEvent)).data
    assert error.code == "research_failed"


def test_the_wait_ends_with_the_running_children_cancelled_and_the_report_written() -> None:
    run = Run(research_wait_s=30.0)
    planned(run)
    child_done(run, 0, answer=AnswerData(content="Sostratus [1].", citations={1: cite("a", "l")}))
    sent = run.tick(31.0)
    cancels = [m for m in sent if isinstance(m, QueryCancelled)]
    assert {c.request_id for c in cancels} == {c.request_id for c in run.state.children[1:]}
    assert run.state.status is RequestStatus.COMPLETED
    failed = run.state.answer.metadata["failed_children"]
    assert {f["status"] for f in failed} == {"timed_out"}


def test_cancelling_the_parent_cancels_its_running_children() -> None:
    run = Run()
    planned(run)
    child_done(run, 0, answer=AnswerData(content="x [1].", citations={1: cite("a", "l")}))
    sent = run._take(run.saga.on_cancelled(run.state, QueryCancelled(request_id="r1")))
    cancels = [m for m in sent if isinstance(m, QueryCancelled)]
    assert {c.request_id for c in cancels} == {c.request_id for c in run.state.children[1:]}
    assert run.state.status is RequestStatus.CANCELLED
    assert sum(isinstance(m, DoneEvent) for m in sent) == 1


def test_a_child_tells_its_parent_how_it_ended() -> None:
    run = Run()
    run.submit(parent_id="parent-1")
    sent = run.tick(10_000)
    told = [m for m in sent if isinstance(m, ChildFinished)]
    assert len(told) == 1
    assert (told[0].request_id, told[0].child_id, told[0].status) == (
        "parent-1",
        "r1",
        "timed_out",
    )
    (outgoing,) = lineage.child_finished(run.state)
    assert (outgoing.subject, outgoing.stream) == (sj.QUERY_CHILD, sj.STREAM_QUERIES)


def test_the_planner_asks_each_facet_and_each_named_thing() -> None:
    assert facets("What were the causes and consequences of the 1906 earthquake?") == [
        "What were the causes of the 1906 earthquake?",
        "What were the consequences of the 1906 earthquake?",
    ]
    assert plan("Who built the Lighthouse of Alexandria and the Colossus of Rhodes?", [], 4) == [
        "Who built the Lighthouse of Alexandria and the Colossus of Rhodes?",
        "Who built the Lighthouse of Alexandria?",
        "Who built the Colossus of Rhodes?",
    ]
    assert plan("What is the role of vitamin D in bone health?", [], 4) == [
        "What is the role of vitamin D in bone health?"
    ]
    assert len(plan(QUESTION, [], 2)) == 2


def test_depth_bounds_which_children_are_researched_in_turn() -> None:
    broad = [True, True, False]  # the question itself is never researched again
    shallow = [m for m in planned(Run(), broad=broad) if isinstance(m, QuerySubmitted)]
    assert [c.mode for c in shallow] == ["answer", "answer", "answer"]
    deep_run = Run(research_max_depth=2)
    deep = [m for m in planned(deep_run, broad=broad) if isinstance(m, QuerySubmitted)]
    assert [c.mode for c in deep] == ["answer", "research", "answer"]
    assert {c.research_depth for c in deep} == {1}
    # a research child at the last level plans ordinary children only
    grandchild = Run(research_max_depth=2)
    grandchild.submit(query=QUESTION, mode="research", parent_id="p", research_depth=1)
    grandchild.classify()
    grandchild.search_all()
    cmd = grandchild.fuse()[0]
    sent = grandchild.result(
        PlanResult(**grandchild.corr(cmd), sub_questions=SUBS, broad=[False, True, True])
    )
    kids = [m for m in sent if isinstance(m, QuerySubmitted)]
    assert {c.mode for c in kids} == {"answer"} and {c.research_depth for c in kids} == {2}
