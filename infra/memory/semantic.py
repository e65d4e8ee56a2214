"""Semantic memory: what a scope learned, embedded for recall by the `memory` channel.

A scope is one session (the default) or one tenant (`RAGBUS_MEMORY_SCOPE=tenant`). Each scope
has a collection of its own in a vector store apart from the documents' (its own directory
under the data directory, or its own collection prefix on a Qdrant server), so a memory can
only be found from its scope: the channel searches the scope's collection and nothing else.

Beside the vectors, Redis keeps the scope's index of memories (id -> what was remembered).
It is what the API lists and deletes, from any process, and the channel drops a hit the index
no longer has: a deleted memory is never recalled, even before the memory worker has removed
its vector.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import redis.asyncio as aioredis

from contracts.models import RetrievedChunk
from contracts.sessions import MEMORY_PREFIX
from infra.retrieval.chunking import Chunk
from infra.retrieval.vectors.base import VectorStore

MemoryKind = Literal["answer", "fact"]


def scope_of(tenant: str, session_id: str | None, scope: str) -> str | None:
    """The memory scope of a request: its session's, or its tenant's; None when a session
    scope is configured and the request has no session."""
    if scope == "tenant":
        return f"{tenant}/tenant"
    return f"{tenant}/session/{session_id}" if session_id else None


def scope_namespace(scope: str) -> str:
    """The scope's collection: a digest, so no caller-chosen text names a directory."""
    return "mem-" + hashlib.sha256(scope.encode()).hexdigest()[:32]


def index_key(scope: str) -> str:
    return f"ragbus:memory:{{{scope}}}"


@dataclass(frozen=True)
class Memory:
    memory_id: str
    kind: MemoryKind
    text: str
    """What the memory channel cites: an answer's text, or the fact the user stated."""
    title: str
    request_id: str
    created_at: float
    question: str = ""
    """An answer's question (standalone): embedded with it, so a later question finds it, but
    never part of `text`, so it is never cited. Empty for a fact, and for an answer made before
    the two were kept apart (its `text` then starts with the question's line)."""

    @property
    def recall_text(self) -> str:
        """What is embedded for recall: the question and its answer, or the fact."""
        return f"{self.question}\n{self.text}" if self.question else self.text

    def chunk(self, namespace: str) -> Chunk:
        return Chunk(
            chunk_id=self.memory_id,
            document_id=MEMORY_PREFIX + self.memory_id,
            namespace=namespace,
            title=self.title,
            source=MEMORY_PREFIX + self.kind,
            index=0,
            text=self.text,
        )


def new_memory(
    kind: MemoryKind, text: str, title: str, request_id: str, question: str = ""
) -> Memory:
    # stable per request and kind: a redelivered turn overwrites its memory, never doubles it
    memory_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"ragbus/memory/{request_id}/{kind}"))
    return Memory(memory_id, kind, text, title, request_id, time.time(), question)


ADD_UNLESS_FORGOTTEN = """
local forgotten = redis.call('GET', KEYS[2])
if forgotten and tonumber(ARGV[4]) <= tonumber(forgotten) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""
"""KEYS: the scope's index, the session's forgotten marker (`infra.memory.sessions`). ARGV: the
memory's id, its JSON, the index's TTL, when its question was asked. The two keys hash to
different slots: ragbus runs on one Redis, not a cluster."""


class MemoryIndex:
    """The Redis side: what each scope remembers, listable and deletable from any process."""

    def __init__(self, redis: aioredis.Redis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self._add = redis.register_script(ADD_UNLESS_FORGOTTEN)

    async def add(
        self, scope: str, memory: Memory, *, forgotten_marker: str, asked_at: float
    ) -> bool:
        """Index the memory unless its session was forgotten after the question that taught
        it was asked (`forgotten_marker` holds when). One script, so a forget either comes
        after the add and clears it, or before it and refuses it: a forgotten session's memory
        is never listed, not even for a moment. Returns whether it was added."""
        added = await self._add(
            keys=[index_key(scope), forgotten_marker],
            args=[memory.memory_id, json.dumps(asdict(memory)), self.ttl_s, repr(asked_at)],
        )
        return bool(added)

    async def list(self, scope: str) -> list[Memory]:
        raw = await self.redis.hgetall(index_key(scope))
        memories = [Memory(**json.loads(value)) for value in raw.values()]
        return sorted(memories, key=lambda m: m.created_at)

    async def count(self, scope: str) -> int:
        return int(await self.redis.hlen(index_key(scope)))

    async def get(self, scope: str, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories of these ids the index still has (a deleted one is not)."""
        if not memory_ids:
            return {}
        found = await self.redis.hmget(index_key(scope), list(memory_ids))
        return {
            mid: Memory(**json.loads(value))
            for mid, value in zip(memory_ids, found, strict=True)
            if value
        }

    async def delete(self, scope: str, memory_id: str) -> bool:
        return bool(await self.redis.hdel(index_key(scope), memory_id))

    async def clear(self, scope: str) -> int:
        key = index_key(scope)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hlen(key)
            pipe.delete(key)
            count, _ = await pipe.execute()
        return int(count)


class MemoryVectors:
    """The vector side: one collection per scope in a store of its own."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def add(self, scope: str, memory: Memory, vector: np.ndarray) -> None:
        namespace = scope_namespace(scope)
        empty_sparse: tuple[list[int], list[float]] = ([], [])
        self.store.upsert_chunks(
            namespace,
            [memory.chunk(namespace)],
            np.asarray(vector, dtype=np.float32).reshape(1, -1),
            [empty_sparse],
            content_hash=memory.memory_id,
        )

    def search(self, scope: str, vector: np.ndarray, top_k: int) -> list[RetrievedChunk]:
        return self.store.search_dense([scope_namespace(scope)], vector, top_k)

    def texts(self, chunks: Sequence[RetrievedChunk]) -> list[RetrievedChunk]:
        """The hits with their text (memories are short; the channel ships them whole, since
        fusion hydrates from the documents' store, which does not hold them)."""
        return self.store.hydrate(chunks)

    def delete(self, scope: str, memory_id: str) -> None:
        self.store.delete_document(scope_namespace(scope), MEMORY_PREFIX + memory_id)

    def drop(self, scope: str) -> None:
        self.store.drop_namespace(scope_namespace(scope))
