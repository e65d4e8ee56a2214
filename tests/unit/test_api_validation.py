"""Bad input is refused with a 4xx that names the field, and nothing reaches the bus."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

import api.documents
import api.jobs
from api.app import create_app
from api.deps import get_bus, get_jetstream, get_nats, get_redis, get_store
from contracts import subjects as sj
from contracts.queries import QuerySubmitted
from infra.runtime.services import LocalService
from infra.settings import Settings
from orchestrator.state import RequestState


class FakeBus:
    def __init__(self) -> None:
        self.published: list[tuple[str, str, Any]] = []

    async def publish(self, message: Any, subject: str, stream: str) -> None:
        self.published.append((subject, stream, message))


class FakeStore:
    def __init__(self) -> None:
        self.states: dict[str, RequestState] = {}

    async def create(self, submitted: QuerySubmitted, *, drive: bool = False) -> RequestState:
        state = RequestState(
            request_id=submitted.request_id,
            query=submitted.query,
            search_queries=[submitted.query],
            namespaces=submitted.namespaces,
            top_k=submitted.top_k,
            channel_top_k=20,
            deadline_at=time.time() + 60,
        )
        self.states[submitted.request_id] = state
        return state

    async def get(self, request_id: str) -> RequestState | None:
        return self.states.get(request_id)


@pytest.fixture
def bus() -> FakeBus:
    return FakeBus()


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


NATS_DEFAULT_PAYLOAD = 1024 * 1024
"""What a stock nats-server accepts per message."""


def make_client(
    bus: FakeBus, store: FakeStore, redis_url: str | None = None, **settings: Any
) -> TestClient:
    # No `with`: the lifespan (and so every other real connection) never runs.
    app = create_app(Settings(**settings))
    app.dependency_overrides[get_bus] = lambda: bus
    app.dependency_overrides[get_store] = lambda: store
    app.dependency_overrides[get_redis] = (
        (lambda: aioredis.from_url(redis_url, decode_responses=True)) if redis_url else object
    )
    app.dependency_overrides[get_jetstream] = object
    app.dependency_overrides[get_nats] = lambda: SimpleNamespace(max_payload=NATS_DEFAULT_PAYLOAD)
    return TestClient(app)


@pytest.fixture
def client(bus: FakeBus, store: FakeStore, redis_service: LocalService) -> TestClient:
    return make_client(bus, store, redis_service.url)


@pytest.fixture
def queued_jobs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What `publish_job` was asked to queue (nothing is published)."""
    calls: list[Any] = []

    async def publish_job(*args: Any, **kwargs: Any) -> None:
        calls.append(args)

    monkeypatch.setattr(api.documents, "publish_job", publish_job)
    return calls


def assert_error(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"]
    assert error["message"]
    if field is not None:
        assert error["field"] == field
        assert field in error["message"]
    return error  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", ["/v1/queries", "/v1/chat"])
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "   \n\t "}, "query"),
        ({"query": "x" * 4001}, "query"),
        ({}, "query"),
        ({"query": "why?", "intent": "poetry"}, "intent"),
        ({"query": "why?", "namespaces": ["Not Valid"]}, "namespaces.0"),
        ({"query": "why?", "namespaces": []}, "namespaces"),
        ({"query": "why?", "top_k": 0}, "top_k"),
        ({"query": "why?", "colour": "blue"}, "colour"),
    ],
)
def test_bad_query_is_refused_and_nothing_published(
    client: TestClient,
    bus: FakeBus,
    store: FakeStore,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    error = assert_error(client.post(path, json=body), 422, field)
    assert error["code"] == "validation_error"
    assert bus.published == []
    assert store.states == {}


def test_blank_query_message_says_why(client: TestClient) -> None:
    error = assert_error(client.post("/v1/queries", json={"query": "  "}), 422, "query")
    assert "empty" in error["message"]


def test_good_query_is_stored_then_published(
    client: TestClient, bus: FakeBus, store: FakeStore
) -> None:
    response = client.post("/v1/queries", json={"query": "  Who built Gatun Dam? "})
    assert response.status_code == 202, response.text
    body = response.json()
    rid = body["request_id"]
    assert body["status_url"] == f"/v1/queries/{rid}"
    assert body["events_url"] == f"/v1/queries/{rid}/events"
    assert response.headers["location"] == body["status_url"]
    assert list(store.states) == [rid]
    [(subject, stream, message)] = bus.published
    assert (subject, stream) == (sj.QUERY_SUBMITTED, sj.STREAM_QUERIES)
    assert message.query == "Who built Gatun Dam?"
    assert message.namespaces == ["default"]


@pytest.mark.parametrize("suffix", ["", "/events"])
@pytest.mark.parametrize("bad_id", ["has.dot", "has*star", "x" * 65])
def test_malformed_request_id(client: TestClient, suffix: str, bad_id: str) -> None:
    assert_error(client.get(f"/v1/queries/{bad_id}{suffix}"), 422, "request_id")


@pytest.mark.parametrize("suffix", ["", "/events"])
def test_unknown_request_is_404(client: TestClient, suffix: str) -> None:
    error = assert_error(client.get(f"/v1/queries/nosuchrequest{suffix}"), 404)
    assert error["code"] == "not_found"


def test_status_shows_public_view(client: TestClient) -> None:
    rid = client.post("/v1/queries", json={"query": "What is a Panamax ship?"}).json()["request_id"]
    view = client.get(f"/v1/queries/{rid}").json()
    assert view["request_id"] == rid
    assert view["status"] == "submitted"
    assert view["answer"] is None


def test_bad_last_event_id(client: TestClient) -> None:
    response = client.get("/v1/queries/abc/events", headers={"Last-Event-ID": "soon"})
    assert_error(response, 422, "Last-Event-ID")


@pytest.mark.parametrize("value", ["null", "", "0", "17"])
def test_a_null_or_empty_last_event_id_is_no_resume_point_not_an_error(
    client: TestClient, value: str
) -> None:
    response = client.get("/v1/queries/abc/events", headers={"Last-Event-ID": value})
    assert_error(response, 404)  # the request is unknown; the header itself was fine


def test_a_document_id_with_next_line_is_refused_as_the_openapi_says(client: TestClient) -> None:
    pattern = client.get("/openapi.json").json()["components"]["schemas"]["DocumentUpload"][
        "properties"
    ]["id"]["pattern"]
    assert re.match(pattern, "a\u0085b") is None, "the published schema refuses it too"
    body = {"documents": [_doc(id="a\u0085b")]}
    assert_error(client.post("/v1/documents", json=body), 422, "documents.0.id")


def test_a_batch_with_two_versions_of_one_document_is_refused_whole(
    client: TestClient, queued_jobs: list[Any]
) -> None:
    calls = queued_jobs
    body = {"documents": [_doc(), _doc(id="other"), _doc(text="A second version.")]}
    error = assert_error(client.post("/v1/documents", json=body), 422, "documents")
    assert "'doc-1'" in error["message"] and "0 and 2" in error["message"]
    assert calls == []


def test_every_error_status_is_documented(client: TestClient) -> None:
    responses = client.get("/openapi.json").json()["paths"]["/v1/documents"]["post"]["responses"]
    assert {"400", "409", "422", "503"} <= set(responses)


def _doc(**overrides: Any) -> dict[str, Any]:
    return {"id": "doc-1", "title": "Locks", "text": "Gatun Locks lift ships.", **overrides}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "documents"),
        ({"documents": []}, "documents"),
        ({"documents": [_doc()] * 1001}, "documents"),
        ({"documents": [{"id": "doc-1", "title": "no text"}]}, "documents.0.text"),
        ({"documents": [_doc(text="")]}, "documents.0.text"),
        ({"documents": [_doc(id="has space")]}, "documents.0.id"),
        ({"documents": [_doc(namespace="Bad NS")]}, "documents.0.namespace"),
        ({"documents": [_doc(extra=1)]}, "documents.0.extra"),
        ({"documents": "not a list"}, "documents"),
    ],
)
def test_bad_documents_are_refused_and_nothing_published(
    client: TestClient,
    bus: FakeBus,
    queued_jobs: list[Any],
    body: dict[str, Any],
    field: str,
) -> None:
    calls = queued_jobs
    assert_error(client.post("/v1/documents", json=body), 422, field)
    assert calls == []
    assert bus.published == []


def test_good_documents_become_a_job(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.runtime.ingest_producer import JobReceipt

    async def publish_job(bus: Any, documents: list[Any], **_: Any) -> JobReceipt:
        return JobReceipt(job_id="job-1", accepted=len(documents), duplicates=0)

    monkeypatch.setattr(api.documents, "publish_job", publish_job)
    response = client.post("/v1/documents", json={"documents": [_doc(), _doc(id="doc-2")]})
    assert response.status_code == 202, response.text
    assert response.json() == {
        "job_id": "job-1",
        "accepted": 2,
        "duplicates": 0,
        "status_url": "/v1/ingest/job-1",
        "events_url": "/v1/ingest/job-1/events",
    }


def test_unknown_job_is_404(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    async def read_job(redis: Any, job_id: str) -> None:
        return None

    monkeypatch.setattr(api.jobs, "read_job", read_job)
    assert_error(client.get("/v1/ingest/nosuchjob"), 404)
    assert_error(client.get("/v1/ingest/bad.job"), 422, "job_id")


def test_token_is_required_when_configured(
    bus: FakeBus, store: FakeStore, redis_service: LocalService
) -> None:
    client = make_client(bus, store, redis_service.url, api_token="s3cret")
    body = {"query": "What is Gatun Lake?"}
    error = assert_error(client.post("/v1/queries", json=body), 401)
    assert error["code"] == "unauthorized"
    wrong = {"Authorization": "Bearer nope"}
    assert_error(client.post("/v1/queries", json=body, headers=wrong), 401)
    assert bus.published == []
    right = {"Authorization": "Bearer s3cret"}
    assert client.post("/v1/queries", json=body, headers=right).status_code == 202
    assert client.get("/healthz").json() == {"status": "ok"}


def test_the_token_cookie_serves_reads_only(
    bus: FakeBus, store: FakeStore, redis_service: LocalService
) -> None:
    """A browser's EventSource cannot send a header, so GETs take the token from a cookie;
    a cookie rides along with other sites' requests too, so nothing that changes state does."""
    client = make_client(bus, store, redis_service.url, api_token="s3cret")
    assert_error(client.get("/v1/whoami"), 401)
    client.cookies.set("ragbus_token", "nope")
    assert_error(client.get("/v1/whoami"), 401)
    client.cookies.set("ragbus_token", "s3cret")
    assert client.get("/v1/whoami").json() == {
        "tenant": "default",
        "auth_mode": "token",
        "user": None,
        "groups": [],
    }
    assert_error(client.post("/v1/queries", json={"query": "What is Gatun Lake?"}), 401)
    assert bus.published == []


def test_openapi_documents_the_api(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/queries",
        "/v1/queries/{request_id}",
        "/v1/queries/{request_id}/events",
        "/v1/chat",
        "/v1/documents",
        "/v1/ingest/{job_id}",
        "/v1/ingest/{job_id}/events",
        "/v1/namespaces",
        "/v1/whoami",
        "/healthz",
        "/readyz",
    ):
        assert path in paths


def test_a_batch_with_a_document_the_bus_cannot_carry_is_refused_whole(
    client: TestClient, queued_jobs: list[Any]
) -> None:
    calls = queued_jobs
    big = _doc(id="p3", text="x" * 1_500_000)
    body = {"documents": [_doc(id="p1"), _doc(id="p2"), big]}
    error = assert_error(client.post("/v1/documents", json=body), 413)
    assert "'p3'" in error["message"] and "max_payload" in error["message"]
    assert calls == [], "nothing of the batch was queued"


def test_metadata_is_bounded(client: TestClient) -> None:
    body = {"documents": [_doc(metadata={"blob": "x" * 20_000})]}
    assert_error(client.post("/v1/documents", json=body), 422, "documents.0.metadata")
