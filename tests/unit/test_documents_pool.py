"""`ParserPool`: parsing in a niced, memory-bounded child that is killed and replaced when it
hangs, crashes or runs out of memory, and that never outlives its parent."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infra.documents import ParseLimits, ParseRefused, ParserFailed, ParserPool, parse_bytes
from infra.documents.pool import PARSER_NICE
from tests.unit.test_documents_support import DATA, book, text_pdf

TIMEOUT_S = 2.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
async def pool() -> AsyncIterator[ParserPool]:
    pool = ParserPool(ParseLimits(timeout_s=TIMEOUT_S, memory_bytes=1024 * 2**20))
    yield pool
    await pool.aclose()


async def test_parse_in_the_child_is_the_same_as_in_process(pool: ParserPool) -> None:
    data = text_pdf(book(seed=31, pages=3), title="Pooled")
    assert await pool.parse(data, "pooled.pdf") == parse_bytes(data, "pooled.pdf")
    encrypted = (DATA / "libreoffice-writer-password.pdf").read_bytes()
    with pytest.raises(ParseRefused) as refused:
        await pool.parse(encrypted, "secret.pdf")
    assert (
        str(refused.value) == "secret.pdf is encrypted (password-protected); ragbus cannot read it"
    )


async def test_the_child_is_niced_and_bounded(pool: ParserPool) -> None:
    assert await pool.run(os.nice, 0) >= os.nice(0) + PARSER_NICE
    assert await pool.run(os.sched_getscheduler, 0) == os.SCHED_IDLE  # a core no one wants
    soft, _ = await pool.run(resource.getrlimit, resource.RLIMIT_AS)
    assert soft == 1024 * 2**20
    assert await pool.run(os.getpgrp) == pool.pid  # its own group, its OCR programs in it
    assert await pool.run(os.getenv, "OMP_THREAD_LIMIT") == "1"


async def test_a_hang_is_killed_and_the_child_replaced(pool: ParserPool) -> None:
    await pool.parse(b"warm up", "a.txt")
    before, started = pool.pid, pool.started
    t0 = time.monotonic()
    with pytest.raises(ParserFailed) as failed:
        await pool.run(time.sleep, 60, what="stuck.pdf")
    assert time.monotonic() - t0 < TIMEOUT_S + 2.0
    assert str(failed.value) == "the parser ran past 2 s on stuck.pdf; it was stopped"
    assert before is not None and not _alive(before)
    doc = await pool.parse(b"# After\n\nStill working.", "after.md")
    assert doc.title == "After"
    assert pool.started == started + 1


async def test_a_crash_is_reported_and_the_child_replaced(pool: ParserPool) -> None:
    await pool.parse(b"warm up", "a.txt")
    with pytest.raises(ParserFailed) as failed:
        await pool.run(os.abort, what="evil.pdf")
    assert str(failed.value) == "the parser crashed (SIGABRT) on evil.pdf; it was replaced"
    assert (await pool.parse(b"fine", "b.txt")).text == "fine"


async def test_a_memory_blow_up_is_stopped(pool: ParserPool) -> None:
    with pytest.raises(ParserFailed) as failed:
        await pool.run(bytearray, 2 * 1024 * 2**20, what="bomb.pdf")
    assert str(failed.value) == (
        "the parser ran out of memory on bomb.pdf (limit 1.0 GiB); it was stopped"
    )
    assert (await pool.parse(b"fine", "c.txt")).text == "fine"


async def test_closed_pool_refuses_work() -> None:
    pool = ParserPool(ParseLimits(timeout_s=TIMEOUT_S))
    await pool.parse(b"one", "one.txt")
    pid = pool.pid
    await pool.aclose()
    assert pid is not None and not _alive(pid)
    with pytest.raises(ParserFailed, match="closed"):
        await pool.parse(b"two", "two.txt")


def test_the_child_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys, time
        from infra.documents import ParserPool

        async def main():
            pool = ParserPool()
            await pool.parse(b"hello", "a.txt")
            print(pool.pid, flush=True)
            time.sleep(60)

        asyncio.run(main())
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5.0
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait(10)


def _alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
