"""The claim check: a request's passages wait in Redis; messages carry their openings.

Fusion hydrates the fused chunks from the vector store (text, the chunk's vector, its
sentences' vectors: about 9 KB a chunk), and generation, the critic and research planning
read them. Carried in every message and in the saga's state, they were most of a request's
bytes on the bus and most of each transition's parse. Instead, fusion writes each passage
once into the request's claim hash (`ragbus:req:{id}:claims`, field = chunk id) and sends the
chunk with `claimed` set, its `text` cut to an opening (what citations and the passages
fallback show) and no vectors. A step that needs the whole passage resolves it by the
request id and the chunk id. The orchestrator deletes the hash when the request ends; a TTL
covers a request that never ends. Redis is a server in every deployment, so this holds
however the stores are deployed.

Fusion also claims the fused list itself, as the steps that resolve it read it
(`Claims.put_fused`, `contracts.models.contexts_claim`): their commands carry that field, and
the step reads the list and its passages in one round trip (a script that finds the list's
claimed chunk ids in it: `RESOLVE_LISTED`).

The query's embedding waits there too. Classify leaves it under a field of its own, and
the messages that would carry it (the result, the dense search, generation, the critic:
2 KB each) carry `claim:<field>` instead (`contracts.models.VECTOR_CLAIM`). A step resolves
it with the passages it reads anyway, or alone; a vector that is gone is made again by the
step that needs it, as for a query classify never encoded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as default
from typing import Any, Protocol, Self, TypeVar

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, TypeAdapter

from contracts.limits import FUSED_OPENINGS, MAX_CHUNK_CHARS
from contracts.models import (
    VECTOR_CLAIM,
    ChunkVectors,
    RetrievedChunk,
    contexts_claim,
    to_resolve,
)
from infra.errors import PoisonMessage
from infra.settings import Settings


class WithContexts(Protocol):
    """A command that carries passages: generate, critic, plan."""

    @property
    def request_id(self) -> str: ...

    @property
    def contexts(self) -> list[RetrievedChunk]: ...

    @property
    def contexts_claim(self) -> str | None: ...

    def model_copy(self, *, update: dict[str, object] | None = None) -> Self: ...


CommandT = TypeVar("CommandT", bound=WithContexts)


class Command(Protocol):
    """Any command (one with a claimed `query_vector` or not)."""

    @property
    def request_id(self) -> str: ...

    def model_copy(self, *, update: dict[str, object] | None = None) -> Self: ...


AnyCommandT = TypeVar("AnyCommandT", bound=Command)

OPENING_CHARS = 320
"""What a claimed chunk keeps of its text: enough for a citation's snippet and the fallback
answer's opening (`orchestrator.answer`)."""


def claim_ttl_s(settings: Settings) -> int:
    """Long enough for any request to end (it deletes its claims then), not a day longer."""
    return int(2 * max(settings.request_timeout_s, settings.research_timeout_s))


def claims_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:claims"


class Passage(BaseModel):
    """What a claim holds for one chunk."""

    model_config = ConfigDict(extra="forbid")

    text: str
    vectors: ChunkVectors | None = None


_RANKING: TypeAdapter[list[RetrievedChunk]] = TypeAdapter(list[RetrievedChunk])

RESOLVE_LISTED = """
local listed = redis.call('HGET', KEYS[1], ARGV[1])
if not listed then return {false} end
local wanted = {}
for _, chunk in ipairs(cjson.decode(listed)) do
  if chunk['claimed'] == true then wanted[#wanted + 1] = chunk['chunk_id'] end
end
for i = 2, #ARGV do wanted[#wanted + 1] = ARGV[i] end
local found = {}
if #wanted > 0 then found = redis.call('HMGET', KEYS[1], unpack(wanted)) end
table.insert(found, 1, listed)
return found
"""
"""A claimed list and what it needs, in one round trip: KEYS the claims hash; ARGV the list's
field, then the other fields wanted with it. Returns the list (nil when it is gone), then the
passages of its claimed chunks in their order, then the other fields (each nil when gone)."""


class ClaimMissing(PoisonMessage):
    """A claimed passage is not in the store (its request ended, or the claim expired)."""


def vector_field(text: str) -> str:
    """The claim field of the embedding of `text` (a query or a follow-up)."""
    return "vector:" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def claimed_vector(value: str | None) -> str | None:
    """The claim field a `PackedVector` names, or None for a vector carried whole."""
    if value and value.startswith(VECTOR_CLAIM):
        return value.removeprefix(VECTOR_CLAIM)
    return None


def _vector_refs(cmd: object) -> dict[str, str]:
    """The command's claimed query vectors: `query_vector`, or `query_vectors[text]` by text
    (key `""` for the first), each to its field."""
    refs: dict[str, str] = {}
    if (name := claimed_vector(getattr(cmd, "query_vector", None))) is not None:
        refs[""] = name
    for text, value in (getattr(cmd, "query_vectors", None) or {}).items():
        if (name := claimed_vector(value)) is not None:
            refs[text] = name
    return refs


def _with_vectors(cmd: Any, refs: dict[str, str], found: Mapping[str, Any]) -> dict[str, Any]:
    """The model_copy update that puts the resolved vectors in place (a vector that is gone:
    none, and the step makes it)."""
    update: dict[str, Any] = {}
    if "" in refs:
        update["query_vector"] = _text(found.get(refs[""]))
    if any(text for text in refs):
        update["query_vectors"] = {
            text: vector
            for text, value in cmd.query_vectors.items()
            if (vector := _text(found.get(refs[text])) if text in refs else value) is not None
        }
    return update


def _text(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    return raw.decode() if isinstance(raw, bytes) else raw


def opening(text: str) -> str:
    if len(text) <= OPENING_CHARS:
        return text
    return text[:OPENING_CHARS].rsplit(" ", 1)[0]


def _passages(chunks: Sequence[RetrievedChunk]) -> dict[str, str]:
    """The claims of the chunks not claimed yet that have a passage: chunk id -> JSON."""
    return {
        chunk.chunk_id: Passage(text=chunk.text, vectors=chunk.vectors).model_dump_json()
        for chunk in chunks
        if not chunk.claimed and chunk.text
    }


def _as_claimed(chunks: Sequence[RetrievedChunk], fresh: Mapping[str, str]) -> list[RetrievedChunk]:
    """The chunks as messages carry them once `fresh` is claimed: the first `FUSED_OPENINGS`
    with their opening, the others with no text, none with vectors."""
    return [
        chunk.model_copy(
            update={
                "text": opening(chunk.text) if n < FUSED_OPENINGS else "",
                "vectors": None,
                "claimed": True,
            }
        )
        if chunk.chunk_id in fresh
        else chunk
        for n, chunk in enumerate(chunks)
    ]


@dataclass(frozen=True)
class Resolved:
    chunks: list[RetrievedChunk]
    also: dict[str, bytes | str | None] = default(default_factory=dict)


def _resolved(
    chunks: Sequence[RetrievedChunk],
    wanted: Sequence[str],
    loaded: Sequence[bytes | str | None],
    also: Sequence[str],
) -> Resolved:
    """The chunks with the passages `loaded` for `wanted` (their claimed chunks' ids, in
    order) in place, and the `also` fields read after them."""
    extra = dict(zip(also, loaded[len(wanted) :], strict=True))
    passages: dict[str, Passage] = {}
    for chunk_id, raw in zip(wanted, loaded[: len(wanted)], strict=True):
        if raw is None:
            raise ClaimMissing(f"the passage of {chunk_id} is no longer claimed")
        passages[chunk_id] = Passage.model_validate_json(raw)
    whole = [
        chunk.model_copy(
            update={
                "text": passages[chunk.chunk_id].text[:MAX_CHUNK_CHARS],
                "vectors": passages[chunk.chunk_id].vectors,
                "claimed": False,
            }
        )
        if chunk.claimed
        else chunk
        for chunk in chunks
    ]
    return Resolved(whole, extra)


class Claims:
    def __init__(self, redis: aioredis.Redis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self._resolve_listed: Any = None

    async def put(self, request_id: str, chunks: Sequence[RetrievedChunk]) -> list[RetrievedChunk]:
        """Claim the whole chunks' passages; the chunks as messages carry them (claimed ones
        come back as they are), the first `FUSED_OPENINGS` with their opening and the others
        with no text at all."""
        fresh = _passages(chunks)
        if fresh:
            await self._store(claims_key(request_id), fresh)
        return _as_claimed(chunks, fresh)

    async def put_fused(
        self, request_id: str, chunks: Sequence[RetrievedChunk]
    ) -> tuple[list[RetrievedChunk], str]:
        """`put`, and in the same write the list as the steps that resolve it read it
        (`to_resolve`), under its `contexts_claim` field, which it returns: a command to
        such a step carries that field instead of the list."""
        fresh = _passages(chunks)
        claimed = _as_claimed(chunks, fresh)
        field = contexts_claim(chunk.chunk_id for chunk in claimed)
        listed = _RANKING.dump_json(to_resolve(claimed), exclude_defaults=True).decode()
        await self._store(claims_key(request_id), {**fresh, field: listed})
        return claimed, field

    async def resolve(
        self, request_id: str, chunks: Sequence[RetrievedChunk], also: Sequence[str] = ()
    ) -> Resolved:
        """The chunks with their claimed passages whole again, and the fields `also` asks
        for, read with them (each None when it is gone)."""
        wanted = [chunk.chunk_id for chunk in chunks if chunk.claimed]
        if not wanted and not also:
            return Resolved(list(chunks))
        loaded = await self._load(claims_key(request_id), [*wanted, *also])
        return _resolved(chunks, wanted, loaded, also)

    async def resolve_listed(
        self, request_id: str, claim: str, also: Sequence[str] = ()
    ) -> Resolved:
        """`resolve` of the list claimed under `claim` (`put_fused`), read with its passages
        in one round trip (`RESOLVE_LISTED`)."""
        raw, *loaded = await self._load_listed(claims_key(request_id), claim, list(also))
        if raw is None:
            raise ClaimMissing(f"the contexts {claim} is no longer claimed")
        chunks = _RANKING.validate_json(raw)
        return _resolved(chunks, [c.chunk_id for c in chunks if c.claimed], loaded, also)

    async def put_ranking(
        self, request_id: str, command_id: str, chunks: Sequence[RetrievedChunk]
    ) -> str:
        """Claim a channel's ranking (chunk references) for fusion; its field, which the
        search result carries instead of the chunks. Keyed by the command, so a redelivery
        writes the same field again and a later attempt's search never overwrites it."""
        return (await self.put_rankings(request_id, {command_id: chunks}))[command_id]

    async def put_rankings(
        self, request_id: str, rankings: Mapping[str, Sequence[RetrievedChunk]]
    ) -> dict[str, str]:
        """Several rankings in one write, each under its own key (a command id, or a command
        id and a channel for a command that searched several): key -> field."""
        fields = {key: f"ranking:{key}" for key in rankings}
        bodies = {
            fields[key]: _RANKING.dump_json(list(chunks), exclude_defaults=True).decode()
            for key, chunks in rankings.items()
        }
        if bodies:
            await self._store(claims_key(request_id), bodies)
        return fields

    async def rankings(self, request_id: str, fields: Sequence[str]) -> list[list[RetrievedChunk]]:
        """The claimed rankings, in the order of `fields`."""
        if not fields:
            return []
        found = await self._claimed(request_id, list(fields), "the ranking")
        return [_RANKING.validate_json(raw) for raw in found]

    async def whole(self, cmd: CommandT) -> CommandT:
        """A command whose `contexts` (and query vectors) are claimed, whole again: one
        read for both, after one for the list of a command that carries its claim."""
        refs = _vector_refs(cmd)
        fields = sorted(set(refs.values()))
        if cmd.contexts_claim is not None:
            contexts = await self.resolve_listed(cmd.request_id, cmd.contexts_claim, fields)
        else:
            contexts = await self.resolve(cmd.request_id, cmd.contexts, also=fields)
        update: dict[str, Any] = {"contexts": contexts.chunks, "contexts_claim": None}
        if refs:
            update.update(_with_vectors(cmd, refs, contexts.also))
        return cmd.model_copy(update=update)

    async def put_vector(self, request_id: str, text: str, packed: str | None) -> str | None:
        """Claim the embedding of `text`; the claim check that messages carry instead (None
        for no embedding: nothing to claim)."""
        if packed is None:
            return None
        name = vector_field(text)
        await self._store(claims_key(request_id), {name: packed})
        return VECTOR_CLAIM + name

    async def with_vector(self, cmd: AnyCommandT) -> AnyCommandT:
        """A command whose `query_vector` is claimed, with the vector in place (none when it
        is gone); any other command as it is."""
        refs = _vector_refs(cmd)
        if not refs:
            return cmd
        found = await self.resolve(cmd.request_id, (), also=sorted(set(refs.values())))
        return cmd.model_copy(update=_with_vectors(cmd, refs, found.also))

    async def _claimed(self, request_id: str, fields: list[str], what: str) -> list[bytes | str]:
        """The claims under `fields`, in their order; `ClaimMissing` for the first one gone."""
        found = await self._load(claims_key(request_id), fields)
        for field, raw in zip(fields, found, strict=True):
            if raw is None:
                raise ClaimMissing(f"{what} {field} is no longer claimed")
        return [raw for raw in found if raw is not None]

    async def _store(self, key: str, passages: dict[str, str]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping=passages)  # type: ignore[arg-type]
            pipe.expire(key, self.ttl_s)
            await pipe.execute()

    async def _load(self, key: str, chunk_ids: list[str]) -> list[bytes | str | None]:
        return list(await self.redis.hmget(key, chunk_ids))

    async def _load_listed(self, key: str, field: str, also: list[str]) -> list[bytes | str | None]:
        if self._resolve_listed is None:
            self._resolve_listed = self.redis.register_script(RESOLVE_LISTED)
        return list(await self._resolve_listed(keys=[key], args=[field, *also]))
