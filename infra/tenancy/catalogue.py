"""What the catalogue (`GET /v1/documents`) shows of a document beyond its id and size: its
metadata as it was indexed, and a filter over it (`contracts.filters`).

The ingest worker writes a document's metadata here once its chunks are stored, and removes
it with the document; the API reads it beside the tenant's ledger of documents
(`infra.tenancy.quotas`), which stays the catalogue's list. One Redis hash per store namespace
(which names its tenant): field the document id, value its metadata as JSON. Its size is
bounded by the ledger's: a tenant's document limit times `MAX_METADATA_CHARS` at most.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

READ_BATCH = 500
"""Documents whose metadata one `HMGET` reads."""


def metadata_key(namespace: str) -> str:
    return f"ragbus:doc-meta:{{{namespace}}}"


class DocumentMetadata:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def put(self, namespace: str, document_id: str, metadata: Mapping[str, Any]) -> None:
        await self.redis.hset(metadata_key(namespace), document_id, json.dumps(dict(metadata)))

    async def drop(self, namespace: str, document_id: str) -> None:
        await self.redis.hdel(metadata_key(namespace), document_id)

    async def read(self, namespace: str, document_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The metadata of each of `document_ids` that has some recorded."""
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(document_ids), READ_BATCH):
            batch = list(document_ids[start : start + READ_BATCH])
            values = await self.redis.hmget(metadata_key(namespace), batch)
            for document_id, raw in zip(batch, values, strict=True):
                if raw is not None:
                    found[document_id] = json.loads(raw)
        return found
