"""Runs untrusted Python in a child process that can do little harm and cannot outlive its limits.

Always, whatever the machine offers:
- a fresh temporary working directory, removed afterwards; the program is a file in it;
- an isolated interpreter (`python -I`: no user site, no `PYTHON*` variables, no script
  directory on `sys.path`) with a minimal environment (PATH, HOME, TMPDIR, LANG only);
- `resource` limits set in `preexec_fn`: CPU seconds (RLIMIT_CPU), address space
  (RLIMIT_AS), processes (RLIMIT_NPROC), file size (RLIMIT_FSIZE), open files, no core;
- a wall-clock timeout after which the whole process group is killed (SIGKILL), and
  the process group is killed at the end in any case, so no child outlives the call;
- stdout/stderr read through a 32 KB cap (the rest is drained and dropped);
- when the worker runs as root, the child drops to `nobody` (65534) before anything
  else: RLIMIT_NPROC does not bind root, and root could read or write any file.

Isolation, picked by `RAGBUS_SANDBOX_ISOLATION` (`auto` tries them in this order and
probes that they really work here):
- `bwrap`: bubblewrap with every namespace unshared (user, pid, net, ipc, uts, cgroup):
  no network at all (only a down loopback), a filesystem made of read-only `/usr` (and
  the interpreter's prefix), a private `/proc` and `/dev`, and the temporary directory
  mounted as `/sandbox` — `/etc/passwd`, `/home`, the worker's data do not exist; the
  sandbox dies with the worker (`--die-with-parent`) and its whole pid namespace goes
  when it is killed.
- `unshare`: `unshare -rn`: a new user and network namespace, so no network; but the
  host filesystem stays visible (read-only to the extent `nobody`/the worker's user
  cannot write it: world-readable files such as /etc/passwd CAN be read), and a child
  that calls `setsid()` escapes the process-group kill (RLIMIT_CPU still ends it).
- `none`: rlimits, the temporary directory and the timeout only: the network is
  reachable and world-readable files can be read. Not for untrusted input; the tool says
  which isolation ran in every result (`isolation=` in the log, see `SandboxRun`).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from infra.logging import get_logger

log = get_logger(__name__)

OUTPUT_LIMIT: Final = 32 * 1024
NOBODY: Final = 65534
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
        if "MemoryError" in tail:
            return f"the program ran out of memory (limit {limits.memory_mb} MB): {tail}"
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


def _preexec(limits: SandboxLimits, isolation: str) -> None:
    """In the child, before exec: drop root, then set the resource limits."""
    if _drops_privileges():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
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


async def _execute(code: str, limits: SandboxLimits, isolation: str, python: Path) -> SandboxRun:
    t0 = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="ragbus-sandbox-"))
    try:
        (workdir / "main.py").write_text(code, encoding="utf-8")
        if _drops_privileges():
            os.chown(workdir, NOBODY, NOBODY)
            os.chown(workdir / "main.py", NOBODY, NOBODY)
        process = await asyncio.create_subprocess_exec(
            *build_command(isolation, python, workdir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env=_environment(workdir),
            start_new_session=True,
            preexec_fn=lambda: _preexec(limits, isolation),
        )
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
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


_PROBED: dict[str, bool] = {}


async def _works(isolation: str, python: Path) -> bool:
    """Whether this isolation really runs here (namespaces may be forbidden in a container)."""
    if isolation not in _PROBED:
        tool = {"bwrap": "bwrap", "unshare": "unshare"}.get(isolation)
        if tool and shutil.which(tool) is None:
            _PROBED[isolation] = False
        else:
            probe = SandboxLimits(timeout_s=10.0)
            run = await _execute("print('ok')", probe, isolation, python)
            _PROBED[isolation] = run.ok and run.stdout.strip() == "ok"
            if not _PROBED[isolation]:
                log.warning(
                    "sandbox_isolation_unavailable",
                    isolation=isolation,
                    returncode=run.returncode,
                    stderr=_last_lines(run.stderr),
                )
    return _PROBED[isolation]


async def choose_isolation(requested: str = "auto") -> str:
    """The isolation to use: `requested` if it works, or for `auto` the best one that does."""
    python = interpreter()
    if requested not in (*ISOLATIONS, "auto"):
        raise ValueError(f"unknown sandbox isolation {requested!r}")
    if requested != "auto":
        if not await _works(requested, python):
            raise RuntimeError(f"sandbox isolation {requested!r} does not work on this machine")
        return requested
    for isolation in ("bwrap", "unshare"):
        if await _works(isolation, python):
            return isolation
    log.warning(
        "sandbox_without_isolation",
        note="neither bwrap nor `unshare -rn` works here: the python tool runs with rlimits, "
        "a fresh directory and a timeout only — network reachable, world-readable files "
        "readable",
    )
    return "none"


class Sandbox:
    """The python tool's runner; decides its isolation once, on first use."""

    def __init__(self, limits: SandboxLimits, isolation: str = "auto") -> None:
        self.limits = limits
        self.requested = isolation
        self.isolation: str | None = None
        self._lock = asyncio.Lock()

    async def ready(self) -> str:
        async with self._lock:
            if self.isolation is None:
                self.isolation = await choose_isolation(self.requested)
                log.info(
                    "sandbox_ready",
                    isolation=self.isolation,
                    python=str(interpreter()),
                    drops_to_nobody=_drops_privileges(),
                )
            return self.isolation

    async def run(self, code: str) -> SandboxRun:
        isolation = await self.ready()
        return await _execute(code, self.limits, isolation, interpreter())
