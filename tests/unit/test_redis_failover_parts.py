"""The pieces of Redis with failover that need no server: reading a `redis+sentinel://` URL
(and refusing a bad one in a sentence), a redacted log line, and the chaos run's check that
quota grants never beat the token bucket."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bench.chaos_redis import over_granted
from infra.config.services import sentinel_target
from infra.replication import WaitPolicy
from infra.runtime.redis_client import connect_redis, with_password
from infra.runtime.services import redacted
from infra.settings import Settings


def test_a_sentinel_url_names_its_sentinels_service_database_and_password() -> None:
    target = sentinel_target("redis+sentinel://:s%40cret@10.0.0.1:26379,10.0.0.2,h3:26381/orders/2")
    assert target.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("h3", 26381)]
    assert (target.service, target.db) == ("orders", 2)
    assert (target.username, target.password) == (None, "s@cret")
    plain = sentinel_target("redis+sentinel://127.0.0.1:1")
    assert (plain.service, plain.db, plain.password) == ("ragbus", 0, None)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel:///ragbus/0", "names no sentinel"),
        ("redis+sentinel://h:port/ragbus", "is not HOST:PORT"),
        ("redis+sentinel://h:1/ragbus/zero", "/SERVICE/DB"),
        ("redis+sentinel://h:1/a/1/extra", "/SERVICE/DB"),
    ],
)
def test_a_bad_sentinel_url_is_refused_in_a_sentence(url: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Settings(redis_url=url)


def test_the_password_of_a_sentinel_url_is_added_and_redacted() -> None:
    url = with_password("redis+sentinel://127.0.0.1:1,127.0.0.1:2/ragbus/0", "pw")
    assert url == "redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/ragbus/0"
    assert "pw" not in redacted(url)
    assert sentinel_target(url).password == "pw"


def test_writes_wait_for_one_replica_behind_sentinels_and_none_on_one_redis() -> None:
    sentinel = connect_redis("redis+sentinel://127.0.0.1:1/ragbus/0")
    single = connect_redis("redis://127.0.0.1:1/0")
    told = connect_redis("redis+sentinel://127.0.0.1:1/ragbus/0", wait_replicas=0)
    assert getattr(sentinel, "wait_policy", None) == WaitPolicy(1, 1000)
    assert getattr(single, "wait_policy", None) is None
    assert getattr(told, "wait_policy", None) is None


def test_grants_within_the_bucket_are_not_over_granted() -> None:
    # a burst of 6 at once, then one every third of a second at 3 a second
    times = [0.0] * 6 + [1 / 3 * n for n in range(1, 30)]
    assert over_granted(times, 3.0, 6) == 0


def test_a_bucket_handed_out_twice_is_over_granted() -> None:
    # the burst spent, then the bucket's state lost: the burst again at once
    times = [0.0] * 6 + [0.1] * 6
    assert over_granted(times, 3.0, 6) == 4  # 12 in 0.1 s, where 6 + 3 × 0.6 s allow 7.8
