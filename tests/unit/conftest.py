"""Unit-test helper: a worker running on FastStream's in-memory broker, with every message it
publishes (results, caller events, dead letters, ingest progress) collected by subject."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import JStream, NatsBroker, NatsRouter, TestNatsBroker
from faststream.nats.annotations import NatsMessage

from contracts import subjects as sj
from contracts.events import caller_events
from infra.llm import LLMClient
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.fake_llm import FakeLLM, fake_llm
from tests.unit.fakes import MemoryClaims

# Unit tests run corpus-wide work in threads of the test process; the background child process
# itself is tested in test_background.py, and the integration stack runs with it.
os.environ.setdefault("RAGBUS_BACKGROUND_PROCESS", "false")

_WATCHED = {
    "rag.res.>": sj.STREAM_RES,
    "rag.events.>": sj.STREAM_EVENTS,
    "rag.dlq.>": sj.STREAM_DLQ,
    "rag.ingest.events.>": sj.STREAM_INGEST_EVENTS,
}


@dataclass
class WorkerHarness:
    broker: TestNatsBroker
    resources: Resources
    received: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    def on(self, prefix: str) -> list[dict[str, Any]]:
        """Every message received on subjects starting with `prefix`, in arrival order; a
        `phases` message as the phase events it carries, as a caller sees them."""
        return [
            event
            for subject, bodies in self.received.items()
            if subject.startswith(prefix)
            for body in bodies
            for event in caller_events(body)
        ]

    def messages(self, prefix: str) -> list[dict[str, Any]]:
        """Every message received on subjects starting with `prefix`, as it was published."""
        return [
            body
            for subject, bodies in self.received.items()
            if subject.startswith(prefix)
            for body in bodies
        ]

    async def publish(self, message: Any, subject: str, stream: str) -> None:
        await self.broker.publish(message.model_dump(mode="json"), subject, stream=stream)


@asynccontextmanager
async def worker_harness(
    create_router: Callable[[Resources], NatsRouter],
    settings: Settings,
    encoder: Any | None = None,
    live: Callable[[str], bool] = lambda _: True,
) -> AsyncIterator[WorkerHarness]:
    """Run one worker's router; `encoder` (e.g. `fakes.FakeEncoder`) replaces the model, and
    `live` says which requests exist (every one, unless a test says otherwise)."""
    broker = NatsBroker()
    resources = Resources(settings, Bus(broker))
    resources._claims = MemoryClaims()
    if encoder is not None:

        async def shared_encoder() -> Any:
            return encoder

        resources.encoder = shared_encoder  # type: ignore[method-assign]

    async def is_live(request_id: str) -> bool:
        return live(request_id)

    resources.is_live = is_live  # type: ignore[method-assign]
    received: dict[str, list[dict[str, Any]]] = defaultdict(list)

    async def collect(body: dict[str, Any], msg: NatsMessage) -> None:
        received[msg.raw_message.subject].append(body)

    for subject, stream in _WATCHED.items():
        broker.subscriber(subject, stream=JStream(stream, declare=False))(collect)
    broker.include_router(create_router(resources))
    try:
        async with TestNatsBroker(broker) as test_broker:
            yield WorkerHarness(test_broker, resources, received)
    finally:
        await resources.aclose()


@pytest.fixture(scope="session")
def tiny_bge_m3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BGE-M3-shaped model directory (random weights), built once per session, offline."""
    from tests.unit.tiny_models import build_bge_m3

    return build_bge_m3(tmp_path_factory.mktemp("models") / "tiny-bge-m3")


@pytest.fixture(scope="session")
def tiny_reranker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cross-encoder reranker directory (random weights), built once per session, offline."""
    from tests.unit.tiny_models import build_reranker

    return build_reranker(tmp_path_factory.mktemp("models") / "tiny-reranker")


@pytest.fixture(scope="session")
def tiny_nli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An NLI cross-encoder directory (three labels, random weights), built once, offline."""
    from tests.unit.tiny_models import build_nli

    return build_nli(tmp_path_factory.mktemp("models") / "tiny-nli")


@pytest.fixture(scope="session")
def server() -> Iterator[FakeLLM]:
    """The local OpenAI-compatible test server (tests/fake_llm.py), one per session."""
    with fake_llm() as running:
        yield running


@pytest.fixture
async def client_for(server: FakeLLM) -> AsyncIterator[Callable[..., LLMClient]]:
    """`client_for(behaviour, timeout_s=, max_retries=)`: a client whose model name picks the
    fake server's scripted behaviour; every client made is closed after the test."""
    clients: list[LLMClient] = []

    def make(model: str, timeout_s: float = 5.0, max_retries: int = 2) -> LLMClient:
        client = LLMClient(
            base_url=server.base_url,
            model=model,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=0.01,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
