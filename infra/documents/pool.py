"""`ParserPool`: files parsed in one long-lived child process, under `ParseLimits`.

Parsers are big C libraries (PDFium, libxml2, libjpeg...) fed files from strangers: a file
may make one hang, allocate without bound or crash. So parsing happens in a child process,
spawned (never forked: the parent holds NATS, Redis and ONNX Runtime threads) on first use
and kept for the next files. The child

- runs under Linux's `SCHED_IDLE` policy (and at nice `PARSER_NICE` where there is none), as
  do its OCR programs: it takes a core only when nothing else wants it, so parsing never
  slows queries; BLAS/OpenMP run on one thread;
- has `ParseLimits.memory_bytes` of address space (RLIMIT_AS; its OCR programs each have as
  much): past it an allocation fails, and the call raises `ParserFailed`;
- leads its own process group, so its OCR programs die with it;
- exits, its programs with it, when its parent dies, SIGKILLed or not (a thread watches the
  parent's pid, as `infra.runtime.background`'s child does).

A call that runs past `timeout_s` has the child SIGKILLed and `ParserFailed` raised; a child
that dies (a crash, the kernel's OOM killer) or runs out of memory is replaced, and the call
raises `ParserFailed` saying which. One call runs at a time; others wait their turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from infra.documents.model import (
    OutOfMemory,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    ParserFailed,
    display_name,
    ran_past,
)
from infra.documents.parse import parse_bytes
from infra.runtime.idle_priority import run_when_idle

T = TypeVar("T")

PARSER_NICE = 10
PARENT_WATCH_S = 1.0
KILL_GRACE_S = 0.5
"""Past `timeout_s`, how long the parent waits for the child's own (cleaner) overrun."""
_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OMP_THREAD_LIMIT",
)


def _exit_with_parent(parent_pid: int) -> None:
    """In the child: once handed to another parent (ours died), stop, OCR programs too."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_WATCH_S)
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(0)


def _child_setup(limits: ParseLimits, parent_pid: int) -> None:
    import resource

    with contextlib.suppress(OSError):  # already a group (or session) leader
        os.setpgid(0, 0)
    run_when_idle(PARSER_NICE)
    for variable in _THREAD_VARIABLES:
        os.environ[variable] = "1"
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = limits.memory_bytes if hard == resource.RLIM_INFINITY else min(limits.memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = limits.max_pixels
    threading.Thread(
        target=_exit_with_parent, args=(parent_pid,), name="parent-watch", daemon=True
    ).start()


def _serve(conn: Connection, limits: ParseLimits, parent_pid: int) -> None:
    """The child's loop: (function, args) in, ("ok", result) or an outcome out."""
    _child_setup(limits, parent_pid)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        except MemoryError:
            conn.send(("memory", ""))
            return
        if request is None:
            return
        function, args = request
        reply: tuple[str, Any]
        try:
            reply = ("ok", function(*args))
        except ParseRefused as exc:
            reply = ("refused", str(exc))
        except OutOfMemory:
            reply = ("memory", "")
        except ParserFailed as exc:
            reply = ("failed", str(exc))
        except MemoryError:
            reply = ("memory", "")
        except BaseException as exc:  # handed to the parent, as a pool would
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except MemoryError:
            conn.send(("memory", ""))
        if reply[0] == "memory":
            return  # a process that ran out of memory may be in any state: start afresh


def _describe_death(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            return f"was killed ({name}; out of memory?)"
        return f"crashed ({name})"
    return f"exited with status {exitcode}"


class ParserPool:
    """Parses in one child process under `limits` (see the module): `await parse(data,
    filename)`; `await run(function, *args)` runs any picklable module-level function there
    (tests make it hang or crash with `time.sleep`, `os.abort`). `close()` stops it."""

    def __init__(self, limits: ParseLimits | None = None) -> None:
        self.limits = limits or ParseLimits()
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._closed = False
        self.started = 0
        """Children started so far (a test's view of replacements)."""

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

    async def parse(self, data: bytes, filename: str) -> ParsedDocument:
        return await self.run(parse_bytes, data, filename, self.limits, what=filename)

    async def run(self, function: Callable[..., T], *args: Any, what: str = "") -> T:
        """`function(*args)` in the child, under the pool's time limit."""
        return await asyncio.to_thread(self.run_blocking, function, *args, what=what)

    def run_blocking(self, function: Callable[..., T], *args: Any, what: str = "") -> T:
        """`run` for callers on a thread of their own."""
        what = what or getattr(function, "__name__", "a task")
        with self._lock:
            if self._closed:
                raise ParserFailed("the parser pool is closed")
            conn = self._ensure()
            try:
                conn.send((function, args))
                answered = conn.poll(self.limits.timeout_s + KILL_GRACE_S)
            except (EOFError, OSError):
                answered = True  # the child is gone: recv says so
            if not answered:
                self._stop()
                raise ParserFailed(ran_past(self.limits.timeout_s, what))
            try:
                outcome, value = conn.recv()
            except (EOFError, OSError):
                exitcode = self._stop()
                raise ParserFailed(
                    f"the parser {_describe_death(exitcode)} on {display_name(what)}; "
                    "it was replaced"
                ) from None
            if outcome == "memory":  # the child exits after saying so: it is not reused
                self._stop()
                raise ParserFailed(
                    f"the parser ran out of memory on {display_name(what)} (limit "
                    f"{self.limits.memory_bytes / 2**30:.1f} GiB); it was stopped"
                )
        if outcome == "ok":
            return value
        if outcome == "refused":
            raise ParseRefused(value)
        if outcome == "failed":
            raise ParserFailed(value)
        raise ParserFailed(f"the parser failed on {display_name(what)} ({value})")

    def _ensure(self) -> Connection:
        process, conn = self._process, self._conn
        if process is not None and conn is not None and process.is_alive():
            return conn
        if process is not None:
            self._stop()
        context = multiprocessing.get_context("spawn")
        parent_end, child_end = context.Pipe(duplex=True)
        process = context.Process(
            target=_serve,
            args=(child_end, self.limits, os.getpid()),
            name="ragbus-parser",
            daemon=True,
        )
        process.start()
        child_end.close()
        self._process, self._conn = process, parent_end
        self.started += 1
        return parent_end

    def _stop(self) -> int | None:
        """Kill the child and its process group (its OCR programs); its exit code."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
        if process.pid is not None:
            # the group first, while the child (a zombie at worst) still holds its id; no
            # such group: the child died before it made one
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            if process.exitcode is None:
                process.kill()
        process.join(5.0)
        exitcode = process.exitcode
        if exitcode is not None:
            process.close()
        return exitcode

    def close(self) -> None:
        """Stop the child: at once if a call is running, else after it finishes its loop."""
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                if self._conn is not None and self._process is not None:
                    try:
                        self._conn.send(None)
                        self._process.join(2.0)
                    except (BrokenPipeError, OSError):
                        pass
                self._stop()
            finally:
                self._lock.release()
        else:
            self._stop()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)
