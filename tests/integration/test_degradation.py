"""Deadlines that expire on purpose, on a stack of their own with short step deadlines (the
shared stack's are generous, so that a busy machine never degrades what other tests assert)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from infra.runtime.services import LocalService, free_port, start_nats, start_redis
from launcher.layout import WORKER_KINDS
from tests.integration.conftest import ingest_and_wait, running, serving_api, stack_settings
from tests.integration.test_query_flow import ask, phase_is

pytestmark = pytest.mark.integration

SEARCH_DEADLINE_S = 3.0
GENERATE_DEADLINE_S = 5.0
# the lean path's steps carry the deadlines of the steps they include: a search that also
# classifies is dropped at classify + search, a generation that judges its own answer at
# generate + critic; both questions name their intent (no model runs), so 5 s is plenty
CLASSIFY_DEADLINE_S = 5.0
CRITIC_DEADLINE_S = 5.0


@pytest.fixture(scope="module")
async def short_http(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[httpx.AsyncClient]:
    root: Path = tmp_path_factory.mktemp("degradation")
    services: list[LocalService] = [
        start_nats(free_port(), root / "nats"),
        start_redis(free_port(), root / "redis", persistent=False),
    ]
    settings = stack_settings(
        services[0].url,
        services[1].url,
        root / "data",
        classify_timeout_s=CLASSIFY_DEADLINE_S,
        search_timeout_s=SEARCH_DEADLINE_S,
        generate_timeout_s=GENERATE_DEADLINE_S,
        critic_timeout_s=CRITIC_DEADLINE_S,
    )
    try:
        async with running(settings, orchestrator=True, workers=WORKER_KINDS) as runtime:
            await ingest_and_wait(runtime)
            async with (
                serving_api(runtime) as url,
                httpx.AsyncClient(base_url=url, timeout=60) as http,
            ):
                yield http
    finally:
        for service in services:
            service.stop()


async def test_a_silent_channel_misses_its_deadline_and_fusion_goes_on(
    short_http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engines.search.channels as channels

    release = asyncio.Event()

    async def silent(*args: object, **kwargs: object) -> list[object]:
        await release.wait()
        return []

    monkeypatch.setattr(channels, "search_sparse", silent)
    try:
        _, events = await ask(short_http, intent="navigation")
    finally:
        release.set()
    assert events[-1].data["data"]["status"] == "completed"
    dropped = [e for e in events if phase_is("sparse_search", "failed")(e)]
    assert dropped and dropped[0].data["data"]["metadata"].get("dropped") is True
    metadata = next(e for e in events if e.event == "answer").data["data"]["metadata"]
    assert metadata["channels"]["sparse"]["status"] == "timed_out"
    assert metadata["effective_weights"].get("sparse", 0.0) == 0.0
    assert any(phase_is("fusion", "completed")(e) for e in events)


async def test_a_silent_generator_leaves_the_best_passages_as_the_answer(
    short_http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wedged generation step (its worker alive, its step never ending) meets its deadline,
    and the request completes with the passages fallback, cited, instead of timing out."""
    import workers.generate.router as generate_router

    release = asyncio.Event()

    async def wedged(*args: object, **kwargs: object) -> object:
        await release.wait()
        raise AssertionError("released only at the end of the test")

    monkeypatch.setattr(generate_router, "_extractive", wedged)
    try:
        _, events = await ask(short_http, intent="factual")
    finally:
        release.set()
    assert events[-1].data["data"]["status"] == "completed"
    answer = next(e for e in events if e.event == "answer").data["data"]
    assert answer["metadata"]["generator"] == "passages"
    assert answer["citations"], "the passages are cited"
    assert any(phase_is("generation", "failed")(e) for e in events)
