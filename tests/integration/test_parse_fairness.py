"""One tenant's files never hold another's back (issue 54), on a real nats-server and
redis-server with a real parse worker: each tenant's files in a lane of their own, a parser
for another tenant while one floods, lanes closed when idle and opened again, and a tenant
past its parse budget waiting (its watchers told why) while another's file is parsed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from contracts import subjects as sj
from contracts.ingest import FileDocument
from infra.documents import ParserPool
from infra.runtime import tenant_lanes
from infra.runtime.files import FileStore
from infra.runtime.ingest_producer import publish_job
from infra.runtime.tenant_lanes import LanesRouter
from launcher.runtime import Runtime
from tests.integration.conftest import own_services, running
from tests.integration.test_files_ingest import pdf_bytes

pytestmark = pytest.mark.integration

FLOOD_PARSE_S = 1.5
FLOOD = 6


async def _parse_slowly_if_flood(self: ParserPool, data: bytes, filename: str) -> Any:
    """A flood file takes `FLOOD_PARSE_S` in the parser process (a long scan, say)."""
    if filename.startswith("flood"):
        await self.run(time.sleep, FLOOD_PARSE_S, what=filename)
    return await ORIGINAL_PARSE(self, data, filename)


ORIGINAL_PARSE = ParserPool.parse


async def publish(runtime: Runtime, space: str, *names: str) -> str:
    assert runtime.broker is not None and runtime.resources is not None
    store = FileStore(runtime.broker.connection.jetstream(), runtime.settings)
    documents = []
    for name in names:
        data = pdf_bytes(f"{name}: the ledger of {space}, one page.")
        ref = await store.put(space, name, data, name, "application/pdf")
        documents.append(FileDocument(id=name, namespace=space, file=ref))
    return (await publish_job(runtime.resources.bus, documents)).job_id


class Progress:
    """Every progress event of the jobs, as they arrive, with when."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, dict[str, Any]]] = []

    async def follow(self, url: str) -> AsyncIterator[None]:
        nc = await nats.connect(url)
        sub = await nc.subscribe(f"{sj.INGEST_EVENTS_PREFIX}.>")

        async def read() -> None:
            async for msg in sub.messages:
                data = json.loads(msg.data).get("data") or {}
                self.events.append((time.monotonic(), msg.subject.rsplit(".", 1)[1], data))

        task = asyncio.create_task(read())
        try:
            yield
        finally:
            task.cancel()
            await nc.close()

    def when(self, job_id: str, document_id: str, stage: str) -> float | None:
        for at, job, data in self.events:
            if (job, data.get("document_id"), data.get("stage")) == (job_id, document_id, stage):
                return at
        return None

    async def until(self, job_id: str, document_id: str, stage: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while (at := self.when(job_id, document_id, stage)) is None:
            assert time.monotonic() < deadline, f"{document_id} never {stage}: {self.events}"
            await asyncio.sleep(0.05)
        return at


def lanes_of(runtime: Runtime) -> LanesRouter:
    assert runtime.lanes, "the parse worker's lanes"
    return runtime.lanes[0]


@pytest.fixture
async def parse_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Runtime, Progress]]:
    monkeypatch.setattr(ParserPool, "parse", _parse_slowly_if_flood)
    monkeypatch.setattr(tenant_lanes, "IDLE_S", 3.0)
    with own_services(tmp_path, parse_slots=2) as settings:
        progress = Progress()
        async with running(settings, orchestrator=False, workers=("parse",)) as runtime:
            async for _ in progress.follow(settings.nats_url):
                yield runtime, progress


async def test_a_flood_holds_no_other_tenants_file_back(
    parse_worker: tuple[Runtime, Progress],
) -> None:
    runtime, progress = parse_worker
    flood = [f"flood-{i}.pdf" for i in range(FLOOD)]
    flood_job = await publish(runtime, "acme__docs", *flood)
    await progress.until(flood_job, flood[0], "parsed", 30)
    sent = time.monotonic()
    small_job = await publish(runtime, "zeta__docs", "one-page.pdf")
    parsed = await progress.until(small_job, "one-page.pdf", "parsed", 30)
    waited = parsed - sent
    flood_done = sum(progress.when(flood_job, name, "parsed") is not None for name in flood)
    # a lane opens within a poll (1 s), and a parser is free for it: the flood (one file at a
    # time, 1.5 s each) is far from done
    assert waited < 4.0, f"the one-page file waited {waited:.1f} s"
    assert flood_done < FLOOD - 1, f"{flood_done} of the flood parsed first"
    assert {"acme", "zeta"} <= lanes_of(runtime).open_lanes
    for name in flood:
        await progress.until(flood_job, name, "parsed", 60)


async def test_idle_lanes_close_and_open_again(parse_worker: tuple[Runtime, Progress]) -> None:
    runtime, progress = parse_worker
    first = await publish(runtime, "acme__docs", "a.pdf")
    await progress.until(first, "a.pdf", "parsed", 30)
    lanes = lanes_of(runtime)
    deadline = time.monotonic() + 20
    while "acme" in lanes.open_lanes:
        assert time.monotonic() < deadline, "the idle lane stayed open"
        await asyncio.sleep(0.2)
    assert "" in lanes.open_lanes, "the base lane stays"
    again = await publish(runtime, "acme__docs", "b.pdf")
    await progress.until(again, "b.pdf", "parsed", 30)


async def test_a_tenant_past_its_budget_waits_while_others_are_parsed(
    tmp_path: Path,
) -> None:
    with own_services(tmp_path, tenant_parse_pages_per_hour=1, parse_slots=2) as settings:
        progress = Progress()
        async with running(settings, orchestrator=False, workers=("parse",)) as runtime:
            async for _ in progress.follow(settings.nats_url):
                # an hour's page, spent by the first file; the second is charged as it ends
                # (its pages are not known before), so the third waits
                job = await publish(runtime, "acme__docs", "first.pdf", "second.pdf", "third.pdf")
                await progress.until(job, "second.pdf", "parsed", 30)
                await progress.until(job, "third.pdf", "waiting", 30)
                other = await publish(runtime, "zeta__docs", "theirs.pdf")
                await progress.until(other, "theirs.pdf", "parsed", 30)
                detail = next(
                    data["detail"]
                    for _, _, data in progress.events
                    if data.get("stage") == "waiting"
                )
                assert "parse budget (1 pages and 3,600 parser seconds an hour)" in detail
                await asyncio.sleep(1.5)
                assert progress.when(job, "third.pdf", "parsed") is None, "it waits"
                mine = await publish(runtime, "docs", "operators.pdf", "more.pdf")
                await progress.until(mine, "more.pdf", "parsed", 30)  # the default tenant's
