"""The niced background process: where ingestion's encoder passes and community detection run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.retrieval.entities import extract_all, extract_entities
from infra.runtime.background import BACKGROUND_NICE, BackgroundWork
from infra.settings import Settings


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundWork]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), background_process=True)
    pool = BackgroundWork(settings)
    yield pool
    pool.close()


def _fail(message: str) -> None:
    raise ValueError(message)


async def test_work_runs_in_a_child_process_at_idle_priority(work: BackgroundWork) -> None:
    assert await work.call(os.getpid) != os.getpid()
    assert await work.call(os.nice, 0) == os.nice(0) + BACKGROUND_NICE
    # it runs only on a core that no query wants (issue 46: p95 during an ingest)
    assert await work.call(os.sched_getscheduler, 0) == os.SCHED_IDLE


async def test_the_child_runs_the_real_extraction(work: BackgroundWork) -> None:
    texts = ["Vitamin D and calcium matter for bone health in the NHS.", ""]
    assert await work.call(extract_all, texts) == [extract_entities(t) for t in texts]


async def test_a_failure_in_the_child_reaches_the_caller(work: BackgroundWork) -> None:
    with pytest.raises(ValueError, match="bad input"):
        await work.call(_fail, "bad input")
    assert await work.call(os.getpid) != os.getpid()  # the child survives an exception


async def test_a_dead_child_is_replaced(work: BackgroundWork) -> None:
    first = await work.call(os.getpid)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while True:  # the pool notices the death on its own thread
        try:
            second = await work.call(os.getpid)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    assert second not in (first, os.getpid())


async def test_off_it_runs_in_a_thread_of_this_process(tmp_path: Path) -> None:
    local = BackgroundWork(Settings(data_dir=tmp_path, background_process=False))
    assert await local.call(os.getpid) == os.getpid()
    with pytest.raises(ValueError, match="here"):
        await local.call(_fail, "here")
    assert local.run(os.getpid) == os.getpid()
    local.close()


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_child_exits_when_its_parent_is_killed() -> None:
    """A SIGKILLed worker cannot shut its pool down; its background child must not outlive it
    (the chaos suite found them by the dozen)."""
    code = (
        "import os, time\n"
        "from infra.runtime.background import BackgroundWork\n"
        "from infra.settings import Settings\n"
        "work = BackgroundWork(Settings())\n"
        "print(work.run(os.getpid), flush=True)\n"
        "work.submit(time.sleep, 2)  # busy when its parent dies\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while not _gone(child):
            assert time.monotonic() < deadline, "the background child outlived its parent"
            time.sleep(0.1)
    finally:
        parent.kill()
