"""What the chaos run checks of the state Redis keeps, once a run with its primary killed is
over (`ragbus chaos --redis sentinel`): nothing acknowledged before a failover was lost.

- **Idempotency keys**: every key a client was answered under still names its request, read
  from Redis (asking the API again would take quota).
- **Sessions**: every conversation holds every turn its client was answered for.
- **Quotas**: the grants never beat the token bucket. A bucket's state lost in a failover
  would hand out its burst again; the accepted requests' submission times, sorted, must
  satisfy `n ≤ burst + rate × (t_last − t_first) + slack` for every run of `n` of them, where
  the slack (`rate × GRANT_SLACK_S`) covers the moments between a grant and the request's
  record.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import redis.asyncio as aioredis

from bench.chaos_clients import Tracked
from client import RagbusClient
from infra.runtime.redis_client import connect_redis

KeptKey = Callable[[aioredis.Redis, str], Awaitable[str | None]]
"""The request an `Idempotency-Key` of the default tenant names in Redis now (None: no claim):
the CLI hands in the API's own reading (`api.idempotency.Idempotency.kept`)."""
GRANT_SLACK_S = 0.5
CHECKS_AT_ONCE = 16
LISTED = 10


def over_granted(times: Sequence[float], rate: float, burst: int) -> int:
    """The most grants any stretch of time held beyond what the bucket allows (0: never)."""
    ordered = sorted(times)
    worst = 0
    for first in range(len(ordered)):
        for last in range(first, len(ordered)):
            allowed = burst + rate * (ordered[last] - ordered[first] + GRANT_SLACK_S)
            worst = max(worst, int((last - first + 1) - allowed))
    return worst


async def verify_redis_state(
    url: str,
    redis_url: str,
    tracked: Sequence[Tracked],
    kept_key: KeptKey,
    quota: tuple[float, int] | None,
) -> dict[str, Any]:
    answered = [t for t in tracked if t.key]
    redis = connect_redis(redis_url)
    lost_keys: list[str] = []
    lost_turns: list[dict[str, Any]] = []
    created: list[float] = []
    limit = asyncio.Semaphore(CHECKS_AT_ONCE)
    try:
        async with RagbusClient(url, timeout=30) as client:

            async def key(request: Tracked) -> None:
                async with limit:
                    named = await kept_key(redis, request.key)
                    state = await client.status(request.request_id)
                if named != request.request_id:
                    lost_keys.append(request.key)
                created.append(datetime.fromisoformat(state["created_at"]).timestamp())

            await asyncio.gather(*(key(t) for t in answered))
            sessions: dict[str, list[str]] = defaultdict(list)
            for request in answered:
                if request.session_id and request.status == "completed":
                    sessions[request.session_id].append(request.request_id)

            async def session(session_id: str, owed: list[str]) -> None:
                async with limit:
                    view = await client.session(session_id)
                held = [turn["request_id"] for turn in view.get("turns", [])]
                missing = [rid for rid in owed if rid not in held]
                if missing:
                    lost_turns.append({"session": session_id, "missing": missing})

            await asyncio.gather(*(session(s, owed) for s, owed in sessions.items()))
    finally:
        await redis.aclose()
    return {
        "idempotency_keys_checked": len(answered),
        "idempotency_keys_lost": len(lost_keys),
        "idempotency_keys_lost_listed": lost_keys[:LISTED],
        "sessions_checked": len(sessions),
        "sessions_lost_turns": len(lost_turns),
        "sessions_lost_listed": lost_turns[:LISTED],
        "quota": None if quota is None else {"requests_per_s": quota[0], "burst": quota[1]},
        "quota_over_granted": None if quota is None else over_granted(created, *quota),
    }
