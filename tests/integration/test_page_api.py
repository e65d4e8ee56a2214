"""What the web page reads besides a request's events: an ingest job's progress as SSE, the
caller's namespaces and documents, and its recent requests."""

from __future__ import annotations

import uuid

import httpx
import pytest

from launcher.runtime import Runtime
from tests.integration.corpus import QUESTION
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

DOCUMENTS = [
    ("alpha", "Alpha", "The Ostrava ferry crosses the Vistula twice a day in summer."),
    ("beta", "Beta", "Marrow lanterns were lit along the Harbin quay every winter."),
]


async def test_an_ingest_job_streams_its_progress_and_its_documents_are_listed(
    http: httpx.AsyncClient, stack: Runtime
) -> None:
    namespace = f"page{uuid.uuid4().hex[:8]}"
    body = {
        "documents": [
            {"id": id_, "title": title, "text": text, "namespace": namespace}
            for id_, title, text in DOCUMENTS
        ]
    }
    accepted = await http.post("/v1/documents", json=body)
    assert accepted.status_code == 202, accepted.text
    events_url = accepted.json()["events_url"]
    assert events_url == f"/v1/ingest/{accepted.json()['job_id']}/events"

    events = await read_events(http, events_url)
    assert {e.event for e in events} == {"progress"}
    ids = [e.id for e in events]
    assert ids == sorted(set(ids)), "ids are the stream's sequences: rising, once each"
    final = events[-1].data["data"]
    assert (final["status"], final["documents_done"], final["expected"]) == ("completed", 2, 2)

    resumed = await read_events(http, events_url, last_event_id=ids[0])
    assert [e.id for e in resumed] == ids[1:]

    spaces = (await http.get("/v1/namespaces")).json()["namespaces"]
    assert {"namespace": namespace, "documents": 2} in spaces
    listed = (await http.get("/v1/documents", params={"namespace": namespace})).json()
    assert listed["namespace"] == namespace
    assert [d["id"] for d in listed["documents"]] == ["alpha", "beta"]
    assert listed["documents"][0]["bytes"] == len(DOCUMENTS[0][2].encode())

    deleted = await http.delete("/v1/documents/alpha", params={"namespace": namespace})
    assert deleted.status_code == 202, deleted.text
    listed = (await http.get("/v1/documents", params={"namespace": namespace})).json()
    assert [d["id"] for d in listed["documents"]] == ["beta"]


async def test_a_missing_jobs_events_are_not_found(http: httpx.AsyncClient, stack: Runtime) -> None:
    response = await http.get("/v1/ingest/no-such-job/events")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_recent_requests_come_newest_first(http: httpx.AsyncClient, stack: Runtime) -> None:
    made = []
    for _ in range(2):
        response = await http.post("/v1/queries", json={"query": QUESTION})
        assert response.status_code == 202, response.text
        made.append(response.json()["request_id"])
    recent = (await http.get("/v1/queries", params={"limit": 2})).json()["requests"]
    assert [r["request_id"] for r in recent] == made[::-1]
    assert {r["query"] for r in recent} == {QUESTION}
    assert (await http.get("/v1/whoami")).json() == {
        "tenant": "default",
        "auth_mode": "none",
        "user": None,
        "groups": [],
    }
    for request_id in made:
        await read_events(http, f"/v1/queries/{request_id}/events")
