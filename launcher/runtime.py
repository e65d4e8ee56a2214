"""Runs ragbus processes: any mix of API, orchestrator and worker kinds in one process.

`ragbus up` runs everything together; `ragbus worker search` runs one kind for
scale-out. Each process declares the streams and consumers it needs (idempotent),
finds or starts NATS and Redis, and shuts down cleanly on SIGINT / SIGTERM.

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
import importlib
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from faststream.nats import NatsBroker, NatsRouter

from infra.errors import StartupError
from infra.logging import get_logger
from infra.runtime.blas import limit_blas_threads
from infra.runtime.bus import Bus, create_broker, declare_topology
from infra.runtime.data_lock import DataLock, acquire, child_env, lock_needed, unusable
from infra.runtime.done_fence import DoneFence
from infra.runtime.heap import settle_heap
from infra.runtime.readiness import Beacon
from infra.runtime.resources import Resources
from infra.runtime.services import Services, ensure_services, redacted
from infra.settings import Settings
from infra.telemetry import setup_tracing, shutdown_tracing
from infra.tenancy import tenants
from launcher.processes import CLI_WORKER, SIGNALS, WorkerChild

if TYPE_CHECKING:
    import uvicorn

    from orchestrator.service import Orchestrator

T = TypeVar("T")

log = get_logger(__name__)

STORE_OWNERS = frozenset({"search", "fuse", "ingest", "tool"})
"""Worker kinds that read or write the vector store (the embedded one belongs to their process)."""

UP_PARENT = ("classify", "generate", "critic")
"""What `ragbus up` runs next to the API and the saga when it uses two processes; every other
kind runs in the child. The store readers (search, fusion, tools) must run in the child, the
process that ingests (`embedded_layout_problem`). Generation and the critic read no store, and
in the parent they balance the two GILs: on NFCorpus at c = 8 the child held its GIL 86 % of
the time and the parent 51 %, and the move gave 7 % more q/s (docs/benchmarks.md)."""
CHILD_RESTARTS = 5
"""Child exits within `CHILD_RESTART_WINDOW_S` before `ragbus up` gives up and stops."""
CHILD_RESTART_WINDOW_S = 60.0

ResourcesFactory = Callable[[Settings, Bus], Resources]
"""Makes a process's resources; `Resources` itself, or engines of another kind (the bus
benchmark's instant ones)."""

WORKER_KINDS: tuple[str, ...] = (
    "classify",
    "search",
    "fuse",
    "generate",
    "critic",
    "tool",
    "ingest",
    "memory",
    "parse",
)
"""`parse` makes uploaded files into documents for `ingest`; it owns no store (it is not in
`STORE_OWNERS`), and `ragbus up` runs it in its worker child, off the API's process."""


STORE_READERS = frozenset({"search", "fuse", "tool"})


def up_layout(
    settings: Settings, kinds: Sequence[str] = WORKER_KINDS
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """How `ragbus up` places `kinds`: (those of the process that serves the API and the
    saga, those of its worker child). One process when `RAGBUS_UP_PROCESSES` is 1, or when it
    is 0 on a single core; else `UP_PARENT` in the first and the rest in the child."""
    processes = settings.up_processes or (2 if (os.cpu_count() or 1) >= 2 else 1)
    if processes == 1:
        return tuple(kinds), ()
    parent = tuple(kind for kind in kinds if kind in UP_PARENT)
    return parent, tuple(kind for kind in kinds if kind not in UP_PARENT)


def embedded_layout_problem(settings: Settings, kinds: Sequence[str]) -> str | None:
    """Why these worker kinds cannot run together in one process, or None.

    The embedded stores (Qdrant Edge, the graph file) live in the process that opens them:
    another process loads them once and never sees what `ingest` writes later. So in
    embedded mode the kinds that read them run in the process that ingests."""
    embedded = [
        name
        for name, url in (("vectors", settings.qdrant_url), ("graph", settings.neo4j_uri))
        if not url
    ]
    readers = sorted(STORE_READERS.intersection(kinds))
    if not embedded or not readers or "ingest" in kinds:
        return None
    return (
        f"{', '.join(readers)} would read the embedded {' and '.join(embedded)} store, which "
        "only the process that ingests sees up to date: run it in that process (for example "
        "`ragbus worker search fuse tool ingest`, or `ragbus up`), or use the servers "
        "(RAGBUS_QDRANT_URL, RAGBUS_NEO4J_URI)"
    )


def worker_router(kind: str, resources: Resources) -> NatsRouter:
    """The router of one worker kind, imported only when the process runs it."""
    if kind not in WORKER_KINDS:
        raise ValueError(f"unknown worker kind {kind!r}; choose from {', '.join(WORKER_KINDS)}")
    module = importlib.import_module(f"workers.{kind}")
    router: NatsRouter = module.create_router(resources)
    return router


def build_broker(
    resources: Resources, *, orchestrator: bool, workers: Sequence[str]
) -> Orchestrator | None:
    """Attach the routers this process runs to the resources' broker."""
    broker = resources.bus.broker
    orch = None
    if orchestrator:
        from orchestrator.service import Orchestrator, create_router

        orch = Orchestrator(resources)
        broker.include_router(create_router(resources, orch))
    for kind in workers:
        broker.include_router(worker_router(kind, resources))
    return orch


class Runtime:
    """The bus side of a process: services, broker, subscribers and the deadline timer."""

    def __init__(
        self,
        settings: Settings,
        *,
        orchestrator: bool = True,
        workers: Sequence[str] = WORKER_KINDS,
        resources_factory: ResourcesFactory = Resources,
        child_workers: Sequence[str] = (),
        on_services: Callable[[Settings], Awaitable[None]] | None = None,
    ) -> None:
        self.child_workers = list(child_workers)
        # called with the settings of the services found or started, before this process loads
        # its models: `serve` starts its worker child there, so the two load side by side
        self.on_services = on_services
        self.requested = settings
        self.resources_factory = resources_factory
        self.run_orchestrator = orchestrator
        self.workers = list(workers)
        self.services: Services | None = None
        self.settings = settings
        self.broker: NatsBroker | None = None
        self.resources: Resources | None = None
        self.orchestrator: Orchestrator | None = None
        self.beacon: Beacon | None = None

    async def start(self) -> None:
        owners = STORE_OWNERS.intersection([*self.workers, *self.child_workers])
        if owners and not self.requested.qdrant_url:
            from infra.retrieval.vectors.legacy import refuse_unmigrated

            refuse_unmigrated(self.requested)  # before anything starts: a clear message
        self.services = await find_services(self.requested, self)
        self.settings = self.services.settings
        if self.on_services is not None:
            await self.on_services(self.settings)
        self.broker = create_broker(self.settings)
        self.resources = self.resources_factory(
            self.settings, Bus.from_settings(self.broker, self.settings)
        )
        self.orchestrator = build_broker(
            self.resources, orchestrator=self.run_orchestrator, workers=self.workers
        )
        started = time.perf_counter()
        await self.resources.warm_up()  # before any subscriber takes a message
        log.info("warmed_up", workers=self.workers, seconds=round(time.perf_counter() - started, 2))
        await self.broker.connect()
        js = self.broker.connection.jetstream()
        await declare_topology(js, self.settings)
        self.resources.bus.fence = DoneFence(js)
        await self.broker.start()
        if self.orchestrator is not None:
            self.orchestrator.start_timer()
        roles = (["orchestrator"] if self.run_orchestrator else []) + self.workers
        self.beacon = Beacon(self.resources.redis(), roles)
        await self.beacon.start()
        await self._publish_tenants()
        log.info(
            "runtime_started",
            orchestrator=self.run_orchestrator,
            workers=self.workers,
            auth=self.settings.auth,
            nats=redacted(self.settings.nats_url),
            redis=redacted(self.settings.redis_url),
        )

    async def _publish_tenants(self) -> None:
        """In `tenants` mode, an orchestrator's process that holds the operator's keys pushes
        the service account and every tenant's account to the servers again, so a server with
        a new resolver directory knows them all (idempotent: several may)."""
        if self.settings.auth != "tenants" or not self.run_orchestrator:
            return
        if self.resources is None or not self.settings.trust_dir.exists():
            return
        try:
            trust = tenants.trust_for(self.settings)
            count = await tenants.reconcile(self.resources.redis(), self.settings, trust)
        except Exception as exc:  # the roles run; tenants made before wait for the next start
            log.warning("tenants_not_published", error=f"{type(exc).__name__}: {exc}")
            return
        log.info("tenants_published", tenants=count)

    async def stop(self) -> None:
        """Stop every part, each within `STOP_STEP_TIMEOUT_S`: a broker whose server vanished
        can wait forever on its consumers, and that must not keep the process (and the
        services it started) alive."""
        if self.beacon is not None:
            await _bounded("readiness", self.beacon.stop())
        if self.orchestrator is not None:
            await _bounded("orchestrator", self.orchestrator.stop_timer())
        if self.broker is not None:
            await _bounded("broker", self.broker.stop())
        if self.resources is not None:
            await _bounded("resources", self.resources.aclose())
        if self.services is not None:
            self.services.stop()
        log.info("runtime_stopped")


STOP_STEP_TIMEOUT_S = 10.0
SERVICES_WAIT_S = 20.0
"""How long a cancelled start waits for the thread that finds or starts the services (its
own waits end within 15 s a service) before it stops what that thread started."""


async def find_services(settings: Settings, into: Runtime | None = None) -> Services:
    """`ensure_services`, safe to cancel: its thread cannot be stopped, so a cancelled caller
    still waits for it and stops whatever it started (or hands it to `into`, whose `stop`
    stops it), rather than leaving a nats-server or a redis-server behind. A data directory
    the services cannot be put in is said in one sentence."""
    finding = asyncio.ensure_future(ensure_services(settings))
    try:
        return await asyncio.shield(finding)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            services = await asyncio.wait_for(finding, SERVICES_WAIT_S)
            if into is not None:
                into.services = services
            else:
                services.stop()
        raise
    except OSError as exc:
        if _under(exc.filename, settings.data_dir):
            raise unusable(settings.data_dir.absolute(), exc) from None
        raise


def _under(filename: object, folder: Path) -> bool:
    if not isinstance(filename, str | os.PathLike):
        return False
    path, root = os.path.abspath(filename), os.path.abspath(folder)
    return path == root or path.startswith(root + os.sep)


async def _bounded(part: str, stopping: Awaitable[object]) -> None:
    try:
        await asyncio.wait_for(stopping, STOP_STEP_TIMEOUT_S)
    except TimeoutError:
        log.warning("stop_timed_out", part=part, timeout_s=STOP_STEP_TIMEOUT_S)
    except Exception as exc:  # stopping goes on: the next parts still need their turn
        log.warning("stop_failed", part=part, error=f"{type(exc).__name__}: {exc}")


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
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
