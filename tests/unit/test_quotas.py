"""The submission rate charges a research request for the child requests it starts: their
tokens leave the tenant's bucket when the request is admitted, all or none, and a bucket that
cannot pay refuses it with 429 as any submission would (on a real redis-server)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

from infra.runtime.services import LocalService
from infra.settings import Settings
from infra.tenancy.quotas import (
    Effective,
    Quotas,
    RateLimited,
    effective,
    research_cost,
    submission_cost,
)
from tests.unit.test_api_validation import FakeBus, FakeStore, make_client

RATE_KEY = "ragbus:rate:{default}"
SLOW = 0.01
"""Submissions per second: a token comes back every 100 s, so none does during a test."""


def test_research_costs_itself_and_every_child_it_may_start() -> None:
    assert research_cost(Settings()) == 1 + 4  # RAGBUS_RESEARCH_MAX_CHILDREN=4, depth 1
    assert research_cost(Settings(research_max_children=2)) == 3
    assert research_cost(Settings(research_max_children=4, research_max_depth=2)) == 1 + 4 + 16
    assert submission_cost(Settings(), "research") == 5
    assert submission_cost(Settings(), "answer") == 1
    assert submission_cost(Settings(), "retrieve") == 1


@pytest.fixture
async def redis(redis_service: LocalService) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_service.url, decode_responses=True)
    await client.delete(RATE_KEY)
    yield client
    await client.delete(RATE_KEY)  # the tests after this one start with a full bucket
    await client.aclose()


def limits(burst: int) -> Effective:
    return effective(Settings(quota_requests_per_s=SLOW, quota_burst=burst))


async def test_a_costly_submission_takes_all_its_tokens_or_none(redis: aioredis.Redis) -> None:
    quotas = Quotas(redis)
    await quotas.take_submission("default", limits(6), cost=5)  # 1 left
    with pytest.raises(RateLimited) as refused:
        await quotas.take_submission("default", limits(6), cost=5)
    assert refused.value.retry_after_s > 300  # four tokens short, one every 100 s
    assert "counts as 5" in str(refused.value)
    await quotas.take_submission("default", limits(6))  # the refusal took nothing
    with pytest.raises(RateLimited):
        await quotas.take_submission("default", limits(6))


async def test_a_cost_over_the_burst_is_taken_as_the_burst(redis: aioredis.Redis) -> None:
    quotas = Quotas(redis)
    await quotas.take_submission("default", limits(3), cost=21)  # a full bucket admits it
    with pytest.raises(RateLimited):
        await quotas.take_submission("default", limits(3))


@pytest.fixture
def api(redis: aioredis.Redis, redis_service: LocalService) -> TestClient:
    """The API with a bucket of 5; `redis` empties the bucket's key before and after."""
    settings = {"quota_requests_per_s": SLOW, "quota_burst": 5}
    return make_client(FakeBus(), FakeStore(), redis_service.url, **settings)


def submit(api: TestClient, mode: str) -> httpx.Response:
    return api.post("/v1/queries", json={"query": "Why did the canal need locks?", "mode": mode})


def test_a_research_request_is_charged_for_its_children_when_admitted(api: TestClient) -> None:
    assert submit(api, "research").status_code == 202  # 1 + 4 children: the bucket of 5
    refused = submit(api, "answer")
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) > 0


def test_a_bucket_that_cannot_pay_for_the_children_refuses_research(api: TestClient) -> None:
    assert submit(api, "answer").status_code == 202  # 4 left: not enough for 5
    refused = submit(api, "research")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "too_many_requests"
    assert "counts as 5" in refused.json()["error"]["message"]
    assert "retry-after" in refused.headers
    for _ in range(4):  # what research did not take is still there for plain questions
        assert submit(api, "answer").status_code == 202
    assert submit(api, "answer").status_code == 429
