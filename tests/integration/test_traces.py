"""One trace per question, across every hop: in memory on an in-process stack with a critic
retry, and over OTLP/HTTP from a real `ragbus up` (two processes) to a receiver of the test's."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from infra.runtime.services import free_port
from infra.telemetry import setup_tracing, stop_tracing
from launcher.layout import WORKER_KINDS
from tests.integration.conftest import ingest_and_wait, own_services, running, serving_api
from tests.integration.corpus import QUESTION
from tests.integration.sse import read_events
from tests.up_process import ragbus_up

pytestmark = pytest.mark.integration

STEPS = ("classify", "search", "fuse", "generate", "critic")
"""Every step's command, each consumed as `rag.cmd.<step>[.<channel>] process`."""


@pytest.fixture
async def traced_stack(tmp_path: Path) -> AsyncIterator[tuple[str, InMemorySpanExporter]]:
    """A whole stack in this process with tracing to memory, and a critic that never accepts,
    so every request is retried once."""
    spans = InMemorySpanExporter()
    setup_tracing("test", SimpleSpanProcessor(spans))
    try:
        # the critic and fusion as steps of their own, so that their hops are traced too
        with own_services(
            tmp_path,
            critic_accept=1.0,
            max_attempts=2,
            critique_with_generation=False,
            fuse_with_search=False,
        ) as settings:
            async with running(settings, orchestrator=True, workers=WORKER_KINDS) as runtime:
                await ingest_and_wait(runtime)
                async with serving_api(runtime) as url:
                    yield url, spans
    finally:
        stop_tracing()


def _hex(span_id: int) -> str:
    return f"{span_id:016x}"


async def settled(spans: InMemorySpanExporter, quiet_s: float = 1.0) -> list[ReadableSpan]:
    """The finished spans once no new one has ended for `quiet_s` (acks end the last ones)."""
    count, since = -1, time.monotonic()
    while time.monotonic() - since < quiet_s:
        now = len(spans.get_finished_spans())
        if now != count:
            count, since = now, time.monotonic()
        await asyncio.sleep(0.1)
    return list(spans.get_finished_spans())


async def test_a_retried_question_is_one_trace_rooted_at_the_api(
    traced_stack: tuple[str, InMemorySpanExporter],
) -> None:
    url, exporter = traced_stack
    exporter.clear()
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        accepted = await http.post("/v1/queries", json={"query": QUESTION})
        assert accepted.status_code == 202, accepted.text
        rid = accepted.json()["request_id"]
        events = await read_events(http, accepted.json()["events_url"])
        view = (await http.get(f"/v1/queries/{rid}")).json()
    answer = next(e for e in events if e.event == "answer").data["data"]
    assert answer["metadata"]["attempts"] == 2, "the strict critic retries once"

    trace_id = view["trace_id"]
    assert trace_id and answer["metadata"]["trace_id"] == trace_id
    spans = await settled(exporter)
    mine = [s for s in spans if s.context is not None and f"{s.context.trace_id:032x}" == trace_id]

    # Exactly one trace: no span of this request anywhere else.
    strays = [
        s.name
        for s in spans
        if s not in mine
        and (
            (s.attributes or {}).get("ragbus.request_id") == rid
            or rid in str((s.attributes or {}).get("messaging.destination.name", ""))
        )
    ]
    assert strays == []

    # Rooted at the API, every other span's parent in the same trace.
    roots = [s for s in mine if s.parent is None]
    assert [r.name for r in roots] == ["POST /v1/queries"]
    ids = {_hex(s.context.span_id) for s in mine if s.context is not None}
    orphans = [s.name for s in mine if s.parent is not None and _hex(s.parent.span_id) not in ids]
    assert orphans == []

    names = [s.name for s in mine]
    for step in STEPS:
        consumed = [n for n in names if n.startswith(f"rag.cmd.{step}") and n.endswith("process")]
        assert consumed, f"no span for rag.cmd.{step}: {sorted(set(names))}"
    assert "saga query.submitted" in names
    assert {"saga res.classify", "saga res.fuse", "saga res.generate", "saga res.critic"} <= set(
        names
    )
    for phase in ("intent_classification", "vector_search", "fusion", "generation", "critic"):
        assert phase in names, phase
    # the retry's steps are in the same trace: their spans say attempt 2
    attempts = {(s.attributes or {}).get("ragbus.attempt") for s in mine if s.name == "generation"}
    assert attempts == {1, 2}


class _Receiver(BaseHTTPRequestHandler):
    """A tiny OTLP/HTTP receiver: keeps every span it is sent, with its service's name."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.received.append(
                        {
                            "service": service,
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                        }
                    )
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()


def test_ragbus_up_exports_one_trace_across_its_processes_over_otlp_http(
    tmp_path: Path, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    endpoint, received = receiver
    api_port = free_port()
    env = {
        **os.environ,
        "RAGBUS_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "RAGBUS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "RAGBUS_START_SERVICES": "true",
        "RAGBUS_DATA_DIR": str(tmp_path / "data"),
        "RAGBUS_API_PORT": str(api_port),
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    env.pop("OTEL_SERVICE_NAME", None)
    url = f"http://127.0.0.1:{api_port}"
    with ragbus_up(env, tmp_path / "up.log", url):
        docs = {"documents": [{"id": "lake", "title": "Gatun Lake", "text": LAKE}]}
        job = httpx.post(f"{url}/v1/documents", json=docs, timeout=30)
        assert job.status_code == 202, job.text
        _wait(lambda: httpx.get(f"{url}{job.json()['status_url']}").json()["status"] != "running")
        accepted = httpx.post(f"{url}/v1/queries", json={"query": "What made Gatun Lake?"})
        rid = accepted.json()["request_id"]
        _wait(lambda: httpx.get(f"{url}/v1/queries/{rid}").json()["status"] == "completed")
        trace_id = httpx.get(f"{url}/v1/queries/{rid}").json()["trace_id"]

        def whole() -> bool:
            names = {s["name"] for s in received if s["trace_id"] == trace_id}
            # generation judges its own answer here (the default): the critic's phase
            # is a span of the generate worker's, in the same trace
            return {"POST /v1/queries", "generation", "critic", "saga res.generate"} <= names

        _wait(whole, timeout=30)
    mine = [s for s in received if s["trace_id"] == trace_id]
    services = {s["service"] for s in mine}
    assert "ragbus-api" in services
    assert any(s.startswith("ragbus-worker-") for s in services), services
    roots = [s["name"] for s in mine if not s["parent"]]
    assert roots == ["POST /v1/queries"], json.dumps(mine, indent=1)[:3000]
    ids = {s["span_id"] for s in mine}
    assert all(s["parent"] in ids for s in mine if s["parent"])


LAKE = (
    "Gatun Lake is an artificial lake in Panama. It was made between 1907 and 1913 by "
    "building the Gatun Dam across the Chagres River, and it forms part of the Panama Canal."
)


def _wait(done: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
