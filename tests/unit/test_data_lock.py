"""One owner per data directory (`infra.runtime.data_lock`): an OS lock that names its holder,
lets the holder's own worker child through, and goes with the process that held it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.runtime import data_lock
from infra.runtime.data_lock import (
    PARENT_HOLDS,
    DataDirError,
    DataDirLocked,
    acquire,
    child_env,
    lock_needed,
)
from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TRY = (
    "import sys; from pathlib import Path; from infra.runtime.data_lock import acquire\n"
    "try:\n    acquire(Path(sys.argv[1]))\nexcept Exception as exc:\n"
    "    print(exc); sys.exit(1)\nprint('held')\n"
)


def other_process(data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != PARENT_HOLDS} | env
    return subprocess.run(
        [sys.executable, "-c", TRY, str(data_dir)],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_holder_writes_its_pid_and_a_second_process_is_refused(tmp_path: Path) -> None:
    lock = acquire(tmp_path / "data")
    try:
        assert (tmp_path / "data" / ".lock").read_text().strip() == str(os.getpid())
        assert acquire(tmp_path / "data") is lock  # this process again: the same lock
        lock.release()
        refused = other_process(tmp_path / "data")
        assert refused.returncode == 1
        assert f"is in use by another ragbus process (PID {os.getpid()})" in refused.stdout
    finally:
        lock.release()
    assert other_process(tmp_path / "data").stdout.strip() == "held"  # released


def test_the_holders_worker_child_is_let_through_and_no_one_else(tmp_path: Path) -> None:
    lock = acquire(tmp_path)
    try:
        assert child_env(lock) == {PARENT_HOLDS: str(os.getpid())}
        assert other_process(tmp_path, **child_env(lock)).stdout.strip() == "held"
        assert other_process(tmp_path, **{PARENT_HOLDS: "1"}).returncode == 1
    finally:
        lock.release()


def test_the_lock_goes_with_the_process(tmp_path: Path) -> None:
    """A holder that exits without releasing (a crash) leaves the directory free."""
    assert other_process(tmp_path).stdout.strip() == "held"
    lock = acquire(tmp_path)
    lock.release()


def test_a_data_directory_under_a_file_is_refused_in_one_sentence(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DataDirError) as caught:
        acquire(blocker / "data")
    assert str(caught.value) == (
        f"the data directory {blocker / 'data'} (RAGBUS_DATA_DIR) cannot be used (not a "
        f"directory: {blocker / 'data'}); set RAGBUS_DATA_DIR to a directory this user can "
        "create, read and write"
    )
    assert not data_lock._held


def test_locked_is_a_startup_error() -> None:
    from infra.errors import StartupError

    assert issubclass(DataDirLocked, StartupError) and issubclass(DataDirError, StartupError)


@pytest.mark.parametrize(
    ("kinds", "servers", "needed"),
    [
        (("search", "fuse", "tool", "ingest"), {}, True),
        (("ingest",), {}, True),
        (("memory",), {}, True),
        (("classify", "generate", "critic"), {}, False),
        ((), {}, False),
        (("search", "ingest"), {"qdrant_url": "http://q:6333"}, True),
        (("search", "ingest"), {"qdrant_url": "http://q:6333", "neo4j_uri": "bolt://n"}, False),
    ],
)
def test_who_needs_the_lock(kinds: tuple[str, ...], servers: dict[str, str], needed: bool) -> None:
    assert lock_needed(Settings(**servers), kinds) is needed  # type: ignore[arg-type]
