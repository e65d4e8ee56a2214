"""One way to open Redis, for every process: connections that survive a Redis restart.

A pooled connection to a Redis that restarted is dead, and redis-py finds out only when a
command fails on it. So every client here retries a command that failed on the connection
(after 50 ms, then 100 ms, on a fresh connection), PINGs a connection that sat idle for longer
than `HEALTH_CHECK_S` before using it, and gives up on connecting after `CONNECT_TIMEOUT_S`:
when Redis is back, the next command works; while it is down, a command fails within about
a second, which the API answers with 503 and `Retry-After`.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

RETRIES = 2
CONNECT_TIMEOUT_S = 1.0
COMMAND_TIMEOUT_S = 10.0
HEALTH_CHECK_S = 15
RETRY_AFTER_S = 2
"""What a caller is told to wait while Redis is unreachable."""

UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError)
"""What Redis raises when it cannot be reached (or stops answering), as opposed to a bad
command: the API answers these with 503."""


def connect_redis(url: str) -> aioredis.Redis:
    """A client whose pool heals itself after Redis restarts (see the module's docstring)."""
    return aioredis.from_url(
        url,
        decode_responses=True,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), RETRIES),
        retry_on_error=list(UNAVAILABLE_ERRORS),
        health_check_interval=HEALTH_CHECK_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=COMMAND_TIMEOUT_S,
        socket_keepalive=True,
    )
