"""The fused list travels to generation and the critic by claim check: fusion claims it, as
those steps read it, beside its passages (`Claims.put_fused`); their commands carry the claim
while the saga's list is the one fusion claimed, and the list itself once it is not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import ValidationError

from contracts.commands import CriticCommand, GenerateCommand
from contracts.enums import Intent
from contracts.models import RetrievedChunk, contexts_claim, to_resolve
from contracts.results import ChannelOutcome, Fused, SearchResult
from infra.runtime.claims import ClaimMissing, Claims, claims_key
from infra.runtime.services import LocalService
from tests.unit.fakes import MemoryClaims
from tests.unit.saga_support import Run
from tests.unit.test_saga_fuse_with_search import searches

RID = "req-contexts"
PASSAGES = [
    RetrievedChunk(
        chunk_id=f"c{n}", document_id=f"d{n}", title=f"T{n}", text=f"The whole passage {n}.",
        score=1.0 / n, rank=n, channels={"vector": n},
    )
    for n in range(1, 6)
]  # fmt: skip


def test_the_claim_is_named_by_the_ids_in_their_order() -> None:
    assert contexts_claim(["a", "b"]) == contexts_claim(["a", "b"])
    assert contexts_claim(["a", "b"]) != contexts_claim(["b", "a"])
    assert contexts_claim(["a", "b"]) != contexts_claim(["a"])


def test_a_command_carries_the_list_or_its_claim_never_both() -> None:
    claim = contexts_claim(["c1"])
    GenerateCommand(request_id=RID, query="q", intent=Intent.FACTUAL, contexts_claim=claim)
    with pytest.raises(ValidationError, match="exclusive"):
        GenerateCommand(
            request_id=RID, query="q", intent=Intent.FACTUAL, contexts_claim=claim,
            contexts=PASSAGES[:1],
        )  # fmt: skip
    with pytest.raises(ValidationError):  # any other field of the claim store is not a list
        GenerateCommand(
            request_id=RID, query="q", intent=Intent.FACTUAL, contexts_claim="vector:ab"
        )


async def test_a_claimed_list_resolves_to_what_the_list_itself_would() -> None:
    claims = MemoryClaims()
    claimed, claim = await claims.put_fused(RID, PASSAGES)
    assert claim == contexts_claim(c.chunk_id for c in PASSAGES)
    assert all(c.claimed and c.vectors is None for c in claimed)
    by_claim = GenerateCommand(
        request_id=RID, query="q", intent=Intent.FACTUAL, contexts_claim=claim
    )
    inline = GenerateCommand(
        request_id=RID, query="q", intent=Intent.FACTUAL, contexts=to_resolve(claimed)
    )
    assert '"contexts":' not in by_claim.compact_json() and len(claim) < 40
    whole, expected = await claims.whole(by_claim), await claims.whole(inline)
    assert whole.contexts == expected.contexts and whole.contexts_claim is None
    assert [c.text for c in whole.contexts] == [p.text for p in PASSAGES]
    assert [(c.title, c.score) for c in whole.contexts] == [(p.title, p.score) for p in PASSAGES]

    critic = CriticCommand(
        request_id=RID, query="q", intent=Intent.FACTUAL, answer="A [1].", citations={1: "c1"},
        attempts_left=0, contexts_claim=claim,
    )  # fmt: skip
    assert (await claims.whole(critic)).contexts == expected.contexts


async def test_a_list_no_longer_claimed_fails_its_step() -> None:
    cmd = GenerateCommand(
        request_id=RID, query="q", intent=Intent.FACTUAL, contexts_claim=contexts_claim(["c1"])
    )
    with pytest.raises(ClaimMissing, match="contexts"):
        await MemoryClaims().whole(cmd)


@pytest.fixture
async def redis(redis_service: LocalService) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_service.url)
    yield client
    await client.aclose()


async def test_redis_resolves_a_claimed_list_in_one_round_trip_as_the_fake_does(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script that reads the list and its passages together (`RESOLVE_LISTED`) gives
    what the unit tests' dict gives: claimed chunks whole, one that came unclaimed as it was,
    and the query vector claimed beside them."""
    rid = "req-contexts-redis"
    chunks = [*PASSAGES[:3], PASSAGES[3].model_copy(update={"text": ""})]  # the last: unclaimed
    fake, real = MemoryClaims(), Claims(redis, ttl_s=60)
    sent: list[tuple[Any, ...]] = []
    for claims in (fake, real):
        _, claim = await claims.put_fused(rid, chunks)
        vector = await claims.put_vector(rid, "q", "packed-vector")
    cmd = GenerateCommand(
        request_id=rid, query="q", intent=Intent.FACTUAL, contexts_claim=claim,
        query_vectors={"q": vector},
    )  # fmt: skip
    await real.whole(cmd)  # the first call loads the script (NOSCRIPT, SCRIPT LOAD, EVALSHA)
    execute = redis.execute_command

    async def counted(*args: Any, **kwargs: Any) -> Any:
        sent.append(args)
        return await execute(*args, **kwargs)

    monkeypatch.setattr(redis, "execute_command", counted)
    whole = await real.whole(cmd)
    assert [args[0] for args in sent] == ["EVALSHA"]
    assert whole == await fake.whole(cmd)
    assert [c.text for c in whole.contexts[:3]] == [p.text for p in PASSAGES[:3]]
    assert whole.contexts[3].text == "" and whole.query_vectors == {"q": "packed-vector"}

    await redis.hdel(claims_key(rid), "c2")
    with pytest.raises(ClaimMissing, match="c2"):
        await real.whole(cmd)
    await redis.delete(claims_key(rid))
    with pytest.raises(ClaimMissing, match="contexts"):
        await real.whole(cmd)


def _fused(run: Run, chunks: list[RetrievedChunk], claim: str | None) -> SearchResult:
    [cmd] = searches(run)
    return SearchResult(
        **run.corr(cmd),
        channel=cmd.channel,
        count=len(chunks),
        also=[ChannelOutcome(channel=c, count=1) for c in cmd.also],
        fused=Fused(chunks=chunks, contexts_claim=claim),
    )


def _generate(sent: list[object]) -> GenerateCommand:
    [generate] = [m for m in sent if isinstance(m, GenerateCommand)]
    return generate


def test_generation_gets_the_claim_of_the_list_fusion_claimed() -> None:
    run = Run(search_batch=True)
    run.submit()
    run.classify()
    claimed = [c.model_copy(update={"claimed": True, "text": ""}) for c in PASSAGES]
    claim = contexts_claim(c.chunk_id for c in claimed)
    generate = _generate(run.result(_fused(run, claimed, claim)))
    assert (generate.contexts_claim, generate.contexts) == (claim, [])
    assert run.state is not None and run.state.fused == claimed  # citations still read it


@pytest.mark.parametrize("claim", [None, contexts_claim(["c2", "c1"])])
def test_a_list_fusion_did_not_claim_as_it_stands_goes_whole(claim: str | None) -> None:
    # no claim (a fuse step that did not hydrate), or one of another list: the saga's list
    # goes as it is, whatever a worker said
    run = Run(search_batch=True)
    run.submit()
    run.classify()
    claimed = [c.model_copy(update={"claimed": True}) for c in PASSAGES]
    generate = _generate(run.result(_fused(run, claimed, claim)))
    assert generate.contexts_claim is None
    assert generate.contexts == to_resolve(claimed)
    assert all(c.text == "" and c.channels == {} for c in generate.contexts)
