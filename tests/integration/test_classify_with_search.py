"""`RAGBUS_CLASSIFY_WITH_SEARCH` end to end, on a real nats-server and redis-server: the
search worker classifies the question in the request's one search command, so no classify
command crosses the bus, and the caller still sees every phase in causal order, then a cited
answer."""

from __future__ import annotations

from pathlib import Path

import httpx
import nats
import pytest

from launcher.layout import WORKER_KINDS
from tests.integration.conftest import ingest_and_wait, own_services, running, serving_api
from tests.integration.corpus import EXPECTED_DOCUMENT, QUESTION
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration


async def test_the_search_worker_classifies_and_the_caller_sees_every_phase(
    tmp_path: Path,
) -> None:
    with own_services(tmp_path, classify_with_search=True) as settings:
        async with running(settings, orchestrator=True, workers=WORKER_KINDS) as runtime:
            await ingest_and_wait(runtime)
            tap = await nats.connect(settings.nats_url)
            commands: list[str] = []

            async def seen(msg: nats.aio.msg.Msg) -> None:
                commands.append(msg.subject)

            await tap.subscribe("rag.cmd.>", cb=seen)
            await tap.flush()
            async with (
                serving_api(runtime) as url,
                httpx.AsyncClient(base_url=url, timeout=60) as http,
            ):
                response = await http.post("/v1/queries", json={"query": QUESTION})
                assert response.status_code == 202, response.text
                events = await read_events(http, response.json()["events_url"])
            await tap.close()

    assert events[-1].event == "done" and events[-1].data["data"]["status"] == "completed"
    phases = [
        (e.data["data"]["phase"], e.data["data"]["status"])
        for e in events
        if e.event == "phase" and e.data["data"]["status"] != "in_progress"
    ]
    names = [name for name, _ in phases]
    assert names[0] == "intent_classification" and phases[0][1] == "completed"
    assert names.index("fusion") < names.index("generation") < names.index("critic")
    searched = {name for name, status in phases if name.endswith("_search")}
    assert "vector_search" in searched
    answer = next(e for e in events if e.event == "answer").data["data"]
    assert EXPECTED_DOCUMENT in {c["document_id"] for c in answer["citations"].values()}
    assert answer["metadata"]["intent_method"] != "fallback"
    assert "rag.cmd.classify" not in commands
    assert commands.count("rag.cmd.search.vector") == 1
