"""`ragbus up` on more than one core: the child process that runs the other worker kinds.

One Python process is one GIL: under load `ragbus up` in one process kept a single core busy
while the other waited. With two processes the API, the saga, the classifier, generation and
the critic run in the parent (`launcher.layout.UP_PARENT`) and every other worker kind in a
child started with `python -m cli worker <kinds>`, on the services the parent found or
started, with the parent's `RAGBUS_HOST_PROCESSES` (how many stacks share the cores:
`infra.threads`). The parent restarts a child that dies (at most
`launcher.serving.CHILD_RESTARTS` times a minute, then it stops too, so a supervisor sees the
failure) and stops it before the services it started.

It also holds what every long-running command does on SIGINT and SIGTERM (`StopSignals`): the
first signal asks for a clean stop and starts a deadline (`STOP_DEADLINE_S`), after which
whatever this process started that still runs is killed; a second signal kills it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

from infra.logging import get_logger
from infra.runtime.parent_death import stop_with_parent
from infra.settings import Settings

log = get_logger(__name__)

STOP_TIMEOUT_S = 6.0
"""How long the child gets to stop after SIGTERM before it is killed: inside the process's
own `STOP_DEADLINE_S`, with time left to stop the services after it."""
CLI_WORKER = ("-m", "cli", "worker")
"""How the child is started by default: `python -m cli worker <kinds>`."""


class WorkerChild:
    def __init__(
        self,
        settings: Settings,
        kinds: Sequence[str],
        *,
        restarts: int,
        window_s: float,
        entry: Sequence[str] = CLI_WORKER,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.extra_env = dict(env or {})
        """More for the child's environment (that its parent holds the data directory's lock:
        `infra.runtime.data_lock.child_env`)."""
        self.entry = tuple(entry)
        """The child's `python` arguments before its kinds (the bus benchmark's instant stack
        starts its own module)."""
        self.kinds = list(kinds)
        self.restarts = restarts
        self.window_s = window_s
        self.process: asyncio.subprocess.Process | None = None
        self.failed: str | None = None
        self._stopping = False
        self._signalled: int | None = None
        """The PID `terminate` sent its SIGTERM to (`stop` sends none again)."""

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RAGBUS_NATS_URL": self.settings.nats_url,
            "RAGBUS_REDIS_URL": self.settings.redis_url,
            **(
                {"RAGBUS_NATS_CREDS": str(self.settings.nats_creds)}
                if self.settings.nats_creds
                else {}
            ),
            "RAGBUS_DATA_DIR": str(self.settings.data_dir.resolve()),
            "RAGBUS_START_SERVICES": "false",
            # the child sizes its thread pools to the same share of the cores as this process
            "RAGBUS_HOST_PROCESSES": str(self.settings.host_processes),
            **self.extra_env,
        }

    async def start(self) -> None:
        # a process group of its own: a Ctrl-C reaches this process only, which stops the
        # child (one SIGTERM, a clean stop) rather than the child seeing two signals
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            *self.entry,
            *self.kinds,
            env=self._env(),
            process_group=0,
            preexec_fn=stop_with_parent,  # a killed `ragbus up` leaves no worker
        )
        log.info("worker_process_started", pid=self.process.pid, workers=self.kinds)

    async def supervise(self, stop: asyncio.Event) -> None:
        """Restart the child when it exits on its own; set `stop` when it keeps dying."""
        exits: list[float] = []
        while not (self._stopping or stop.is_set()):
            assert self.process is not None
            code = await self.process.wait()
            # a Ctrl-C reaches the child too (one process group): it may exit before this
            # process stops it, and that is no crash to restart
            if self._stopping or stop.is_set():
                return
            now = time.monotonic()
            exits = [t for t in exits if now - t < self.window_s] + [now]
            log.error("worker_process_exited", code=code, workers=self.kinds, exits=len(exits))
            if len(exits) > self.restarts:
                self.failed = (
                    f"the worker process ({', '.join(self.kinds)}) exited {len(exits)} times "
                    f"within {self.window_s:g} s, last with code {code}"
                )
                stop.set()
                return
            await asyncio.sleep(1.0)
            if self._stopping or stop.is_set():
                return
            await self.start()

    def terminate(self) -> None:
        """Ask the child to stop (SIGTERM) without waiting: it stops beside this process's
        own parts; `stop` then waits for it."""
        self._stopping = True
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            self._signalled = process.pid

    async def stop(self) -> None:
        self._stopping = True
        process = self.process
        if process is None or process.returncode is not None:
            return
        if self._signalled != process.pid:  # a second SIGTERM would stop it at once, uncleanly
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("worker_process_killed", pid=process.pid, timeout_s=STOP_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        log.info("worker_process_stopped", pid=process.pid, code=process.returncode)


STOP_DEADLINE_S = 9.0
"""After the first SIGINT / SIGTERM, whatever this process started that still runs this long
after (its worker child, the nats-server and redis-server it started) is killed, and the
process exits: every stop ends within 10 s."""
EXIT_GRACE_S = 0.5
"""Once a signalled stop has stopped every part, how long the interpreter gets to exit on its
own: a thread still loading a model (`asyncio.to_thread`, which cannot be cancelled) would
hold the exit until it is done."""


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, children before their own (Linux `/proc`)."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found.append(child)
                    queue.append(child)
    return found


def kill_descendants() -> list[int]:
    """SIGKILL every process below this one (its worker child and that child's own, the
    services it started); the PIDs killed."""
    killed = descendants(os.getpid())
    for pid in killed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return killed


class StopSignals:
    """SIGINT and SIGTERM for the whole process, whichever command runs (`serve`, `ragbus
    demo`): Python-level handlers (`signal.signal`), so a signal is seen even while the event
    loop waits on a thread, and they stay in charge while uvicorn serves (`launcher.serving`
    keeps uvicorn from installing its own).

    The first signal calls every listener on its loop (the command stops cleanly) and wakes a
    watchdog thread: `STOP_DEADLINE_S` later, whatever this process started that still runs
    is killed and the process exits with 128 + the signal's number; once the command says it
    has stopped everything (`stopped`), the process exits with the command's code after
    `EXIT_GRACE_S` if it has not exited by itself (killing any helper process still left). A
    second signal kills what is left at once and exits the same way. The handler itself takes
    no lock (it may interrupt the main thread while that holds one, a log line's say): it sets
    an event, wakes the loops, and on a second signal kills and exits."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.received = 0
        self._listeners: list[tuple[asyncio.AbstractEventLoop, Callable[[], object]]] = []
        self._previous: dict[int, object] = {}
        self._signalled = threading.Event()
        self._done = threading.Event()
        self._watchdog_thread: threading.Thread | None = None
        self._code = 0

    @contextlib.contextmanager
    def listen(self, on_stop: Callable[[], object]) -> Iterator[None]:
        """Call `on_stop` on the running loop at the first SIGINT / SIGTERM (at once when one
        came already). Off the main thread (a test runs `serve` in one) no handler can be
        installed: cancellation still stops the command."""
        loop = asyncio.get_running_loop()
        installed = self._install()
        entry = (loop, on_stop)
        self._listeners.append(entry)
        if self.received:
            loop.call_soon(on_stop)
        try:
            yield
        finally:
            self._listeners.remove(entry)
            if installed and not self._listeners and not self.received:
                self._uninstall()  # after a signal they stay: another one kills what is left

    def stopped(self, code: int) -> None:
        """The command has stopped every part it started; after a signal, the process exits
        with `code` soon even if a thread would hold the interpreter."""
        self._code = code
        self._done.set()

    def _install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        if self._watchdog_thread is None:
            self._watchdog_thread = threading.Thread(
                target=self._watchdog, name="stop-watchdog", daemon=True
            )
            self._watchdog_thread.start()
        if not self._previous:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return True

    def _uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.received == 1:
            self.signum = signum
            self._signalled.set()
            for loop, on_stop in list(self._listeners):
                with contextlib.suppress(RuntimeError):  # a closed loop
                    loop.call_soon_threadsafe(on_stop)
            return
        kill_descendants()
        with contextlib.suppress(OSError):
            os.write(2, b"ragbus: stopped at once (a second signal); what it started is killed\n")
        os._exit(128 + signum)

    def _watchdog(self) -> None:
        self._signalled.wait()
        signum = self.signum or signal.SIGTERM
        log.info("stopping", signal=signal.Signals(signum).name, deadline_s=STOP_DEADLINE_S)
        if self._done.wait(STOP_DEADLINE_S):
            time.sleep(EXIT_GRACE_S)  # the interpreter normally exits before this ends
            # the command stopped its parts; what is left is on its way out with this process
            # (a pool's worker, multiprocessing's resource tracker): it goes too
            left = kill_descendants()
            log.info("stop_exit", code=self._code, killed=left)
            _exit(self._code)
        killed = kill_descendants()
        log.warning("stop_deadline_passed", deadline_s=STOP_DEADLINE_S, killed=killed)
        _exit(128 + signum)


def _exit(code: int) -> None:
    """Exit from the watchdog thread: what the main thread wrote is flushed first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


SIGNALS = StopSignals()
"""The process's one `StopSignals`."""
