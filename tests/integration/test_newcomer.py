"""A newcomer's mistakes against real servers, each told in one sentence on stderr with a
non-zero exit and no traceback: a wrong or missing token, a namespace that holds nothing,
`ragbus ingest` with no ingest worker running, Ctrl-C during ingestion. The CLI runs as a
subprocess; the servers are the fixtures' (free ports), never the machine's own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from api.app import create_app
from contracts import subjects as sj
from infra.runtime.readiness import role_key
from infra.runtime.redis_client import connect_redis
from infra.runtime.services import LocalService
from infra.settings import Settings
from tests.environment import stack_environment
from tests.integration.conftest import own_services, serving, stack_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
QUICK_S = 5.0
"""Where nothing would answer, the command says so within this, beyond the CLI's start."""


async def ragbus(env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def startup_s() -> float:
    started = time.monotonic()
    await ragbus(dict(os.environ), "--help")
    return time.monotonic() - started


def one_sentence(code: int, stderr: str, *expected: str, exit_code: int = 1) -> str:
    assert code == exit_code, (code, stderr)
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith("ragbus: "), stderr
    assert "Traceback" not in stderr, stderr
    for part in expected:
        assert part in lines[-1], (part, lines[-1])
    return lines[-1]


@contextlib.asynccontextmanager
async def api_serving(settings: Settings) -> AsyncIterator[str]:
    """The API alone (no orchestrator, no worker), on a free port."""
    async with serving(create_app(settings)) as url:
        yield url


@pytest.fixture
async def token_api(
    nats_server: LocalService, redis_server: LocalService, tmp_path: Path
) -> AsyncIterator[tuple[Settings, str]]:
    settings = stack_settings(
        nats_server.url,
        redis_server.url,
        tmp_path / "data",
        auth_mode="token",
        api_token="the-right-token",
    )
    async with api_serving(settings) as url:
        yield settings, url


async def test_ask_with_a_wrong_token(token_api: tuple[Settings, str]) -> None:
    settings, url = token_api
    env = stack_environment(settings, RAGBUS_API_TOKEN="a-wrong-token")
    code, _, err = await ragbus(env, "ask", "--api", url, "How long is the canal?")
    one_sentence(code, err, f"the API at {url} refused the token", "--token", "RAGBUS_API_TOKEN")
    assert "a-wrong-token" not in err


async def test_ask_without_a_token(token_api: tuple[Settings, str]) -> None:
    settings, url = token_api
    code, _, err = await ragbus(
        stack_environment(settings), "ask", "--api", url, "How long is the canal?"
    )
    one_sentence(code, err, f"the API at {url} asks for a token and none was sent", "--token")


async def test_ask_an_unknown_namespace(api_url: str, settings: Settings) -> None:
    """The API takes any well-formed namespace and searches it: one nobody ingested into
    answers "not found" with every channel empty, which the CLI tells as a mistake."""
    code, out, err = await ragbus(
        stack_environment(settings),
        "ask",
        "--api",
        api_url,
        "--namespace",
        "no-such-space",
        "Canal?",
    )
    one_sentence(
        code, err, "no documents are indexed in the namespace 'no-such-space'", "ragbus ingest"
    )
    assert "completed" in out  # the request itself went through


async def test_ingest_with_no_ingest_worker(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "note.md").write_text("# Note\n\nThe canal opened in 1914.\n")
    with own_services(tmp_path / "services") as settings:
        start = await startup_s()
        started = time.monotonic()
        code, _, err = await ragbus(stack_environment(settings), "ingest", str(tmp_path / "docs"))
        took = time.monotonic() - started
        one_sentence(code, err, f"no ingest worker is running for {settings.nats_url}", "ragbus up")
        assert took < start + QUICK_S
        nc = await nats.connect(settings.nats_url)
        try:
            info = await nc.jetstream().stream_info(sj.STREAM_INGEST)
            assert info.state.messages == 0  # nothing was published
        finally:
            await nc.close()


async def test_ctrl_c_during_ingestion(tmp_path: Path) -> None:
    """An ingest worker announced (its beacon, with no worker behind it: nothing progresses),
    the documents published, then Ctrl-C: exit 130, the job named, no traceback."""
    (tmp_path / "docs").mkdir()
    for n in range(3):
        (tmp_path / "docs" / f"note{n}.md").write_text(f"# Note {n}\n\nThe canal, part {n}.\n")
    with own_services(tmp_path / "services") as settings:
        redis = connect_redis(settings.redis_url)
        await redis.zadd(role_key("ingest"), {"test:1": time.time() + 600})
        await redis.aclose()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli",
            "ingest",
            str(tmp_path / "docs"),
            "--job-id",
            "job-interrupted-1",
            cwd=ROOT,
            env=stack_environment(settings),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        seen = ""
        async with asyncio.timeout(60):
            while "published" not in seen:
                line = await process.stdout.readline()
                assert line, "the CLI ended before publishing"
                seen += line.decode()
        await asyncio.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(process.communicate(), 30)
        one_sentence(
            process.returncode or 0,
            err.decode(),
            "interrupted: job job-interrupted-1",
            "3 documents",
            "still indexed",
            exit_code=130,
        )
