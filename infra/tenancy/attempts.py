"""Wrong keys slow their sender down: a count of failed key attempts per client address, in
Redis, shared by every API process.

An address may offer `RAGBUS_AUTH_FAILURE_LIMIT` wrong keys (a tenant's API key, the API
token, the admin or metrics token) within `RAGBUS_AUTH_FAILURE_WINDOW_S`; each wrong key after
that shuts the address out for twice as long as the one before (1 s, 2 s, 4 s … up to the
window). While it is shut out, every key it offers, a right one too, is answered 429 with
`Retry-After` before it is checked: a guess that happens to be right tells the guesser
nothing. The count is per address, never per tenant or key, so a flood of wrong keys from one
address cannot lock a tenant out of its own key elsewhere. An IPv6 address counts by its /64,
which one machine usually holds whole.

- `ragbus:auth:{<address>}:failures`: the count, forgotten a window after its latest failure;
- `ragbus:auth:{<address>}:blocked`: present, with its expiry, while the address waits.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Final

import redis.asyncio as aioredis

KEY_PREFIX: Final = "ragbus:auth:"

_RECORD = """
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
local over = n - tonumber(ARGV[2])
if over > 0 then
  local ms = math.min(1000 * 2 ^ math.min(over - 1, 40), tonumber(ARGV[1]))
  redis.call('SET', KEYS[2], '1', 'PX', math.floor(ms))
  return math.floor(ms)
end
return 0
"""


def client_key(address: str | None) -> str:
    """The address as counted: an IPv6 address by its /64, anything else as it is."""
    if not address:
        return "unknown"
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


class Attempts:
    def __init__(self, redis: aioredis.Redis, limit: int, window_s: float) -> None:
        self.redis = redis
        self.limit = limit
        self.window_ms = max(1, int(window_s * 1000))

    @property
    def on(self) -> bool:
        return self.limit > 0

    def _keys(self, address: str | None) -> tuple[str, str]:
        tag = f"{KEY_PREFIX}{{{client_key(address)}}}"
        return f"{tag}:failures", f"{tag}:blocked"

    async def wait_s(self, address: str | None) -> int:
        """Seconds the address must still wait before a key of its is checked (0: none)."""
        if not self.on:
            return 0
        left_ms = await self.redis.pttl(self._keys(address)[1])
        return math.ceil(left_ms / 1000) if left_ms > 0 else 0

    async def failed(self, address: str | None) -> int:
        """Count a wrong key from the address; the seconds it is now shut out for (0: none)."""
        if not self.on:
            return 0
        failures, blocked = self._keys(address)
        shut_ms = await self.redis.eval(_RECORD, 2, failures, blocked, self.window_ms, self.limit)
        return math.ceil(int(shut_ms) / 1000)
