"""The bus side of a process: any mix of orchestrator and worker kinds (`Runtime`).

Each process finds or starts NATS and Redis (`find_services`), builds its resources and the
routers of the roles it runs (`build_broker`), declares the streams and consumers it needs
(idempotent), and stops each part within a bound. `launcher.serving` runs it, the API and
`ragbus up`'s worker child around it; `launcher.layout` decides which kinds run where.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from faststream.nats import NatsBroker, NatsRouter
from nats.aio.msg import Msg
from pydantic import ValidationError

from contracts import subjects as sj
from contracts.backup import STORE_PARTS, CopyStores, StoresCopied
from infra.backup.stores import copy_stores
from infra.documents.readers import check_readers_apart
from infra.logging import get_logger
from infra.runtime.bus import Bus, create_broker
from infra.runtime.data_lock import unusable
from infra.runtime.done_fence import DoneFence
from infra.runtime.readiness import Beacon
from infra.runtime.resources import Resources
from infra.runtime.services import Services, ensure_services, redacted
from infra.runtime.tenant_lanes import LanesRouter
from infra.runtime.topology import declare_topology
from infra.settings import Settings
from infra.tenancy import tenants
from launcher.layout import STORE_OWNERS, WORKER_KINDS, replicas_wanted

if TYPE_CHECKING:
    from launcher.replicas import Replicas
    from orchestrator.service import Orchestrator

log = get_logger(__name__)

PARSE = "parse"
INGEST = "ingest"

ResourcesFactory = Callable[[Settings, Bus], Resources]
"""Makes a process's resources; `Resources` itself, or engines of another kind (the bus
benchmark's instant ones)."""


def worker_router(kind: str, resources: Resources) -> NatsRouter:
    """The router of one worker kind, imported only when the process runs it."""
    if kind not in WORKER_KINDS:
        raise ValueError(f"unknown worker kind {kind!r}; choose from {', '.join(WORKER_KINDS)}")
    module = importlib.import_module(f"workers.{kind}")
    router: NatsRouter = module.create_router(resources)
    return router


def build_broker(
    resources: Resources, *, orchestrator: bool, workers: Sequence[str], for_schema: bool = False
) -> Orchestrator | None:
    """Attach the routers this process runs to the resources' broker; `for_schema`: a broker
    only documented (`ragbus asyncapi`), never started, whose lanes are described whole."""
    broker = resources.bus.broker
    orch = None
    if orchestrator:
        from orchestrator.service import Orchestrator, create_router

        orch = Orchestrator(resources)
        broker.include_router(create_router(resources, orch))
    for kind in workers:
        router = worker_router(kind, resources)
        if for_schema and isinstance(router, LanesRouter):
            router.document()
        broker.include_router(router)
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
        self.not_ready: dict[str, list[str]] = {}
        """Roles this process runs but does not announce, with why (`_readers_load`)."""
        self.lanes: list[LanesRouter] = []
        """Routers whose subscribers open as tenants' work appears, once the broker runs."""
        self.replicas: Replicas | None = None
        """The search replicas this process started, when it owns the stores and has some."""

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
        # the parse role's readers are checked in an interpreter of their own meanwhile: its
        # subscriber joins the broker only once they load (`_readers_load`)
        readers = asyncio.ensure_future(check_readers_apart()) if PARSE in self.workers else None
        try:
            self.orchestrator = build_broker(
                self.resources,
                orchestrator=self.run_orchestrator,
                workers=[kind for kind in self.workers if kind != PARSE],
            )
            parse = worker_router(PARSE, self.resources) if readers is not None else None
            started = time.perf_counter()
            await self.resources.warm_up()  # before any subscriber takes a message
            log.info(
                "warmed_up", workers=self.workers, seconds=round(time.perf_counter() - started, 2)
            )
            if parse is not None and readers is not None and await self._readers_load(readers):
                self.broker.include_router(parse)
                if isinstance(parse, LanesRouter):
                    self.lanes.append(parse)
        finally:
            if readers is not None:
                readers.cancel()
        await self.broker.connect()
        js = self.broker.connection.jetstream()
        await declare_topology(js, self.settings)
        self.resources.bus.fence = DoneFence(js)
        await self.broker.start()
        if INGEST in self.workers:  # this process owns the embedded stores: it copies them
            await self.broker.connection.subscribe(sj.BACKUP_STORES, cb=self._copy_stores)
        replicas = replicas_wanted(self.settings, self.workers)
        if replicas:
            from launcher.replicas import Replicas

            self.replicas = Replicas(self.settings, replicas)
            await self.replicas.start(self.resources, self.broker.connection)
        for lanes in self.lanes:
            await lanes.open(js)
        if self.orchestrator is not None:
            self.orchestrator.start_timer()
        roles = (["orchestrator"] if self.run_orchestrator else []) + [
            kind for kind in self.workers if kind not in self.not_ready
        ]
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

    async def _copy_stores(self, msg: Msg) -> None:
        """`ragbus backup` asks the process that owns the embedded stores to copy them at one
        point (`contracts.subjects.BACKUP_STORES`); the answer says what it copied."""
        assert self.resources is not None
        try:
            request = CopyStores.model_validate_json(msg.data)
            answer = await copy_stores(
                self.resources, Path(request.directory), request.stores or STORE_PARTS
            )
        except ValidationError as exc:
            answer = StoresCopied(error=f"a malformed request ({exc.error_count()} errors)")
        except Exception as exc:
            log.exception("stores_not_copied")
            answer = StoresCopied(error=f"{type(exc).__name__}: {exc}")
        log.info("stores_copied", copied=answer.copied, error=answer.error)
        if msg.reply:
            await msg.respond(answer.model_dump_json().encode())

    async def _readers_load(self, checking: asyncio.Future[list[str]]) -> bool:
        """Whether the parse role's readers all load. A parse worker whose readers do not (a
        library or tesseract missing) is not ready: it takes no file (each would fail on the
        server's fault) and does not announce the role, and its log says what is missing. Once
        they load (the install fixed, and the worker started again) it takes files."""
        problems = await checking
        if problems:
            self.not_ready[PARSE] = problems
            log.error(
                "parse_not_ready",
                problems=problems,
                hint="install what is missing, then start the worker again",
            )
        return not problems

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
        if self.replicas is not None and self.resources is not None:
            await _bounded("search replicas", self.replicas.stop(self.resources))
        for lanes in self.lanes:
            await _bounded("lanes", lanes.close())
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
