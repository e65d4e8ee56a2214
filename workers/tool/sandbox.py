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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from infra.logging import get_logger
from workers.tool.sandbox_procs import UidPool, become_subreaper, reap_orphans

log = get_logger(__name__)

OUTPUT_LIMIT: Final = 32 * 1024
SANDBOX_DIR: Final = "/sandbox"
ISOLATIONS: Final = ("bwrap", "unshare", "none")
READ_CHUNK: Final = 65_536


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 256
    max_procs: int = 16
    file_size_mb: int = 16
    open_files: int = 64
    output_bytes: int = OUTPUT_LIMIT


@dataclass
class SandboxRun:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    isolation: str
    duration_ms: float
    uid: int | None = None
    """The user the program ran as (its own, when the worker is root)."""

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0

    def error(self, limits: SandboxLimits) -> str | None:
        """One sentence saying why the program failed, or None when it did not."""
        if self.ok:
            return None
        if self.timed_out:
            return f"the program was killed after {limits.timeout_s:g} s (wall-clock limit)"
        code = self.returncode or 0
        signum = -code if code < 0 else code - 128 if code > 128 else 0
        if signum == signal.SIGXCPU:
            return f"the program used more than {limits.cpu_s} s of CPU time and was killed"
        if signum == signal.SIGKILL:
            return (
                f"the program was killed (CPU limit {limits.cpu_s} s or memory limit "
                f"{limits.memory_mb} MB)"
            )
        if signum == signal.SIGXFSZ:
            return f"the program wrote a file larger than {limits.file_size_mb} MB"
        if signum:
            return f"the program was killed by signal {signal.Signals(signum).name}"
        tail = _last_lines(self.stderr)
        # A program that forks writes several interleaved tracebacks, so the cause is looked
        # for in all of its error output, not only in its last line.
        if "MemoryError" in self.stderr:
            return f"the program ran out of memory (limit {limits.memory_mb} MB): {tail}"
        if "BlockingIOError" in self.stderr or "Resource temporarily unavailable" in self.stderr:
            return (
                f"the program tried to run more than {limits.max_procs} processes "
                "(Resource temporarily unavailable)"
            )
        return f"the program exited with status {code}: {tail or '(no error output)'}"


def _last_lines(text: str, lines: int = 1, chars: int = 600) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-chars:]


def _world_executable(path: Path) -> bool:
    """Whether a user with no special rights could run `path` (every parent searchable)."""
    try:
        real = path.resolve()
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def _drops_privileges() -> bool:
    return os.geteuid() == 0


def interpreter() -> Path:
    """The Python the sandbox runs: the worker's own base interpreter when an unprivileged
    user can execute it, else the system's `python3`."""
    own = Path(getattr(sys, "_base_executable", "") or sys.executable).resolve()
    if not _drops_privileges() or _world_executable(own):
        return own
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system and _world_executable(Path(system)):
        return Path(system).resolve()
    return own


def _bwrap_command(python: Path, workdir: Path) -> list[str]:
    command = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        path = Path(top)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            command += ["--ro-bind", top, top]
    prefix = python.parent.parent
    if not str(python).startswith("/usr/"):
        command += ["--ro-bind", str(prefix), str(prefix)]
    command += [
        "--bind",
        str(workdir),
        SANDBOX_DIR,
        "--chdir",
        SANDBOX_DIR,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        SANDBOX_DIR,
        "--setenv",
        "TMPDIR",
        SANDBOX_DIR,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--",
        str(python),
        "-I",
        "-B",
        "main.py",
    ]
    return command


def build_command(isolation: str, python: Path, workdir: Path) -> list[str]:
    if isolation == "bwrap":
        return _bwrap_command(python, workdir)
    if isolation == "unshare":
        return ["unshare", "-rn", "--", str(python), "-I", "-B", "main.py"]
    return [str(python), "-I", "-B", "main.py"]


def _environment(workdir: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
    }


class SandboxUnavailable(RuntimeError):
    """No isolation that may be used works here; the message says why and what to do."""


def _preexec(limits: SandboxLimits, isolation: str, uid: int | None) -> None:
    """In the child, before exec: drop root (to the run's own user), then set the limits."""
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_mb * mb, limits.file_size_mb * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if isolation != "none" or _drops_privileges():
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_procs, limits.max_procs))


async def _read_capped(stream: asyncio.StreamReader | None, cap: int) -> tuple[bytes, bool]:
    if stream is None:
        return b"", False
    kept = bytearray()
    total = 0
    while True:
        chunk = await stream.read(READ_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept), total > cap


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


_RUNNING: set[int] = set()
"""Sandbox processes asyncio is waiting for: never reaped by `reap_orphans`."""


async def _execute(
    code: str, limits: SandboxLimits, isolation: str, python: Path, uid: int | None
) -> SandboxRun:
    t0 = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="ragbus-sandbox-"))
    process: asyncio.subprocess.Process | None = None
    try:
        (workdir / "main.py").write_text(code, encoding="utf-8")
        if uid is not None:
            os.chown(workdir, uid, uid)
            os.chown(workdir / "main.py", uid, uid)
        process = await asyncio.create_subprocess_exec(
            *build_command(isolation, python, workdir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env=_environment(workdir),
            start_new_session=True,
            preexec_fn=lambda: _preexec(limits, isolation, uid),
        )
        _RUNNING.add(process.pid)
        readers = [
            asyncio.ensure_future(_read_capped(process.stdout, limits.output_bytes)),
            asyncio.ensure_future(_read_capped(process.stderr, limits.output_bytes)),
        ]
        timed_out = False
        try:
            await asyncio.wait_for(process.wait(), limits.timeout_s)
        except TimeoutError:
            timed_out = True
        finally:
            _kill_group(process.pid)  # children left behind go too, in every case
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        done, pending = await asyncio.wait(readers, timeout=2.0)
        for task in pending:  # a descendant that escaped the group still holds the pipe
            task.cancel()
        out, out_cut = readers[0].result() if readers[0] in done else (b"", False)
        err, _ = readers[1].result() if readers[1] in done else (b"", False)
        stdout = out.decode("utf-8", errors="replace")
        if out_cut:
            stdout += f"\n[output truncated at {limits.output_bytes // 1024} KB]"
        return SandboxRun(
            returncode=process.returncode,
            stdout=stdout,
            stderr=err.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            truncated=out_cut,
            isolation=isolation,
            duration_ms=(time.perf_counter() - t0) * 1000,
            uid=uid,
        )
    finally:
        if process is not None:
            _RUNNING.discard(process.pid)
        reap_orphans(keep=_RUNNING)
        shutil.rmtree(workdir, ignore_errors=True)


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
        self._uids = UidPool() if _drops_privileges() else None
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
                run = await _execute("print('ok')", SandboxLimits(), isolation, interpreter(), uid)
            if run.ok and run.stdout.strip() == "ok":
                return True
            if attempt + 1 < PROBE_TRIES:
                await asyncio.sleep(PROBE_PAUSE_S)
        log.warning(
            "sandbox_isolation_unavailable",
            isolation=isolation,
            returncode=run.returncode if run else None,
            stderr=_last_lines(run.stderr) if run else "",
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
            return await _execute(code, self.limits, isolation, interpreter(), uid)
