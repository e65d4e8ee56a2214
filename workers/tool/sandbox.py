"""Runs untrusted Python in a child process that can do little harm and cannot outlive its limits.

Always, whatever the machine offers:
- a fresh temporary working directory, removed afterwards; the program is a file in it;
- an isolated interpreter (`python -I`: no user site, no `PYTHON*` variables, no script
  directory on `sys.path`) with a minimal environment (PATH, HOME, TMPDIR, LANG only);
- `resource` limits set in `preexec_fn`: CPU seconds (RLIMIT_CPU), address space
  (RLIMIT_AS), processes (RLIMIT_NPROC), file size (RLIMIT_FSIZE), open files, no core;
- a wall-clock timeout after which the whole process group is killed (SIGKILL), and
  the process group is killed at the end in any case;
- stdout/stderr read through a 32 KB cap (the rest is drained and dropped);
- when the worker runs as root, the child drops to a user id of its own for this run
  (`workers.tool.sandbox_procs`) before anything else: RLIMIT_NPROC does not bind root, root
  could read or write any file, and one user shared by every run let one run's processes
  starve the others. After the run every process of that user is killed, so a descendant
  that left the process group (`setsid`) does not outlive the call either, and the worker
  reaps what bwrap leaves behind.

Isolation, picked by `RAGBUS_SANDBOX_ISOLATION` (`auto` tries them in this order and
probes that they really work here):
- `bwrap`: bubblewrap with every namespace unshared (user, pid, net, ipc, uts, cgroup):
  no network at all (only a down loopback), a filesystem made of read-only `/usr` (and
  the interpreter's prefix), a private `/proc` and `/dev`, and the temporary directory
  mounted as `/sandbox` — `/etc/passwd`, `/home`, the worker's data do not exist; the
  sandbox dies with the worker (`--die-with-parent`) and its whole pid namespace goes
  when it is killed.
- `unshare`: `unshare -rn`: a new user and network namespace, so no network; but the
  host filesystem stays visible (read-only to the extent the run's user cannot write it:
  world-readable files such as /etc/passwd CAN be read). A child that calls `setsid()`
  escapes the process-group kill; as root it is killed with the run's user, otherwise it
  lives until it exits (RLIMIT_CPU does not end a process that sleeps).
- `none`: rlimits, the temporary directory and the timeout only: the network is
  reachable and world-readable files can be read. Never chosen by `auto`; only when
  configured, for trusted input.

The isolation is chosen once, when the tool worker starts (it warms up the sandbox), and
never changes: `auto` takes the first of bwrap and `unshare` that works (each tried a few
times, so a moment without free process slots does not decide it). If neither works, or the
chosen one stops working, the python tool refuses to run and says why; it never falls back
to a weaker isolation.

On a non-root worker without bwrap/unshare, RLIMIT_NPROC counts every process of the
worker's user (its own threads included), so it is not applied in `none` mode there.

This module holds the runner (`Sandbox`) and the choice of its isolation; one run, its limits
and its outcome are `workers.tool.sandbox_run`, the command line of each isolation
`workers.tool.sandbox_command`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from infra.logging import get_logger
from workers.tool.sandbox_command import interpreter
from workers.tool.sandbox_procs import UidPool, become_subreaper, drops_privileges
from workers.tool.sandbox_run import SandboxLimits, SandboxRun, execute, last_lines

log = get_logger(__name__)

ISOLATIONS: Final = ("bwrap", "unshare", "none")


class SandboxUnavailable(RuntimeError):
    """No isolation that may be used works here; the message says why and what to do."""


PROBE_TRIES = 3
PROBE_PAUSE_S = 0.5


class Sandbox:
    """The python tool's runner. Its isolation is chosen once (`ready`, which the tool worker
    calls as it starts) and never changes afterwards."""

    def __init__(self, limits: SandboxLimits, isolation: str = "auto") -> None:
        if isolation not in (*ISOLATIONS, "auto"):
            raise ValueError(f"unknown sandbox isolation {isolation!r}")
        self.limits = limits
        self.requested = isolation
        self.isolation: str | None = None
        self.unavailable: str | None = None
        self._uids = UidPool() if drops_privileges() else None
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def _user(self) -> AsyncIterator[int | None]:
        if self._uids is None:
            yield None
            return
        async with self._uids.lease() as uid:
            yield uid

    async def _works(self, isolation: str) -> bool:
        """Whether this isolation really runs here (namespaces may be forbidden in a
        container), tried a few times: a probe can fail for a moment under load."""
        if isolation != "none" and shutil.which(isolation) is None:
            return False
        run: SandboxRun | None = None
        for attempt in range(PROBE_TRIES):
            async with self._user() as uid:
                run = await execute("print('ok')", SandboxLimits(), isolation, interpreter(), uid)
            if run.ok and run.stdout.strip() == "ok":
                return True
            if attempt + 1 < PROBE_TRIES:
                await asyncio.sleep(PROBE_PAUSE_S)
        log.warning(
            "sandbox_isolation_unavailable",
            isolation=isolation,
            returncode=run.returncode if run else None,
            stderr=last_lines(run.stderr) if run else "",
        )
        return False

    async def _choose(self) -> str:
        if self.requested != "auto":
            if not await self._works(self.requested):
                raise SandboxUnavailable(
                    f"the configured sandbox isolation {self.requested!r} does not work on "
                    "this machine (RAGBUS_SANDBOX_ISOLATION)"
                )
            return self.requested
        for isolation in ("bwrap", "unshare"):
            if await self._works(isolation):
                return isolation
        raise SandboxUnavailable(
            "neither bwrap nor `unshare -rn` works here, so the python tool will not run "
            "untrusted code; install bubblewrap, or set RAGBUS_SANDBOX_ISOLATION=none to run "
            "it with limits only (network reachable, world-readable files readable)"
        )

    async def ready(self) -> str:
        """The isolation, chosen on the first call; `SandboxUnavailable` when there is none
        (and on every later call: the tool never falls back to a weaker one)."""
        async with self._lock:
            if self.isolation is None and self.unavailable is None:
                subreaper = become_subreaper()
                try:
                    self.isolation = await self._choose()
                except SandboxUnavailable as exc:
                    self.unavailable = str(exc)
                    log.error("sandbox_unavailable", reason=self.unavailable)
                else:
                    log.info(
                        "sandbox_ready",
                        isolation=self.isolation,
                        python=str(interpreter()),
                        own_user_per_run=self._uids is not None,
                        subreaper=subreaper,
                    )
            if self.isolation is None:
                raise SandboxUnavailable(self.unavailable or "no sandbox")
            return self.isolation

    async def warm_up(self) -> None:
        """Choose the isolation as the worker starts; a machine with none still serves the
        other tools, and the python tool answers every call with the reason."""
        with contextlib.suppress(SandboxUnavailable):
            await self.ready()

    async def run(self, code: str) -> SandboxRun:
        isolation = await self.ready()
        async with self._user() as uid:
            return await execute(code, self.limits, isolation, interpreter(), uid)
