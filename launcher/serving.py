"""Serving a process from start to stop: what it checks before it starts anything, its
`Runtime`, the API on its port, `ragbus up`'s worker child, and every part stopped in order.

Failing well (`serve`): before anything starts, the process that owns the data directory
takes its lock (`infra.runtime.data_lock`) and an API binds its port (`reserve_api_port`), so
a start that cannot work ends at once with one sentence (`StartupError`). A signal stops it in
every state, starting included (`launcher.processes.StopSignals`): its worker child and the
services it started are stopped, or killed `launcher.processes.STOP_DEADLINE_S` after the
signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from infra.errors import StartupError
from infra.logging import get_logger
from infra.runtime.blas import limit_blas_threads
from infra.runtime.data_lock import DataLock, acquire, child_env, lock_needed
from infra.runtime.heap import settle_heap
from infra.runtime.resources import Resources
from infra.settings import Settings
from infra.telemetry import setup_tracing, shutdown_tracing
from launcher.processes import CLI_WORKER, SIGNALS, WorkerChild
from launcher.runtime import ResourcesFactory, Runtime

if TYPE_CHECKING:
    import uvicorn

T = TypeVar("T")

log = get_logger(__name__)

CHILD_RESTARTS = 5
"""Child exits within `CHILD_RESTART_WINDOW_S` before `ragbus up` gives up and stops."""
CHILD_RESTART_WINDOW_S = 60.0


def process_role(*, api: bool, orchestrator: bool, workers: Sequence[str]) -> str:
    """What this process is, for its traces' `service.name` (`ragbus-<role>`)."""
    if api:
        return "api"
    if orchestrator:
        return "orchestrator"
    return "worker-" + "-".join(workers) if workers else "idle"


API_STOP_TIMEOUT_S = 4.0
"""How long the API gets to close its connections (an open event stream included) when the
process stops; uvicorn's own graceful shutdown ends a second before."""


def port_in_use(port: int) -> str:
    return (
        f"port {port} (RAGBUS_API_PORT) is in use by another program; stop it or set "
        "RAGBUS_API_PORT to a free port"
    )


def reserve_api_port(host: str, port: int) -> socket.socket:
    """The API's socket, bound now (before any model loads or service starts) and held until
    uvicorn listens on it, so the port cannot be taken in between and a taken one ends the
    start at once, in one sentence (`StartupError`): uvicorn itself would log the error and
    call `sys.exit` inside the event loop."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Named TCP, as getaddrinfo names it for uvicorn's own sockets: asyncio turns Nagle's
    # algorithm off only on a connection whose socket says IPPROTO_TCP, and an accepted one
    # takes the listener's. With proto 0, a kept-alive connection's response waited for the
    # client's delayed ACK: 40 ms a request (docs/benchmarks.md, "Where the time goes").
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(port_in_use(port)) from None
        raise StartupError(
            f"the API cannot listen on {host}:{port} ({(exc.strerror or str(exc)).lower()}); "
            "set RAGBUS_API_HOST to an address of this machine and RAGBUS_API_PORT to a free port"
        ) from None
    return sock


@contextlib.contextmanager
def preflight(
    settings: Settings, *, api: bool, kinds: Sequence[str]
) -> Iterator[tuple[DataLock | None, socket.socket | None]]:
    """What a process checks before it starts anything: the data directory's lock when it
    runs a kind that owns a store (`data_lock.lock_needed`), then the API's port. Both are
    held for the block; a failure raises `StartupError` with the sentence to print."""
    lock = acquire(settings.data_dir) if lock_needed(settings, kinds) else None
    try:
        sock = reserve_api_port(settings.api_host, settings.api_port) if api else None
        try:
            yield lock, sock
        finally:
            if sock is not None:
                sock.close()
    finally:
        if lock is not None:
            lock.release()


class _ApiServer:
    """uvicorn's server without its signal handlers: `StopSignals` stays in charge, so a
    signal stops the whole process, not the API alone; and a start that fails (its lifespan,
    its socket) raises `StartupError` rather than calling `sys.exit` in the loop."""

    def __init__(self, config: uvicorn.Config) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        self.server = Server(config)
        self.port = config.port

    async def serve(self, sock: socket.socket) -> None:
        try:
            await self.server.serve(sockets=[sock])
        except SystemExit:
            raise StartupError(
                "the API did not start (its start-up failed; the log above says why)"
            ) from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(port_in_use(self.port)) from None
            raise


async def _uncancellable(stopping: Coroutine[Any, Any, T]) -> T:
    """Run `stopping` to its end even when the caller is cancelled meanwhile (a stop must not
    stop half-way); the cancellation is passed on afterwards."""
    task = asyncio.ensure_future(stopping)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


async def serve(
    settings: Settings,
    *,
    api: bool,
    orchestrator: bool,
    workers: Sequence[str],
    ready: asyncio.Event | None = None,
    resources_factory: ResourcesFactory = Resources,
    child_workers: Sequence[str] = (),
    child_entry: Sequence[str] = CLI_WORKER,
    api_socket: socket.socket | None = None,
) -> None:
    """Run until SIGINT / SIGTERM (or cancellation); `child_workers` run in a child process
    (`launcher.processes`, started as `python <child_entry> <kinds>`) on the services this one
    found or started. `api_socket`: the API's port, already bound (`preflight`).

    It returns once every part is stopped: on a signal while starting (the start is
    cancelled), while serving, or while it stops after a failure; it raises `StartupError`
    when it cannot start, after stopping what it started."""
    stop = asyncio.Event()
    with (
        SIGNALS.listen(stop.set),
        preflight(settings, api=api and api_socket is None, kinds=[*workers, *child_workers]) as (
            lock,
            reserved,
        ),
    ):
        await _serve(
            settings,
            stop,
            api_socket=api_socket or reserved,
            lock=lock,
            orchestrator=orchestrator,
            workers=workers,
            ready=ready,
            resources_factory=resources_factory,
            child_workers=child_workers,
            child_entry=child_entry,
        )


async def _first(task: asyncio.Task[Any], stop: asyncio.Event) -> bool:
    """Wait for `task` or `stop`: whether the task finished first."""
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    return task.done()


async def _serve(
    settings: Settings,
    stop: asyncio.Event,
    *,
    api_socket: socket.socket | None,
    lock: DataLock | None,
    orchestrator: bool,
    workers: Sequence[str],
    ready: asyncio.Event | None,
    resources_factory: ResourcesFactory,
    child_workers: Sequence[str],
    child_entry: Sequence[str],
) -> None:
    api = api_socket is not None
    setup_tracing(process_role(api=api, orchestrator=orchestrator, workers=workers))
    child: WorkerChild | None = None

    async def start_child(found: Settings) -> None:
        """The child starts as soon as the services answer: it loads its own models while
        this process loads its own, instead of after them."""
        nonlocal child
        if stop.is_set():
            return
        child = WorkerChild(
            found,
            child_workers,
            restarts=CHILD_RESTARTS,
            window_s=CHILD_RESTART_WINDOW_S,
            entry=child_entry,
            env=child_env(lock),
        )
        await child.start()

    runtime = Runtime(
        settings,
        orchestrator=orchestrator,
        workers=workers,
        resources_factory=resources_factory,
        child_workers=child_workers,
        on_services=start_child if child_workers else None,
    )
    starting: asyncio.Task[None] | None = None
    api_server: _ApiServer | None = None
    server_task: asyncio.Task[None] | None = None
    supervisor: asyncio.Task[None] | None = None

    async def stop_all() -> None:
        """Every part, the child beside this process's own, the services last."""
        if starting is not None and not starting.done():
            starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
        if child is not None:
            child.terminate()
        if api_server is not None and server_task is not None and not server_task.done():
            api_server.server.should_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(server_task, API_STOP_TIMEOUT_S)
        if child is not None:
            await child.stop()
        if supervisor is not None:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await runtime.stop()
        shutdown_tracing()

    try:
        starting = asyncio.create_task(runtime.start(), name="ragbus-start")
        if not await _first(starting, stop):
            log.info("start_cancelled", reason="signal")
            return  # a signal while starting: stop what started
        starting.result()  # a start-up error
        if child is not None:
            supervisor = asyncio.create_task(child.supervise(stop), name="worker-process")
        if api_socket is not None:
            import uvicorn

            from api.app import create_app

            assert runtime.broker is not None
            app = create_app(
                runtime.settings, broker=runtime.broker, orchestrator=runtime.orchestrator
            )
            config = uvicorn.Config(
                app,
                host=runtime.settings.api_host,
                port=runtime.settings.api_port,
                log_config=None,
                access_log=False,
                lifespan="on",
                timeout_graceful_shutdown=int(API_STOP_TIMEOUT_S) - 1,
            )
            api_server = _ApiServer(config)
            server_task = asyncio.create_task(api_server.serve(api_socket), name="uvicorn")
            # uvicorn offers a flag, not an event, for "listening".
            while not api_server.server.started and not server_task.done():
                if stop.is_set():
                    return
                await asyncio.sleep(0.05)
            if server_task.done():
                server_task.result()  # a start-up error
                raise StartupError("the API stopped as it started (the log above says why)")
            log.info(
                "api_listening",
                url=f"http://{runtime.settings.api_host}:{runtime.settings.api_port}",
            )
        settle_heap()  # everything start-up built is long-lived: out of the collector's walks
        limit_blas_threads(runtime.settings.blas_threads)
        if ready is not None:
            ready.set()
        if server_task is None:
            await stop.wait()
        elif await _first(server_task, stop):
            server_task.result()  # the API failed while serving
        if child is not None and child.failed:
            raise StartupError(child.failed)
    finally:
        await _uncancellable(stop_all())
