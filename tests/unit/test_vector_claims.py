"""The query's embedding travels by claim check (`infra.runtime.claims`): classify leaves it
in the request's claim store, and the messages carry `claim:<field>`; a step resolves it with
the passages it reads anyway, or alone, and makes the vector itself when it is gone."""

from __future__ import annotations

import numpy as np

from contracts.commands import CriticCommand, GenerateCommand, SearchCommand
from contracts.enums import Channel, Intent
from contracts.models import RetrievedChunk
from infra.retrieval.vectors.codec import pack_query, unpack_query
from infra.runtime.claims import claimed_vector, vector_field
from tests.unit.fakes import MemoryClaims

RID = "req-vectors"
FIRST = pack_query(np.arange(4, dtype=np.float32))
FOLLOW_UP = pack_query(np.ones(4, dtype=np.float32))


def test_a_claim_check_is_told_from_a_packed_vector() -> None:
    assert claimed_vector(FIRST) is None  # base64 has no colon
    assert claimed_vector("claim:" + vector_field("q")) == vector_field("q")
    assert claimed_vector(None) is None
    assert vector_field("q") == vector_field("q") != vector_field("q ")


async def test_a_search_command_gets_its_vector_back() -> None:
    claims = MemoryClaims()
    ref = await claims.put_vector(RID, "what is it", FIRST)
    assert ref is not None and ref.startswith("claim:") and len(ref) < 64
    assert await claims.put_vector(RID, "what is it", None) is None  # nothing to claim
    cmd = SearchCommand(
        request_id=RID, channel=Channel.VECTOR, query="what is it", namespaces=["d"], top_k=3,
        query_vector=ref,
    )  # fmt: skip
    found = await claims.with_vector(cmd)
    assert found.query_vector == FIRST
    unclaimed = cmd.model_copy(update={"query_vector": FIRST})
    assert await claims.with_vector(unclaimed) is unclaimed  # nothing to read


async def test_a_vector_that_is_gone_is_none_so_the_step_makes_it() -> None:
    claims = MemoryClaims()
    cmd = SearchCommand(
        request_id=RID, channel=Channel.VECTOR, query="q", namespaces=["d"], top_k=3,
        query_vector="claim:" + vector_field("q"),
    )  # fmt: skip
    found = await claims.with_vector(cmd)
    assert found.query_vector is None and unpack_query(found.query_vector) is None


async def test_generation_reads_passages_and_vectors_in_one_read() -> None:
    claims = MemoryClaims()
    chunk = RetrievedChunk(chunk_id="c1", document_id="d", text="A whole passage.", score=1.0)
    [claimed] = await claims.put(RID, [chunk])
    first = await claims.put_vector(RID, "first", FIRST)
    follow_up = await claims.put_vector(RID, "second", FOLLOW_UP)
    reads: list[list[str]] = []
    load = claims._load

    async def counted(key: str, fields: list[str]) -> list[bytes | str | None]:
        reads.append(fields)
        return await load(key, fields)

    claims._load = counted  # type: ignore[method-assign]
    cmd = GenerateCommand(
        request_id=RID, query="first", intent=Intent.FACTUAL, contexts=[claimed],
        query_vectors={"first": first, "second": follow_up, "third": FIRST},
    )  # fmt: skip
    whole = await claims.whole(cmd)
    assert len(reads) == 1
    assert whole.contexts[0].text == "A whole passage." and not whole.contexts[0].claimed
    assert whole.query_vectors == {"first": FIRST, "second": FOLLOW_UP, "third": FIRST}

    critic = CriticCommand(
        request_id=RID, query="first", intent=Intent.FACTUAL, answer="An answer.",
        contexts=[claimed], citations={}, attempts_left=0, query_vector=first,
    )  # fmt: skip
    assert (await claims.whole(critic)).query_vector == FIRST
    assert len(reads) == 2
