"""Redis's part of a backup (`infra.backup.redis_state`), on real servers: the keyspace is
captured at one point while it is written to, and restored into a fresh Redis behind
sentinels with every kind of value and its time to live; a Redis that holds keys is refused
unless told to replace them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from infra.backup.redis_state import RedisBackupError, capture, key_count, primary_of, restore
from infra.runtime.redis_sentinel import RedisSentinelSet
from infra.runtime.services import LocalService, free_port, start_redis

pytestmark = pytest.mark.integration


@pytest.fixture
def source(tmp_path: Path) -> Iterator[LocalService]:
    service = start_redis(free_port(), tmp_path / "source", persistent=False)
    yield service
    service.stop()


def _client(url: str) -> redis.Redis:
    primary = primary_of(url)
    return redis.Redis(
        host=primary.host, port=primary.port, password=primary.password, decode_responses=True
    )


def test_the_keyspace_restores_into_redis_behind_sentinels(
    source: LocalService, tmp_path: Path
) -> None:
    with _client(source.url) as client:
        for n in range(2000):
            client.set(f"ragbus:req:{{{n}}}:state", f"state {n}")
        client.hset("ragbus:tenants", mapping={"acme": '{"tenant": "acme"}', "zeta": "{}"})
        client.zadd("ragbus:deadlines", {"a": 1.5, "b": 2.5})
        client.sadd("ragbus:req:{1}:seen", "e1", "e2")
        client.rpush("ragbus:list", "x", "y")
        client.set("ragbus:idem:default:queries:abc", "claim", ex=3600)
        stop = threading.Event()

        def writing() -> None:  # the capture is online: writes go on meanwhile
            with _client(source.url) as writer:
                n = 0
                while not stop.is_set():
                    writer.set(f"ragbus:late:{n}", "x")
                    n += 1

        thread = threading.Thread(target=writing)
        thread.start()
        try:
            saved = capture(source.url, tmp_path / "backup" / "redis.rdb")
        finally:
            stop.set()
            thread.join()
    assert saved.bytes > 0 and (tmp_path / "backup" / "redis.rdb").stat().st_mode & 0o777 == 0o600

    sentinels = RedisSentinelSet.create(tmp_path / "target")
    sentinels.start()
    try:
        restored = restore(sentinels.url, saved.path, wait_replicas=1)
        assert restored == key_count(sentinels.url) >= 2005
        with _client(sentinels.url) as target:
            assert target.get("ragbus:req:{1999}:state") == "state 1999"
            assert target.hgetall("ragbus:tenants") == {"acme": '{"tenant": "acme"}', "zeta": "{}"}
            assert target.zrange("ragbus:deadlines", 0, -1, withscores=True) == [
                ("a", 1.5),
                ("b", 2.5),
            ]
            assert target.smembers("ragbus:req:{1}:seen") == {"e1", "e2"}
            assert target.lrange("ragbus:list", 0, -1) == ["x", "y"]
            assert 3500 < target.ttl("ragbus:idem:default:queries:abc") <= 3600
            assert target.ttl("ragbus:tenants") == -1
        with pytest.raises(RedisBackupError, match=r"holds \d+ keys.*--replace"):
            restore(sentinels.url, saved.path)
        assert restore(sentinels.url, saved.path, replace=True) == restored
    finally:
        sentinels.stop()


def test_a_capture_from_nowhere_says_where_it_tried(tmp_path: Path) -> None:
    with pytest.raises(RedisBackupError, match=r"127\.0\.0\.1"):
        capture(f"redis://127.0.0.1:{free_port()}/0", tmp_path / "redis.rdb")
