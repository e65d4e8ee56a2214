"""A conversation's turns in Redis, per tenant and session.

Two keys per session, hash-tagged together: a sorted set of request ids scored by submission
time (the conversation's order, whatever order the answers come back in) and a hash of the
turns themselves. Every write is one Lua script that writes one turn's field, never a whole
list read and written back, so concurrent requests of a session cannot lose each other's
turns. Each write also drops the turns past `session_max_turns` or older than
`session_ttl_s`, and keeps both keys alive for `session_ttl_s` after the latest turn.

Forgetting a session deletes both keys and leaves a marker of when: a request that was still
running then and finishes later does not bring its turn back.
"""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from contracts.sessions import SessionTurn
from infra.replication import replicated
from infra.settings import Settings

_TRIM = """
local function trim(order, turns, cutoff, keep)
  local old = redis.call('ZRANGEBYSCORE', order, '-inf', '(' .. cutoff)
  local extra = redis.call('ZRANGE', order, 0, -keep - 1)
  for _, list in ipairs({old, extra}) do
    for _, id in ipairs(list) do
      redis.call('ZREM', order, id)
      redis.call('HDEL', turns, id)
    end
  end
end
"""

WRITE = (
    _TRIM
    + """
local forgotten = redis.call('GET', KEYS[3])
if forgotten and tonumber(ARGV[2]) <= tonumber(forgotten) then return 0 end
if ARGV[6] == '1' then
  if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[3]) == 0 then return 0 end
else
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
trim(KEYS[1], KEYS[2], ARGV[4], tonumber(ARGV[5]))
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('EXPIRE', KEYS[2], ARGV[7])
return 1
"""
)
"""KEYS: order, turns, forgotten marker. ARGV: request id, submitted_at, the turn's JSON, the
age cutoff, the turns to keep, '1' to write only a turn not recorded yet, the TTL. Returns 1
when written."""

FORGET = """
local count = redis.call('ZCARD', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[2])
return count
"""
"""KEYS: order, turns, forgotten marker. ARGV: now, the marker's TTL. Returns the turns
there were."""


def _tag(tenant: str, session_id: str) -> str:
    return f"ragbus:session:{{{tenant}/{session_id}}}"


def order_key(tenant: str, session_id: str) -> str:
    return f"{_tag(tenant, session_id)}:order"


def turns_key(tenant: str, session_id: str) -> str:
    return f"{_tag(tenant, session_id)}:turns"


def forgotten_key(tenant: str, session_id: str) -> str:
    return f"{_tag(tenant, session_id)}:forgotten"


class SessionStore:
    def __init__(self, redis: aioredis.Redis, *, max_turns: int, ttl_s: int) -> None:
        self.redis = redis
        self.max_turns = max_turns
        self.ttl_s = ttl_s
        self._write = redis.register_script(WRITE)
        self._forget = redis.register_script(FORGET)

    @classmethod
    def from_settings(cls, redis: aioredis.Redis, settings: Settings) -> SessionStore:
        return cls(redis, max_turns=settings.session_max_turns, ttl_s=settings.session_ttl_s)

    def _keys(self, tenant: str, session_id: str) -> list[str]:
        return [
            order_key(tenant, session_id),
            turns_key(tenant, session_id),
            forgotten_key(tenant, session_id),
        ]

    async def _put(self, tenant: str, session_id: str, turn: SessionTurn, *, new: bool) -> bool:
        written = await replicated(
            self.redis,
            lambda client: self._write(
                keys=self._keys(tenant, session_id),
                args=[
                    turn.request_id,
                    repr(turn.submitted_at),
                    turn.model_dump_json(),
                    repr(time.time() - self.ttl_s),
                    self.max_turns,
                    "1" if new else "0",
                    self.ttl_s,
                ],
                client=client,
            ),
            "session_turn",
        )
        return bool(written)

    async def begin(self, tenant: str, session_id: str, turn: SessionTurn) -> bool:
        """Record a question as it is accepted (no answer yet); a turn already recorded (the
        request finished first) is left as it is."""
        return await self._put(tenant, session_id, turn, new=True)

    async def finish(self, tenant: str, session_id: str, turn: SessionTurn) -> bool:
        """Record a finished turn, in its place by submission time; False when the session
        was forgotten after the question was asked (or the turn is too old to keep)."""
        return await self._put(tenant, session_id, turn, new=False)

    async def turns(
        self,
        tenant: str,
        session_id: str,
        *,
        before: float | None = None,
        limit: int | None = None,
    ) -> list[SessionTurn]:
        """The session's turns in submission order: all of them, or the last `limit` asked
        strictly before `before`."""
        high = "+inf" if before is None else f"({before!r}"
        low = repr(time.time() - self.ttl_s)
        found = await self.redis.zrangebyscore(order_key(tenant, session_id), low, high)
        ids = [str(member) for member in found]
        if limit is not None:
            ids = ids[-limit:] if limit > 0 else []
        if not ids:
            return []
        raws = await self.redis.hmget(turns_key(tenant, session_id), ids)
        return [SessionTurn.model_validate_json(raw) for raw in raws if raw]

    async def exists(self, tenant: str, session_id: str) -> bool:
        """Whether the session has a turn (one recent enough to be kept)."""
        low = repr(time.time() - self.ttl_s)
        return bool(await self.redis.zcount(order_key(tenant, session_id), low, "+inf"))

    async def forget(self, tenant: str, session_id: str) -> int:
        """Delete the session's turns; returns how many there were."""
        count = await self._forget(
            keys=self._keys(tenant, session_id), args=[repr(time.time()), self.ttl_s]
        )
        return int(count)
