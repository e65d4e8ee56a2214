"""Runs ragbus processes: any mix of API, orchestrator and worker kinds in one process.

`ragbus up` runs everything together; `ragbus worker search` runs one kind for
scale-out. Each process declares the streams and consumers it needs (idempotent),
finds or starts NATS and Redis, and shuts down cleanly on SIGINT / SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from faststream.nats import NatsBroker, NatsRouter

from infra.errors import StartupError
from infra.logging import get_logger
from infra.runtime.blas import limit_blas_threads
from infra.runtime.bus import Bus, create_broker, declare_topology
from infra.runtime.done_fence import DoneFence
from infra.runtime.heap import settle_heap
from infra.runtime.readiness import Beacon
from infra.runtime.resources import Resources
from infra.runtime.services import Services, ensure_services, redacted
from infra.settings import Settings
from infra.telemetry import setup_tracing, shutdown_tracing
from infra.tenancy import tenants
from launcher.processes import CLI_WORKER, WorkerChild

if TYPE_CHECKING:
    from orchestrator.service import Orchestrator

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
)


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
        self.services = await ensure_services(self.requested)
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
) -> None:
    """Run until SIGINT / SIGTERM (or cancellation); `child_workers` run in a child process
    (`launcher.processes`, started as `python <child_entry> <kinds>`) on the services this one
    found or started."""
    setup_tracing(process_role(api=api, orchestrator=orchestrator, workers=workers))
    child: WorkerChild | None = None

    async def start_child(found: Settings) -> None:
        """The child starts as soon as the services answer: it loads its own models while
        this process loads its own, instead of after them."""
        nonlocal child
        child = WorkerChild(
            found,
            child_workers,
            restarts=CHILD_RESTARTS,
            window_s=CHILD_RESTART_WINDOW_S,
            entry=child_entry,
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
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # not available on Windows loops (NotImplementedError) or off the main thread
        # (RuntimeError, e.g. when a test runs `serve` in a thread): cancellation still stops it
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    server_task: asyncio.Task[None] | None = None
    supervisor: asyncio.Task[None] | None = None
    try:
        await runtime.start()
        if child is not None:
            supervisor = asyncio.create_task(child.supervise(stop), name="worker-process")
        if api:
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
            )
            server = uvicorn.Server(config)
            server_task = asyncio.create_task(server.serve(), name="uvicorn")
            # uvicorn offers a flag, not an event, for "listening".
            while not server.started and not server_task.done():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            if server_task.done():
                server_task.result()  # surface a bind error
            log.info(
                "api_listening",
                url=f"http://{runtime.settings.api_host}:{runtime.settings.api_port}",
            )
        settle_heap()  # everything start-up built is long-lived: out of the collector's walks
        limit_blas_threads(runtime.settings.blas_threads)
        if ready is not None:
            ready.set()
        waiters = [asyncio.create_task(stop.wait())]
        if server_task is not None:
            waiters.append(server_task)  # type: ignore[arg-type]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if child is not None and child.failed:
            raise StartupError(child.failed)
    finally:
        if server_task is not None and not server_task.done():
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server_task, 10)
        if child is not None:
            await child.stop()
        if supervisor is not None:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await runtime.stop()
        shutdown_tracing()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # as when adding them
                loop.remove_signal_handler(sig)
