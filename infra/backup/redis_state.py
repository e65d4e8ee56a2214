"""Redis's part of a backup: everything ragbus keeps there (saga states and outboxes,
idempotency keys, sessions, quotas, the tenant and user registries, sources), captured at one
point and restored into any Redis, one server or a primary behind sentinels.

- **Capture**: `redis-cli --rdb` asks the primary for the RDB file a replica would get. The
  server forks and writes it at one instant while it goes on serving, so the copy is one
  point of the whole keyspace, and nothing pauses.
- **Restore**: a private `redis-server` on a free loopback port loads the RDB file; every key
  is then copied from it with `DUMP` and `RESTORE … REPLACE` (its remaining time to live
  kept), in batches, into the Redis the settings name, and waited for on a replica there
  (`WAIT`). So the target may be a server of any layout, remote or behind sentinels, and
  needs no access to its files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import redis

from infra.backup.manifest import sha256_of
from infra.config.services import is_sentinel_url, sentinel_target
from infra.runtime.local_process import free_port, redis_binary, wait_until_ready

BATCH = 500
CAPTURE_TIMEOUT_S = 600.0


class RedisBackupError(RuntimeError):
    """A capture or restore that could not be done; the message says why."""


@dataclass(frozen=True)
class RedisCapture:
    path: Path
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Primary:
    host: str
    port: int
    username: str | None
    password: str | None
    db: int


def primary_of(url: str) -> Primary:
    """Where the primary is now: the URL's server, or the one its sentinels name."""
    if is_sentinel_url(url):
        target = sentinel_target(url)
        sentinel = redis.sentinel.Sentinel(
            target.sentinels,
            sentinel_kwargs={
                "username": target.username,
                "password": target.password,
                "socket_timeout": 2.0,
            },
            socket_timeout=2.0,
        )
        try:
            host, port = sentinel.discover_master(target.service)
        except redis.sentinel.MasterNotFoundError as exc:
            raise RedisBackupError(f"no sentinel names a primary for {target.service!r}") from exc
        return Primary(str(host), int(port), target.username, target.password, target.db)
    parsed = urlparse(url)
    db = parsed.path.strip("/") or "0"
    return Primary(
        parsed.hostname or "127.0.0.1",
        parsed.port or 6379,
        unquote(parsed.username) if parsed.username else None,
        unquote(parsed.password) if parsed.password else None,
        int(db) if db.isdigit() else 0,
    )


def _client(primary: Primary) -> redis.Redis:
    return redis.Redis(
        host=primary.host,
        port=primary.port,
        username=primary.username,
        password=primary.password,
        db=primary.db,
        socket_timeout=30.0,
    )


def capture(url: str, path: Path) -> RedisCapture:
    """The primary's RDB file at one point, written to `path` (0600)."""
    primary = primary_of(url)
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    env = {**os.environ}
    if primary.password:
        env["REDISCLI_AUTH"] = primary.password  # not on the command line (`ps` shows that)
    argv = [cli, "-h", primary.host, "-p", str(primary.port), "--rdb", str(path)]
    if primary.username:
        argv[1:1] = ["--user", primary.username]
    path.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=CAPTURE_TIMEOUT_S, check=False
    )
    if done.returncode != 0 or not path.exists():
        raise RedisBackupError(
            f"redis-cli --rdb from {primary.host}:{primary.port} failed: "
            f"{(done.stderr or done.stdout).strip()[-500:]}"
        )
    path.chmod(0o600)
    return RedisCapture(path, path.stat().st_size, sha256_of(path))


def key_count(url: str) -> int:
    """The keys of the URL's database now (a restore refuses a Redis that holds any)."""
    with _client(primary_of(url)) as client:
        return int(client.dbsize())


def restore(url: str, rdb: Path, *, replace: bool = False, wait_replicas: int = 0) -> int:
    """Every key of the RDB file `rdb` into the Redis at `url`; the keys restored. Refused
    when that Redis holds keys already, unless `replace` (then keys of the same name are
    overwritten, others left)."""
    if not replace and (held := key_count(url)):
        raise RedisBackupError(
            f"the Redis to restore into holds {held} keys; restore into an empty one, or "
            "say --replace"
        )
    with tempfile.TemporaryDirectory(prefix="ragbus-restore-redis-") as scratch:
        loader = _load(rdb, Path(scratch))
        try:
            with (
                _client(Primary("127.0.0.1", loader.port, None, None, 0)) as source,
                _client(primary_of(url)) as target,
            ):
                restored = _copy(source, target)
                if wait_replicas:
                    target.wait(wait_replicas, 5000)
        finally:
            loader.process.terminate()
            loader.process.wait(10)
    return restored


@dataclass
class _Loader:
    port: int
    process: subprocess.Popen[bytes]


def _load(rdb: Path, scratch: Path) -> _Loader:
    shutil.copyfile(rdb, scratch / "dump.rdb")
    port = free_port()
    log_path = scratch / "redis-server.log"
    process = subprocess.Popen(
        [
            redis_binary(),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(scratch),
            "--dbfilename", "dump.rdb",
            "--appendonly", "no",
            "--save", "",
            "--logfile", str(log_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip

    def loaded() -> bool:
        try:
            with _client(Primary("127.0.0.1", port, None, None, 0)) as client:
                return int(client.info("persistence").get("loading", 1)) == 0
        except redis.RedisError:
            return False

    wait_until_ready(loaded, "redis-server (loading the backup)", process, log_path, 120.0)
    return _Loader(port, process)


def _copy(source: redis.Redis, target: redis.Redis) -> int:
    restored = 0
    cursor = 0
    while True:
        cursor, keys = source.scan(cursor, count=BATCH)
        if keys:
            read = source.pipeline(transaction=False)
            for key in keys:
                read.dump(key)
                read.pttl(key)
            values = read.execute()
            write = target.pipeline(transaction=False)
            for index, key in enumerate(keys):
                payload, ttl = values[2 * index], values[2 * index + 1]
                if payload is None or ttl == -2:  # expired between the scan and the dump
                    continue
                write.restore(key, max(int(ttl), 0), payload, replace=True)
                restored += 1
            write.execute()
        if cursor == 0:
            return restored
