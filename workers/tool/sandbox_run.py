"""One sandboxed run: its limits (`SandboxLimits`), what it did (`SandboxRun`, with the sentence
saying why it failed), and running it (`execute`): a fresh temporary directory holding the
program, a minimal environment, the `resource` limits set in the child before exec (after it
drops to the run's own user), output read through a cap, a wall-clock timeout, and the whole
process group killed at the end. The runner that picks the isolation is `workers.tool.sandbox`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from workers.tool.sandbox_command import build_command
from workers.tool.sandbox_procs import AWAITED, drops_privileges, reap_orphans

OUTPUT_LIMIT: Final = 32 * 1024
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
        tail = last_lines(self.stderr)
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


def last_lines(text: str, lines: int = 1, chars: int = 600) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-chars:]


def _environment(workdir: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
    }


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
    if isolation != "none" or drops_privileges():
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


async def execute(
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
        AWAITED.add(process.pid)
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
            AWAITED.discard(process.pid)
        reap_orphans()
        shutil.rmtree(workdir, ignore_errors=True)
