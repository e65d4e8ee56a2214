"""Fair parsing's parts without a bus (issue 54): the slots handed out in turn, the tenants'
parse budgets on a real redis-server, and the lanes' subjects."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from contracts import subjects as sj
from contracts.tenancy import DEFAULT_TENANT, store_namespace, tenant_of
from infra.runtime.fair_slots import FairSlots
from infra.runtime.services import LocalService
from infra.runtime.topology import PARSE_WORKER, parse_lane_consumer
from infra.tenancy.parse_budget import Budget, ParseBudgets


async def test_a_free_slot_is_taken_at_once() -> None:
    slots = FairSlots(2)
    async with slots.slot("a") as first, slots.slot("b") as second:
        assert {first, second} == {0, 1}
        assert slots.running == {first: "a", second: "b"}
    assert slots.running == {}


async def test_the_tenant_served_longest_ago_goes_first() -> None:
    slots = FairSlots(1)
    order: list[str] = []
    release = asyncio.Event()

    async def work(tenant: str) -> None:
        async with slots.slot(tenant):
            order.append(tenant)
            if tenant == "flood" and len(order) == 1:
                await release.wait()

    first = asyncio.create_task(work("flood"))
    await asyncio.sleep(0)
    # while the flood's first file runs, its next one asks before the others do
    waiting = [asyncio.create_task(work(t)) for t in ("flood", "b", "c")]
    await asyncio.sleep(0)
    assert slots.waiting() == ["b", "c", "flood"], "never served first, in their order"
    release.set()
    await asyncio.gather(first, *waiting)
    assert order == ["flood", "b", "c", "flood"]


async def test_a_flood_never_holds_every_slot() -> None:
    """A tenant holds one file at a time in a process (its lane): with two slots, another
    tenant's file starts while the flood's runs."""
    slots = FairSlots(2)
    started: dict[str, float] = {}

    async def parse(tenant: str, seconds: float) -> None:
        async with slots.slot(tenant):
            started.setdefault(tenant, time.monotonic())
            await asyncio.sleep(seconds)

    async def lane(tenant: str, files: int, seconds: float) -> None:
        for _ in range(files):
            await parse(tenant, seconds)

    begin = time.monotonic()
    flood = asyncio.create_task(lane("flood", 5, 0.2))
    await asyncio.sleep(0.05)
    await lane("small", 1, 0.01)
    assert started["small"] - begin < 0.1
    await flood


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    slots = FairSlots(1)
    hold = asyncio.Event()

    async def holder() -> None:
        async with slots.slot("a"):
            await hold.wait()

    task = asyncio.create_task(holder())
    await asyncio.sleep(0)
    gone = asyncio.create_task(slots.slot("b").__aenter__())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert slots.waiting() == []
    hold.set()
    await task
    async with slots.slot("c") as index:
        assert index == 0


@pytest.fixture
async def redis(redis_service: LocalService) -> aioredis.Redis:
    client = aioredis.from_url(redis_service.url, decode_responses=True)
    yield client
    await client.aclose()


async def test_a_tenant_past_its_budget_waits_and_others_do_not(redis: aioredis.Redis) -> None:
    budgets = ParseBudgets(redis, Budget(pages_per_hour=100, seconds_per_hour=0))
    assert await budgets.wait_s("t-flood") == 0
    await budgets.charge("t-flood", pages=100, seconds=5.0)
    assert await budgets.wait_s("t-flood") == 0, "an hour's worth may be spent at once"
    await budgets.charge("t-flood", pages=50, seconds=5.0)
    wait = await budgets.wait_s("t-flood")
    assert 1790 < wait <= 1800, "50 pages past an hour of 100: half an hour"
    assert await budgets.wait_s("t-other") == 0


async def test_parser_seconds_are_budgeted_too(redis: aioredis.Redis) -> None:
    budgets = ParseBudgets(redis, Budget(pages_per_hour=0, seconds_per_hour=60))
    await budgets.charge("t-slow", pages=1, seconds=90.0)
    assert 1790 < await budgets.wait_s("t-slow") <= 1800
    assert Budget(0, 60).describe() == "60 parser seconds an hour"
    assert Budget(20_000, 3600).describe() == "20,000 pages and 3,600 parser seconds an hour"


async def test_no_budget_costs_nothing(redis: aioredis.Redis) -> None:
    budgets = ParseBudgets(redis, Budget(0, 0))
    await budgets.charge("t-free", pages=10**6, seconds=10**6)
    assert await budgets.wait_s("t-free") == 0
    assert await redis.keys("ragbus:parse-budget:*t-free*") == []


def test_each_tenant_has_its_lane() -> None:
    assert sj.ingest_parse_subject("job1") == "rag.ingest.parse.default.job1"
    assert sj.ingest_parse_subject("job1", "acme") == "rag.ingest.parse.acme.job1"
    assert sj.parse_lane("rag.ingest.parse.acme.job1") == "acme"
    assert sj.parse_lane("rag.ingest.parse.job1") == "", "an earlier release's"
    assert sj.parse_lane("rag.ingest.docs.job1") is None
    assert sj.parse_lane("rag.ingest.parse.Bad_Name.job1") is None
    with pytest.raises(ValueError, match="invalid tenant"):
        sj.ingest_parse_subject("job1", "a.b")
    lane = parse_lane_consumer("acme")
    assert (lane.durable, lane.filter_subject) == ("worker-parse-acme", "rag.ingest.parse.acme.>")
    assert PARSE_WORKER.filter_subject == "rag.ingest.parse.*", "overlaps no lane"


def test_a_store_namespace_names_its_tenant() -> None:
    assert tenant_of(store_namespace("acme", "docs")) == "acme"
    assert tenant_of("docs") == DEFAULT_TENANT
    assert tenant_of("my_docs") == DEFAULT_TENANT
    assert tenant_of("Bad__docs") == DEFAULT_TENANT
