"""One way to open Redis, for every process: connections that survive a Redis restart.

A pooled connection to a Redis that restarted is dead, and redis-py finds out only when a
command fails on it. So every client here retries a command that failed on the connection
(after 50 ms, then 100 ms, on a fresh connection), PINGs a connection that sat idle for longer
than `HEALTH_CHECK_S` before using it, and gives up on connecting after `CONNECT_TIMEOUT_S`:
when Redis is back, the next command works; while it is down, a command fails within about
a second, which the API answers with 503 and `Retry-After`.

The pool holds at most `POOL_CONNECTIONS` connections, and a command that finds them all busy
waits up to `POOL_WAIT_S` for one (`BlockingConnectionPool`): redis-py's default pool refuses
the 101st concurrent command with "Too many connections", so one tenant's burst of 200
parallel downloads answered 503 to everyone else's requests of that moment.

Redis with failover is reached through its sentinels: `RAGBUS_REDIS_URL` is then
`redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE[/DB]`, and the client asks the
sentinels where the primary is, and asks again when it fails over (redis-py's `Sentinel`).
The writes that matter (a saga's commit, an idempotency key, a session's turn, a quota's grant)
are followed by `WAIT` on the same connection (`infra.replication.replicated`): the caller
hears of a write only once a replica holds it too, so a primary that dies right after takes
nothing acknowledged with it (docs/operations.md, "Redis with failover").
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import cast
from urllib.parse import quote, urlparse

import redis.asyncio as aioredis
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from infra.config.services import ServiceSettings, is_sentinel_url, sentinel_target
from infra.replication import RagbusRedis, WaitPolicy

RETRIES = 2
CONNECT_TIMEOUT_S = 1.0
COMMAND_TIMEOUT_S = 10.0
HEALTH_CHECK_S = 15
RETRY_AFTER_S = 2
"""What a caller is told to wait while Redis is unreachable."""
POOL_CONNECTIONS = 256
POOL_WAIT_S = 5.0

UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError)
"""What Redis raises when it cannot be reached (or stops answering), as opposed to a bad
command: the API answers these with 503."""


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """The sentinels' pool (it asks them where the primary is) with the blocking pool's wait
    for a free connection (see the module's docstring)."""


def connect_redis(
    url: str, *, wait_replicas: int | None = None, wait_timeout_ms: int = 1000
) -> aioredis.Redis:
    """A client whose pool heals itself after Redis restarts (or fails over, through its
    sentinels), and makes a burst wait for a connection rather than fail (see the module's
    docstring). `wait_replicas`: how many replicas a write that matters waits for (`None`: one
    behind sentinels, none otherwise)."""
    options = {
        "max_connections": POOL_CONNECTIONS,
        "timeout": POOL_WAIT_S,
        "decode_responses": True,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), RETRIES),
        "retry_on_error": list(UNAVAILABLE_ERRORS),
        "health_check_interval": HEALTH_CHECK_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": COMMAND_TIMEOUT_S,
        "socket_keepalive": True,
    }
    client: RagbusRedis
    if is_sentinel_url(url):
        target = sentinel_target(url)
        credentials = {"username": target.username, "password": target.password}
        sentinel = Sentinel(
            target.sentinels,
            sentinel_kwargs={
                **credentials,
                "socket_timeout": CONNECT_TIMEOUT_S,
                "socket_connect_timeout": CONNECT_TIMEOUT_S,
                "decode_responses": True,
            },
        )
        client = sentinel.master_for(
            target.service,
            redis_class=RagbusRedis,
            connection_pool_class=_BlockingSentinelPool,
            db=target.db,
            **credentials,
            **options,
        )
        replicas = 1 if wait_replicas is None else wait_replicas
    else:
        pool = BlockingConnectionPool.from_url(url, **options)
        client = cast(RagbusRedis, RagbusRedis.from_pool(pool))
        replicas = 0 if wait_replicas is None else wait_replicas
    if replicas > 0:
        client.wait_policy = WaitPolicy(replicas, wait_timeout_ms)
    return client


def redis_for(settings: ServiceSettings) -> aioredis.Redis:
    """`connect_redis` as the settings say: the URL and how long a write that matters waits."""
    return connect_redis(
        settings.redis_url,
        wait_replicas=settings.redis_wait_replicas,
        wait_timeout_ms=settings.redis_wait_timeout_ms,
    )


PASSWORD_FILE = "password"
"""In the data directory of a redis-server that ragbus starts (`infra.runtime.services`): its
`requirepass`, made once per directory, mode 0600."""


def started_redis_password(redis_dir: Path, *, create: bool = False) -> str | None:
    """The password of the redis-server ragbus starts with its data in `redis_dir`; made (and
    kept, readable by this user alone) when `create` and there is none yet."""
    path = redis_dir / PASSWORD_FILE
    if path.exists():
        return path.read_text().strip() or None
    if not create:
        return None
    redis_dir.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: theirs is the one
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def with_password(url: str, password: str) -> str:
    """`redis://host:port/db` as `redis://:PASSWORD@host:port/db`."""
    parsed = urlparse(url)
    host = parsed.netloc.rsplit("@", 1)[-1]
    user = quote(parsed.username, safe="") if parsed.username else ""
    return parsed._replace(netloc=f"{user}:{quote(password, safe='')}@{host}").geturl()


def _asks_for_password(url: str, timeout: float = 1.0) -> bool:
    if is_sentinel_url(url):
        host, port = sentinel_target(url).sentinels[0]
    else:
        parsed = urlparse(url)
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"-NOAUTH")
    except OSError:
        return False


def started_redis_url(url: str, redis_dir: Path) -> str:
    """`url`, or, when it names no password and the Redis there asks for one that a
    redis-server ragbus started with its data in `redis_dir` keeps (`ragbus up` of the same
    data directory, still running), `url` with that password: how another command of the same
    data directory (`ragbus tenant …`, a second `ragbus up`) reaches it."""
    if urlparse(url).password is not None:
        return url
    password = started_redis_password(redis_dir)
    if password is None or not _asks_for_password(url):
        return url
    return with_password(url, password)
