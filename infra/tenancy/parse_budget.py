"""A tenant's budget of parsing: pages and parser seconds an hour (every tenant but the
default one, the install's own).

Fair turns (`infra.runtime.fair_slots`) keep one tenant from holding another back; the budget
bounds what a tenant takes of the parsers when no one else is waiting, so that a flood of
image-only PDFs costs its tenant hours of waiting rather than the operator hours of OCR. Each
is a bucket that holds an hour's worth (RAGBUS_TENANT_PARSE_PAGES_PER_HOUR,
RAGBUS_TENANT_PARSE_SECONDS_PER_HOUR) and refills continuously, kept in Redis as one
timestamp per bucket (the same generic cell rate algorithm as the request rate,
`infra.tenancy.quotas`), so every parse worker shares it. A parse is charged once it is done,
with the pages and seconds it took (they are not known before); a tenant past either bucket's
hour waits (`wait_s`) until it is back within it: its files wait in its lane, unparsed and
not failed, and its job's watchers are told why.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

WINDOW_S = 3600.0

_WAIT = """
-- KEYS: the buckets' theoretical arrival times; ARGV: the window (s)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local window, wait = tonumber(ARGV[1]), 0
for _, key in ipairs(KEYS) do
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat - now - window > wait then wait = tat - now - window end
end
return tostring(wait)
"""

_CHARGE = """
-- KEYS: the buckets; ARGV: the window (s), then each bucket's seconds of budget a unit and
-- the units spent
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local window = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local per, spent = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  if per > 0 and spent > 0 then
    local tat = tonumber(redis.call('GET', key) or '0')
    if tat < now then tat = now end
    tat = tat + per * spent
    redis.call('SET', key, tostring(tat), 'PX', math.ceil((tat - now) * 1000) + 1)
  end
end
return 'ok'
"""


@dataclass(frozen=True)
class Budget:
    pages_per_hour: int
    seconds_per_hour: float

    @property
    def on(self) -> bool:
        return self.pages_per_hour > 0 or self.seconds_per_hour > 0

    def describe(self) -> str:
        parts = []
        if self.pages_per_hour > 0:
            parts.append(f"{self.pages_per_hour:,} pages")
        if self.seconds_per_hour > 0:
            parts.append(f"{self.seconds_per_hour:,.0f} parser seconds")
        return " and ".join(parts) + " an hour"


def _keys(tenant: str) -> list[str]:
    base = f"ragbus:parse-budget:{{{tenant}}}"
    return [f"{base}:pages", f"{base}:seconds"]


class ParseBudgets:
    def __init__(self, redis: aioredis.Redis, budget: Budget) -> None:
        self.budget = budget
        self._wait = redis.register_script(_WAIT)
        self._charge = redis.register_script(_CHARGE)

    async def wait_s(self, tenant: str) -> float:
        """How long the tenant must wait before its next parse (0: now)."""
        if not self.budget.on:
            return 0.0
        return float(await self._wait(keys=_keys(tenant), args=[repr(WINDOW_S)]))

    async def charge(self, tenant: str, pages: int, seconds: float) -> None:
        """Count a parse done against the tenant's buckets."""
        if not self.budget.on:
            return
        per_page = WINDOW_S / self.budget.pages_per_hour if self.budget.pages_per_hour else 0
        per_second = WINDOW_S / self.budget.seconds_per_hour if self.budget.seconds_per_hour else 0
        args = [repr(WINDOW_S), repr(per_page), str(max(pages, 1)), repr(per_second)]
        args.append(repr(max(seconds, 0.0)))
        await self._charge(keys=_keys(tenant), args=args)
