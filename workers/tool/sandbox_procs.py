"""Who a sandboxed program runs as, and what is left of it afterwards (Linux).

A worker running as root gives each run a user id of its own from `SANDBOX_UIDS`, taken from a
pool and given back after the run:
- RLIMIT_NPROC counts the processes of a user, so with one shared user (`nobody`) a run that
  forked a dozen sleepers starved every concurrent run ("Creating new namespace failed");
- at the end, every process of the run's user is killed (`kill_user`), so a descendant that
  left the process group (`setsid`) does not outlive the call either;
- the run's files belong to that user alone.

bwrap's pid-namespace init is reparented when bwrap exits, and where PID 1 is no init (a
container running ragbus directly) nobody reaps it: one zombie per run, each counted against
the user's process limit. So the worker makes itself the child subreaper
(`PR_SET_CHILD_SUBREAPER`): orphaned descendants come back to it, and `reap_orphans` collects
the zombies among them that are sandbox processes, never a child that asyncio waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from infra.logging import get_logger

log = get_logger(__name__)

SANDBOX_UID_BASE: Final = 200_000
SANDBOX_UIDS: Final = range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + 64)
"""User (and group) ids no account uses, one per concurrent run."""
PR_SET_CHILD_SUBREAPER: Final = 36
PROC = Path("/proc")


def drops_privileges() -> bool:
    """Whether the worker runs as root, so that each run drops to a user id of its own."""
    return os.geteuid() == 0


UID_LOCKS: Final = Path(tempfile.gettempdir()) / "ragbus-sandbox-uids"
"""One lock file per id: a process holds an id's lock while a run uses it."""
RETRY_S: Final = 0.05


def _lock(uid: int) -> int | None:
    """The held lock on `uid` (its file descriptor), or None when another process on this
    host holds it."""
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(UID_LOCKS / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class UidPool:
    """Hands out the ids of `SANDBOX_UIDS`, one per run; a run waits when all are in use.

    Every process running tools on a host draws from the same ids (two tool workers, or a
    worker beside a test), and a run's end kills every process of its id: an id is taken
    only with its lock file held (`flock`), so no run ever kills another process's run."""

    def __init__(self, uids: Iterable[int] = SANDBOX_UIDS) -> None:
        self._free: asyncio.Queue[int] = asyncio.Queue()
        for uid in uids:
            self._free.put_nowait(uid)

    async def _take(self) -> tuple[int, int]:
        tried = 0
        while True:
            uid = await self._free.get()
            fd = _lock(uid)
            if fd is not None:
                return uid, fd
            self._free.put_nowait(uid)  # another process runs as it now
            tried += 1
            if tried >= self._free.qsize():
                tried = 0
                await asyncio.sleep(RETRY_S)

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[int]:
        uid, fd = await self._take()
        try:
            yield uid
        finally:
            kill_user(uid)  # nothing of this run survives into the next one
            os.close(fd)  # the lock goes with it
            self._free.put_nowait(uid)


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    uid: int
    state: str
    name: str


def processes() -> list[ProcInfo]:
    """Every process this one can see, from /proc (those that vanish meanwhile are skipped)."""
    found: list[ProcInfo] = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = dict(
                line.split(":", 1)
                for line in (entry / "status").read_text().splitlines()
                if ":" in line
            )
            found.append(
                ProcInfo(
                    pid=int(entry.name),
                    ppid=int(fields["PPid"]),
                    uid=int(fields["Uid"].split()[0]),
                    state=fields["State"].strip()[:1],
                    name=fields["Name"].strip(),
                )
            )
        except (OSError, KeyError, ValueError):
            continue
    return found


def kill_user(uid: int) -> int:
    """SIGKILL every process whose real user is `uid`; how many were signalled."""
    killed = 0
    for proc in processes():
        if proc.uid == uid and proc.state != "Z":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGKILL)
                killed += 1
    if killed:
        log.info("sandbox_leftovers_killed", uid=uid, processes=killed)
    return killed


def become_subreaper() -> bool:
    """Make orphaned descendants this process's children (Linux); False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


AWAITED: set[int] = set()
"""Sandbox processes asyncio is waiting for (a python tool run's): never reaped by
`reap_orphans`, whoever calls it."""


def reap_orphans(keep: Iterable[int] = ()) -> int:
    """Collect this process's zombie children that a sandbox left (a sandbox user's, or
    bwrap's), except those asyncio is waiting for (`AWAITED`, and `keep`). How many were
    reaped."""
    me, kept = os.getpid(), AWAITED | set(keep)
    reaped = 0
    for proc in processes():
        if proc.ppid != me or proc.state != "Z" or proc.pid in kept:
            continue
        if proc.uid not in SANDBOX_UIDS and proc.name != "bwrap":
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc.pid, os.WNOHANG)
            reaped += 1
    return reaped
