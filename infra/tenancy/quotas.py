"""Per-tenant limits: a request rate, and the documents, namespaces and bytes kept.

The rate is a GCRA (generic cell rate algorithm: a token bucket kept as one timestamp) in one
Lua call per submission, so every API replica shares it and nothing drifts. A submission takes
one token, except a research request, which takes one for itself and one for every child
request it may start (`submission_cost`): its children are submitted by the saga, not the API,
so they are charged up front, when their parent is admitted. The stock limits
are counted when a batch is accepted (a document re-sent under its id counts once, with its
new size) and given back when a document is deleted, atomically with the check, so two
concurrent batches cannot both squeeze under a limit.

`limits` (the library slowapi uses) was the alternative; its asyncio Redis storage needs
`coredis`, a second Redis client, for what are two short scripts here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, cast

import redis.asyncio as aioredis

from infra.replication import replicated
from infra.settings import Settings
from infra.tenancy.registry import Limits

_RATE = """
-- KEYS: the tenant's theoretical arrival time; ARGV: emission interval (s), burst, cost (tokens)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local interval, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + interval * cost
local allow_at = next_tat - burst * interval
if now < allow_at then return tostring(allow_at - now) end
redis.call('SET', KEYS[1], tostring(next_tat), 'PX', math.ceil((next_tat - now) * 1000) + 1)
return '0'
"""

_ACCEPT = """
-- KEYS: documents (field "<ns>/<id>" -> bytes), namespaces (ns -> documents), totals
-- ARGV: max documents, max namespaces, max bytes, then (namespace, document id, bytes)...
local docs, spaces, totals = KEYS[1], KEYS[2], KEYS[3]
local max_docs, max_ns, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local add_docs, add_bytes, new_ns, seen = 0, 0, {}, {}
for i = 4, #ARGV, 3 do
  local ns, id, size = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local field = ns .. '/' .. id
  if not seen[field] then
    seen[field] = true
    local old = redis.call('HGET', docs, field)
    if old then add_bytes = add_bytes + size - tonumber(old)
    else
      add_docs = add_docs + 1
      add_bytes = add_bytes + size
      if not new_ns[ns] and not redis.call('HGET', spaces, ns) then new_ns[ns] = true end
    end
  end
end
local ns_count = redis.call('HLEN', spaces)
for _ in pairs(new_ns) do ns_count = ns_count + 1 end
local doc_count = redis.call('HLEN', docs) + add_docs
local bytes = tonumber(redis.call('HGET', totals, 'bytes') or '0') + add_bytes
if doc_count > max_docs then return {'documents', doc_count, max_docs} end
if ns_count > max_ns then return {'namespaces', ns_count, max_ns} end
if bytes > max_bytes then return {'bytes', bytes, max_bytes} end
for i = 4, #ARGV, 3 do
  local ns, id = ARGV[i], ARGV[i + 1]
  local field = ns .. '/' .. id
  if redis.call('HSET', docs, field, ARGV[i + 2]) == 1 then
    redis.call('HINCRBY', spaces, ns, 1)
  end
end
redis.call('HSET', totals, 'bytes', bytes)
return {'ok', doc_count, 0}
"""

_RELEASE = """
-- KEYS: documents, namespaces, totals; ARGV: namespace, document id
local field = ARGV[1] .. '/' .. ARGV[2]
local old = redis.call('HGET', KEYS[1], field)
if not old then return 0 end
redis.call('HDEL', KEYS[1], field)
redis.call('HINCRBY', KEYS[3], 'bytes', -tonumber(old))
if redis.call('HINCRBY', KEYS[2], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[2], ARGV[1]) end
return 1
"""

Stock = Literal["documents", "namespaces", "bytes"]


def research_cost(settings: Settings) -> int:
    """What a research request takes from its tenant's rate: 1 for itself and 1 for each child
    request it may start, RAGBUS_RESEARCH_MAX_CHILDREN sub-questions at each of
    RAGBUS_RESEARCH_MAX_DEPTH levels (4 and 1 by default: 5)."""
    breadth, depth = settings.research_max_children, settings.research_max_depth
    return 1 + sum(breadth**level for level in range(1, depth + 1))


def submission_cost(settings: Settings, mode: str) -> int:
    """Tokens a submission of this mode takes: `research_cost` for research, else 1."""
    return research_cost(settings) if mode == "research" else 1


@dataclass(frozen=True)
class Effective:
    """A tenant's limits after its own overrides of the settings'."""

    requests_per_s: float
    burst: int
    documents: int
    namespaces: int
    bytes: int
    sources: int


def effective(settings: Settings, own: Limits | None = None) -> Effective:
    own = own or Limits()
    return Effective(
        requests_per_s=own.requests_per_s
        if own.requests_per_s is not None
        else settings.quota_requests_per_s,
        burst=own.burst if own.burst is not None else settings.quota_burst,
        documents=own.documents if own.documents is not None else settings.quota_documents,
        namespaces=own.namespaces if own.namespaces is not None else settings.quota_namespaces,
        bytes=own.bytes if own.bytes is not None else settings.quota_bytes,
        sources=own.sources if own.sources is not None else settings.quota_sources,
    )


class RateLimited(Exception):
    def __init__(self, retry_after_s: float, limit: float, cost: int = 1) -> None:
        counts = f" (this one counts as {cost})" if cost > 1 else ""
        super().__init__(f"over {limit:g} submissions per second{counts}")
        self.retry_after_s = retry_after_s
        self.cost = cost


class QuotaExceeded(Exception):
    def __init__(self, stock: Stock, would_be: int, limit: int) -> None:
        super().__init__(f"{stock} would be {would_be:,}, over the tenant's limit of {limit:,}")
        self.stock = stock


@dataclass(frozen=True)
class DocumentSize:
    namespace: str
    document_id: str
    bytes: int


def _keys(tenant: str) -> list[str]:
    base = f"ragbus:usage:{{{tenant}}}"
    return [f"{base}:documents", f"{base}:namespaces", f"{base}:totals"]


UNLIMITED: Final = 2**62


class Quotas:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._rate = redis.register_script(_RATE)
        self._accept = redis.register_script(_ACCEPT)
        self._release = redis.register_script(_RELEASE)

    async def take_submission(self, tenant: str, limits: Effective, cost: int = 1) -> None:
        """`cost` submissions' worth of the rate (`submission_cost`), all or none, or
        `RateLimited` with when to come back. A cost over the tenant's burst is taken as the
        burst: a full bucket always admits it."""
        if limits.requests_per_s <= 0:
            return
        cost = max(1, min(cost, limits.burst))
        wait = float(
            await replicated(
                self.redis,
                lambda client: self._rate(
                    keys=[f"ragbus:rate:{{{tenant}}}"],
                    args=[repr(1.0 / limits.requests_per_s), str(limits.burst), str(cost)],
                    client=client,
                ),
                "quota_rate",
            )
        )
        if wait > 0:
            raise RateLimited(wait, limits.requests_per_s, cost)

    async def accept_documents(
        self, tenant: str, documents: list[DocumentSize], limits: Effective
    ) -> None:
        """Count a batch in, whole, or refuse it whole with `QuotaExceeded`."""
        argv: list[str] = [
            str(limits.documents or UNLIMITED),
            str(limits.namespaces or UNLIMITED),
            str(limits.bytes or UNLIMITED),
        ]
        for doc in documents:
            argv += [doc.namespace, doc.document_id, str(doc.bytes)]
        outcome = await replicated(
            self.redis,
            lambda client: self._accept(keys=_keys(tenant), args=argv, client=client),
            "quota_documents",
        )
        what, would_be, limit = str(outcome[0]), int(outcome[1]), int(outcome[2])
        if what != "ok":
            raise QuotaExceeded(cast(Stock, what), would_be, limit)

    async def free_bytes(self, tenant: str, limits: Effective) -> int:
        """The bytes the tenant may still keep (`UNLIMITED` without a limit)."""
        if not limits.bytes:
            return UNLIMITED
        kept = await self.redis.hget(_keys(tenant)[2], "bytes")
        return max(0, limits.bytes - int(kept or 0))

    async def kept_bytes(self, tenant: str, namespace: str, document_id: str) -> int:
        """What one of the tenant's documents counts now (0 for one it does not keep)."""
        size = await self.redis.hget(_keys(tenant)[0], f"{namespace}/{document_id}")
        return int(size or 0)

    async def release_document(self, tenant: str, namespace: str, document_id: str) -> None:
        await self._release(keys=_keys(tenant), args=[namespace, document_id])

    async def usage(self, tenant: str) -> dict[str, int]:
        documents, namespaces, totals = _keys(tenant)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hlen(documents)
            pipe.hlen(namespaces)
            pipe.hget(totals, "bytes")
            docs, spaces, size = await pipe.execute()
        return {"documents": int(docs), "namespaces": int(spaces), "bytes": int(size or 0)}

    async def namespaces(self, tenant: str) -> dict[str, int]:
        """The tenant's store namespaces and how many documents each keeps (the ledger the
        limits count is also the tenant's catalogue)."""
        raw = await self.redis.hgetall(_keys(tenant)[1])
        return {str(name): int(count) for name, count in raw.items()}

    async def documents(self, tenant: str, namespace: str, limit: int | None) -> list[DocumentSize]:
        """Up to `limit` (None: all) of the documents the tenant keeps in a store namespace,
        by id."""
        found: list[DocumentSize] = []
        pattern = _glob_escape(namespace) + "/*"
        async for field, size in self.redis.hscan_iter(_keys(tenant)[0], match=pattern, count=500):
            found.append(DocumentSize(namespace, str(field).split("/", 1)[1], int(size)))
        found.sort(key=lambda doc: doc.document_id)
        return found if limit is None else found[:limit]


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
