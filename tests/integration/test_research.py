"""Research mode on the real broker: a research request fans out into child requests (their
own ids, streams and sagas, `parent_id` set), survives a child that fails, and ends with one
cited report; cancelling a parent cancels every running child, each with exactly one `done`.

The stacks run no generate worker, so a child's answer waits at generation: long enough for
the test to cancel one on purpose. In the first test the generate step's deadline is short
and the other children answer with their best passages, quoted and cited (the saga's own
fallback); in the second it is long, and the children are still waiting when the parent is
cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.layout import WORKER_KINDS
from tests.integration.conftest import ingest_and_wait, own_services, running, serving_api
from tests.integration.sse import SseEvent, read_events

pytestmark = pytest.mark.integration

QUESTION = "Who built the Lighthouse of Alexandria and the Colossus of Rhodes?"
NO_GENERATOR = tuple(kind for kind in WORKER_KINDS if kind != "generate")


async def children_of(http: httpx.AsyncClient, rid: str, timeout: float = 60.0) -> list[str]:
    """The parent's children once each has a state of its own (the orchestrator records a
    child when its submission, published after the parent's plan, reaches it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = list((await http.get(f"/v1/queries/{rid}")).json()["children"])
        found = [(await http.get(f"/v1/queries/{c}")).status_code for c in children]
        if children and found == [200] * len(children):
            return children
        await asyncio.sleep(0.1)
    raise AssertionError(f"research request {rid} started no children")


def research_steps(events: list[SseEvent]) -> list[tuple[str, str]]:
    return [
        (e.data["data"]["metadata"]["child_id"], e.data["data"]["status"])
        for e in events
        if e.event == "phase" and e.data["data"]["phase"] == "research_step"
    ]


def phase_statuses(events: list[SseEvent], name: str) -> list[str]:
    return [
        e.data["data"]["status"]
        for e in events
        if e.event == "phase" and e.data["data"]["phase"] == name
    ]


async def one_done(http: httpx.AsyncClient, rid: str) -> str:
    events = await read_events(http, f"/v1/queries/{rid}/events", timeout=120)
    kinds = [e.event for e in events]
    assert kinds.count("done") == 1 and kinds[-1] == "done", kinds
    status: str = events[-1].data["data"]["status"]
    return status


@contextlib.asynccontextmanager
async def researching(
    tmp_path: Path, *, generate_timeout_s: float
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A stack of the test's own with no generate worker, the corpus indexed, and a research
    request submitted: (the API client, the request's id). A generation that judges its own
    answer has the critic's deadline added to its own: here the critic's is that of the
    generation, so a child waits for no more than twice `generate_timeout_s`."""
    with own_services(
        tmp_path, generate_timeout_s=generate_timeout_s, critic_timeout_s=generate_timeout_s
    ) as settings:
        async with running(settings, orchestrator=True, workers=NO_GENERATOR) as runtime:
            await ingest_and_wait(runtime)
            async with (
                serving_api(runtime) as url,
                httpx.AsyncClient(base_url=url, timeout=60) as http,
            ):
                accepted = await http.post(
                    "/v1/queries", json={"query": QUESTION, "mode": "research"}
                )
                assert accepted.status_code == 202, accepted.text
                yield http, accepted.json()["request_id"]


async def test_research_fans_out_survives_a_failing_child_and_ends_with_a_cited_report(
    tmp_path: Path,
) -> None:
    async with researching(tmp_path, generate_timeout_s=6.0) as (http, rid):
        children = await children_of(http, rid)
        assert len(children) == 3
        # one child fails: it is cancelled while it waits at generation
        doomed = children[1]
        assert (await http.delete(f"/v1/queries/{doomed}")).status_code == 202

        assert await one_done(http, rid) == "completed"
        events = await read_events(http, f"/v1/queries/{rid}/events", timeout=30)
        statuses = [await one_done(http, child) for child in children]
        assert statuses == ["completed", "cancelled", "completed"]

        view = (await http.get(f"/v1/queries/{rid}")).json()
        for child in children:
            child_view = (await http.get(f"/v1/queries/{child}")).json()
            assert child_view["parent_id"] == rid
            assert child_view["mode"] == "answer"

    assert [s for s in phase_statuses(events, "research_plan") if s != "in_progress"] == [
        "completed"
    ]
    steps = research_steps(events)
    assert [s for c, s in steps if s == "in_progress"] == ["in_progress"] * 3
    assert (doomed, "failed") in steps
    assert sorted(s for _, s in steps if s != "in_progress") == ["completed", "completed", "failed"]
    assert phase_statuses(events, "research_synthesis") == ["completed"]

    answer: dict[str, Any] = view["answer"]
    meta = answer["metadata"]
    assert meta["children"] == children
    assert [f["request_id"] for f in meta["failed_children"]] == [doomed]
    assert meta["failed_children"][0]["status"] == "cancelled"
    content = answer["content"]
    assert "## Who built the Colossus of Rhodes?" in content  # children[2]; [1] was cancelled
    assert "- Who built the Lighthouse of Alexandria?: cancelled" in content
    assert "## Not answered" in content
    cited = {c["document_id"] for c in answer["citations"].values()}
    assert "lighthouse-alexandria" in cited, answer
    numbers = sorted(int(n) for n in answer["citations"])
    assert numbers == list(range(1, len(numbers) + 1))  # merged and numbered once
    chunks = [c["chunk_id"] for c in answer["citations"].values()]
    assert len(chunks) == len(set(chunks))
    for n in numbers:
        assert f"[{n}]" in content


async def test_cancelling_a_research_request_cancels_every_child(tmp_path: Path) -> None:
    async with researching(tmp_path, generate_timeout_s=90.0) as (http, rid):
        children = await children_of(http, rid)
        cancelled = await http.delete(f"/v1/queries/{rid}")
        assert cancelled.status_code == 202, cancelled.text

        assert await one_done(http, rid) == "cancelled"
        for child in children:
            assert await one_done(http, child) == "cancelled"
            view = (await http.get(f"/v1/queries/{child}")).json()
            assert view["error"]["code"] == "cancelled"
            assert "research request was cancelled" in view["error"]["message"]
