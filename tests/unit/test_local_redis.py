"""The redis-server ragbus starts itself asks for a password: made once per data directory,
kept in `<dir>/password` (0600), handed over on standard input (never in the process list),
carried by the URL it answers and never shown by a log line. A second run of the same data
directory finds it still running and is given the password too (real redis-servers on free
ports)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis
import redis.asyncio as aioredis
import structlog
from redis.exceptions import AuthenticationError, ResponseError
from structlog.testing import capture_logs

from infra.logging import configure_logging, get_logger
from infra.runtime import services
from infra.runtime.redis_client import PASSWORD_FILE, started_redis_url
from infra.runtime.services import (
    ensure_services_sync,
    free_port,
    redacted,
    redis_reachable,
    start_redis,
)
from infra.settings import Settings


async def pings(url: str) -> bool:
    client = aioredis.from_url(url)
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()


async def test_started_redis_asks_for_the_password_its_url_carries(tmp_path: Path) -> None:
    port = free_port()
    with capture_logs() as logs:
        service = start_redis(port, tmp_path / "redis", persistent=False)
    try:
        url = urlparse(service.url)
        password = url.password
        assert password and len(password) >= 24
        assert (url.username or "", url.hostname, url.port, url.path) == (
            "",
            "127.0.0.1",
            port,
            "/0",
        )
        kept = tmp_path / "redis" / PASSWORD_FILE
        assert kept.read_text().strip() == password
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600

        assert await pings(service.url)
        assert redis_reachable(service.url)
        with pytest.raises((AuthenticationError, ResponseError)):  # NOAUTH without it
            await pings(f"redis://127.0.0.1:{port}/0")
        with pytest.raises((AuthenticationError, ResponseError)):
            await pings(f"redis://:wrong@127.0.0.1:{port}/0")

        # the command line it was started with (redis-server retitles itself later)
        assert not [arg for arg in service.process.args if password in str(arg)]
        assert logs and password not in json.dumps(logs, default=str)
        assert redacted(service.url) == f"redis://:***@127.0.0.1:{port}/0"
    finally:
        service.stop()

    # started again on the same data directory: the same password, the same URL
    again = start_redis(port, tmp_path / "redis", persistent=False)
    try:
        assert again.url == service.url and await pings(again.url)
    finally:
        again.stop()
    other = start_redis(free_port(), tmp_path / "other", persistent=False)
    try:
        assert urlparse(other.url).password != password  # each data directory its own
    finally:
        other.stop()


async def test_ensure_services_starts_it_and_a_second_run_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "nats_reachable", lambda url: True)  # NATS is not the point
    plain = f"redis://127.0.0.1:{free_port()}/0"
    settings = Settings(data_dir=tmp_path, redis_url=plain)
    with capture_logs() as logs:
        started = ensure_services_sync(settings)
    try:
        url = started.settings.redis_url
        password = urlparse(url).password
        assert password and url == plain.replace("//", f"//:{password}@")
        assert [s.name for s in started.started] == ["redis-server"]
        assert await pings(url)

        # another command of the same data directory (a second `ragbus up`, `ragbus tenant`)
        # pointed at the URL without a password: it is given the one this run made
        assert started_redis_url(plain, tmp_path / "redis") == url
        second = ensure_services_sync(settings)
        assert second.started == [] and second.settings.redis_url == url
        # a URL that names its own password, or a directory that started none, is left alone
        assert started_redis_url(url, tmp_path / "redis") == url
        assert started_redis_url(plain, tmp_path / "elsewhere") == plain
        with capture_logs() as stopping:
            started.stop()
        assert password not in json.dumps([*logs, *stopping], default=str)
    finally:
        started.stop()


def test_a_redis_that_asks_for_no_password_is_given_none(tmp_path: Path) -> None:
    """A password file of an earlier run, and a Redis there now that asks for none (the user's
    own): the URL stays as it is, so no AUTH is sent that such a server would refuse."""
    (tmp_path / "redis").mkdir()
    (tmp_path / "redis" / PASSWORD_FILE).write_text("stale\n")
    port = free_port()
    closed = f"redis://127.0.0.1:{port}/0"
    assert started_redis_url(closed, tmp_path / "redis") == closed  # nothing listens yet
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    own = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            if redis_reachable(closed):
                break
            time.sleep(0.025)
        assert started_redis_url(closed, tmp_path / "redis") == closed
        assert redis.Redis.from_url(closed).ping()
    finally:
        own.terminate()
        own.wait(10)


def test_unreachable_redis_error_shows_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "nats_reachable", lambda url: True)
    settings = Settings(
        data_dir=tmp_path,
        start_services=False,
        redis_url=f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0",
    )
    with pytest.raises(services.ServiceError) as refused:
        ensure_services_sync(settings)
    assert "s3cret-pass" not in str(refused.value)


def test_a_log_line_never_shows_a_url_password(capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever logs a URL unredacted, the configured logs show `***` for its password."""
    configure_logging("INFO", json=True)
    try:
        get_logger("test").info(
            "runtime_started",
            redis="redis://:s3cret-pass@127.0.0.1:6379/0",
            nats="nats://ragbus:other-pass@a:4222,nats://ragbus:other-pass@b:4222",
        )
    finally:
        structlog.reset_defaults()
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["redis"] == "redis://:***@127.0.0.1:6379/0"
    assert line["nats"] == "nats://ragbus:***@a:4222,nats://ragbus:***@b:4222"
