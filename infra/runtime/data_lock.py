"""One owner per data directory: an OS lock on `<data>/.lock`.

The embedded stores (Qdrant Edge under `<data>/vectors` and `<data>/memory`, the graph under
`<data>/graph`) belong to the one process that opens them; a second process on the same
directory would read a copy that never sees the first one's writes, and both would write.
So the process that runs a kind that opens them (`LOCKED_KINDS`) takes `fcntl.flock` on
`<data>/.lock` before it opens a store or starts a service, and writes its PID there. The OS
drops the lock when that process exits, a crash and a SIGKILL included; nothing is ever left
to clean up by hand.

`ragbus up` takes the lock itself, before it starts anything, and its worker child (which
opens the stores) is let through: the parent names itself in the child's
`RAGBUS_DATA_LOCK_PID`, and the child accepts a held lock whose file names that PID when the
PID is its parent's (`os.getppid()`). With both stores on servers (`RAGBUS_QDRANT_URL` and
`RAGBUS_NEO4J_URI`) no process needs the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from infra.errors import StartupError
from infra.settings import Settings

LOCK_FILE = ".lock"
PARENT_HOLDS = "RAGBUS_DATA_LOCK_PID"
"""Set by `ragbus up` in its worker child's environment: the PID of the parent that holds the
lock for it."""
LOCKED_KINDS = frozenset({"search", "fuse", "tool", "ingest", "memory"})
"""Worker kinds that open an embedded store: their process owns the data directory."""


class DataDirError(StartupError):
    """The data directory cannot be created, read or written."""


class DataDirLocked(StartupError):
    """Another process owns the data directory."""


def lock_needed(settings: Settings, kinds: Iterable[str]) -> bool:
    """Whether a process that runs `kinds` (itself or in its worker child) must own the data
    directory: it runs a kind that opens a store, and some store is embedded."""
    if settings.qdrant_url and settings.neo4j_uri:
        return False
    return bool(LOCKED_KINDS.intersection(kinds))


def unusable(data_dir: Path, exc: OSError) -> DataDirError:
    """The one sentence for a data directory this process cannot use."""
    reason = (exc.strerror or type(exc).__name__).lower()
    where = f": {exc.filename}" if exc.filename else ""
    return DataDirError(
        f"the data directory {data_dir} (RAGBUS_DATA_DIR) cannot be used ({reason}{where}); "
        "set RAGBUS_DATA_DIR to a directory this user can create, read and write"
    )


def check_data_dir(data_dir: Path) -> Path:
    """Create the data directory when missing and prove it can be listed and written; its
    absolute path. Raises `DataDirError` with the sentence to print."""
    data_dir = Path(os.path.abspath(data_dir))
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        os.listdir(data_dir)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=data_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise unusable(data_dir, exc) from None
    return data_dir


@dataclass
class DataLock:
    """The held lock; `fd` is None where the parent holds it for this process."""

    path: Path
    fd: int | None
    holds: int = 1

    @property
    def owned(self) -> bool:
        """This process holds the lock itself (and may hand it down to its worker child)."""
        return self.fd is not None

    def release(self) -> None:
        """Let go once every `acquire` of this process has released it (the OS would anyway,
        at exit)."""
        self.holds -= 1
        if self.holds > 0:
            return
        _held.pop(self.path.parent, None)
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = None


_held: dict[Path, DataLock] = {}
"""The locks this process holds, by data directory: `ragbus demo` takes it, then `serve` in
the same process takes it again (a second flock on another descriptor would refuse)."""


def _holder(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip() or "x")
    return None


def acquire(data_dir: Path) -> DataLock:
    """Own `data_dir`: check it (`check_data_dir`), then take the lock without waiting and
    write this process's PID into it. Raises `DataDirLocked` naming the holder's PID, or
    `DataDirError`."""
    data_dir = check_data_dir(data_dir)
    held = _held.get(data_dir)
    if held is not None:
        held.holds += 1
        return held
    path = data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise unusable(data_dir, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        if holder is not None and _parent_holds(holder):
            lock = _held[data_dir] = DataLock(path, None)
            return lock
        by = f"PID {holder}" if holder is not None else "a PID it did not write yet"
        raise DataDirLocked(
            f"the data directory {data_dir} is in use by another ragbus process ({by}); "
            "stop that process, or set RAGBUS_DATA_DIR to another directory"
        ) from None
    except OSError as exc:  # a file system without locks
        os.close(fd)
        raise unusable(data_dir, exc) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise unusable(data_dir, exc) from None
    lock = _held[data_dir] = DataLock(path, fd)
    return lock


def _parent_holds(holder: int) -> bool:
    """The lock is this process's parent's, and the parent said it holds it for its child."""
    return os.environ.get(PARENT_HOLDS) == str(holder) and holder == os.getppid()


def child_env(lock: DataLock | None) -> dict[str, str]:
    """What the worker child of a process holding `lock` is told: that its parent holds it."""
    if lock is None or not lock.owned:
        return {}
    return {PARENT_HOLDS: str(os.getpid())}
