"""Search replicas: sibling processes that answer search commands from copies of the embedded
stores, so the searches of a store-owning process use more than its one GIL.

The owner (the process that runs `ingest` and `search` on embedded stores) starts
`RAGBUS_SEARCH_REPLICAS` of them (`Replicas`), each `python -m cli search-replica <name>`,
restarted when one dies. A replica (`run_replica`):
- asks the owner for a copy of the vectors and the graph at one point (the backup's own
  request, `contracts.subjects.BACKUP_STORES`, for those two stores), under
  `$RAGBUS_DATA_DIR/replicas/<name>/<generation>`, and is told which writes the copy holds;
- opens it and serves from it: the owner hands it search commands while the copy holds every
  write (`infra.runtime.replica_hub`), and it says every `ANNOUNCE_EVERY_S` which copy it
  serves from;
- asks the owner every `POLL_S` which writes the stores hold; when they moved past its copy and
  then held still for `RAGBUS_SEARCH_REPLICA_SETTLE_S`, it fetches a new copy, serves from it,
  and closes and deletes the old one once the commands that began on it have ended.
A copy is not fetched while the stores are larger than `MEMORY_SHARE` of the memory available
or the disk has not twice their size free: the owner answers alone then, and the replica's
announcement says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from pathlib import Path

from nats.aio.client import Client as NatsClient

from contracts import subjects as sj
from contracts.backup import CopyStores, StoresCopied
from contracts.replicas import ReplicaSeen, StoresVersion
from infra.logging import get_logger
from infra.retrieval.graph.embedded import EmbeddedGraphStore
from infra.retrieval.graph.store import GraphStore, open_graph_store
from infra.retrieval.vectors import VectorStore, open_vector_store
from infra.runtime.bus import Bus, create_broker
from infra.runtime.done_fence import DoneFence
from infra.runtime.replica_hub import ReplicaHub, ServedCopy
from infra.runtime.resources import Resources
from infra.settings import Settings
from infra.sparse_copy import bytes_on_disk
from infra.threads import available_memory
from launcher.processes import WorkerChild

log = get_logger(__name__)

REPLICA_ENTRY = ("-m", "cli", "search-replica")
"""How the owner starts a replica: `python -m cli search-replica <name>`."""
POLL_S = 1.0
"""How often a replica asks the owner which writes the stores hold."""
ANNOUNCE_EVERY_S = 2.0
COPY_TIMEOUT_S = 900.0
"""How long a replica waits for the owner to copy the stores (about a second a hundred MB)."""
MEMORY_SHARE = 0.5
"""A copy is fetched only while the stores take at most this share of the memory available."""
CLOSE_OLD_AFTER_S = 120.0
"""The longest an old copy waits for the commands begun on it before it is closed anyway."""
RESTARTS, RESTART_WINDOW_S = 3, 60.0


def replica_names(count: int) -> list[str]:
    return [f"r{i}" for i in range(count)]


def stores_version(resources: Resources, vectors: VectorStore, graph: GraphStore) -> StoresVersion:
    """The owner's stores' version now."""
    changes = graph.changes if isinstance(graph, EmbeddedGraphStore) else 0
    return StoresVersion(owner=resources.stores_token, vectors=vectors.writes, graph=changes)


class Replicas:
    """The owner's side: the hub it hands commands through, and the replica processes."""

    def __init__(self, settings: Settings, count: int) -> None:
        self.settings = settings
        self.count = count
        self.hub: ReplicaHub | None = None
        self.children: list[WorkerChild] = []
        self._supervisors: list[asyncio.Task[None]] = []
        self.failed = asyncio.Event()

    async def start(self, resources: Resources, nc: NatsClient) -> None:
        vectors, graph = await resources.vectors(), await resources.graph()
        self.hub = ReplicaHub(nc, lambda: stores_version(resources, vectors, graph))
        await self.hub.start()
        resources.search_replicas = self.hub
        for name in replica_names(self.count):
            child = WorkerChild(
                self.settings,
                [name],
                restarts=RESTARTS,
                window_s=RESTART_WINDOW_S,
                entry=REPLICA_ENTRY,
            )
            await child.start()
            self.children.append(child)
            self._supervisors.append(asyncio.create_task(child.supervise(self.failed)))
        log.info("search_replicas_started", replicas=self.count)

    async def stop(self, resources: Resources) -> None:
        resources.search_replicas = None
        # one SIGTERM each (`WorkerChild.stop`): a second would stop a replica at once,
        # before it deletes its copies
        await asyncio.gather(*(child.stop() for child in self.children))
        for task in self._supervisors:
            task.cancel()
        if self.hub is not None:
            await self.hub.stop()


def copies_dir(settings: Settings, name: str) -> Path:
    return settings.data_dir.resolve() / "replicas" / name


def room_for_copy(settings: Settings, into: Path) -> str:
    """Why a copy of the stores does not fit now (memory, disk), or ''."""
    size = bytes_on_disk(settings.vectors_path, settings.graph_path)
    available = available_memory()
    if available is not None and size > MEMORY_SHARE * available:
        return (
            f"the stores take {size / 1e9:.1f} GB, past {MEMORY_SHARE:.0%} of the "
            f"{available / 1e9:.1f} GB of memory available"
        )
    into.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(into).free
    if free < 2 * size:
        return f"the stores take {size / 1e9:.1f} GB and the disk has {free / 1e9:.1f} GB free"
    return ""


class CopyKeeper:
    """One replica process's copy of the stores, kept current (`run_replica`)."""

    def __init__(self, settings: Settings, name: str, resources: Resources, nc: NatsClient):
        self.settings = settings
        self.name = name
        self.resources = resources
        self.nc = nc
        self.served = ServedCopy()
        self.note = ""
        self.taking = False
        """Whether its subscriber takes commands yet: until then it announces no copy, so
        the owner hands it nothing it could not answer."""
        self.root = copies_dir(settings, name)
        self._closing: set[asyncio.Task[None]] = set()

    async def owner_version(self) -> StoresVersion | None:
        try:
            reply = await self.nc.request(sj.STORES_VERSION, b"", timeout=2.0)
            return StoresVersion.model_validate_json(reply.data)
        except Exception:
            return None

    async def refresh(self) -> bool:
        """Fetch a new copy and serve from it; False when none could be had (the note says
        why)."""
        problem = await asyncio.to_thread(room_for_copy, self.settings, self.root)
        if problem:
            self.note = problem
            return False
        directory = self.root / str(self.served.generation + 1)
        if directory.exists():
            await asyncio.to_thread(shutil.rmtree, directory)
        request = CopyStores(directory=str(directory), stores=["vectors", "graph"])
        started = time.perf_counter()
        try:
            reply = await self.nc.request(
                sj.BACKUP_STORES, request.model_dump_json().encode(), timeout=COPY_TIMEOUT_S
            )
            copied = StoresCopied.model_validate_json(reply.data)
        except Exception as exc:
            self.note = f"the owner did not copy the stores: {type(exc).__name__}: {exc}"
            return False
        if copied.version is None:
            self.note = copied.error or "the owner copied no embedded vectors and graph"
            await asyncio.to_thread(shutil.rmtree, directory, True)
            return False
        vectors, graph = await self._open(directory)
        old = self.resources.use_stores(vectors, graph)
        replaced = self.served.serve(copied.version)
        self.note = ""
        log.info(
            "replica_copy_served",
            replica=self.name,
            generation=self.served.generation,
            version=copied.version.model_dump(),
            seconds=round(time.perf_counter() - started, 2),
        )
        await self.announce()
        if old[0] is not None or old[1] is not None:
            task = asyncio.create_task(self._close_old(replaced, *old))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return True

    async def _open(self, directory: Path) -> tuple[VectorStore, GraphStore]:
        at_copy = self.settings.model_copy(update={"data_dir": directory})
        encoder, sparse = await self.resources.encoder(), await self.resources.sparse()
        vectors = await asyncio.to_thread(
            open_vector_store, at_copy, encoder.dim, sparse_idf=sparse.idf_modifier
        )
        return vectors, await open_graph_store(at_copy)

    async def _close_old(
        self, generation: int, vectors: VectorStore | None, graph: GraphStore | None
    ) -> None:
        await self.served.drained(generation, CLOSE_OLD_AFTER_S)
        if graph is not None:
            await graph.aclose()
        if vectors is not None:
            await asyncio.to_thread(vectors.close)
        await asyncio.to_thread(shutil.rmtree, self.root / str(generation), True)

    async def announce(self) -> None:
        seen = ReplicaSeen(
            replica=self.name,
            version=self.served.version if self.taking else None,
            running=self.served.busy,
            answered=self.served.answered,
            note=self.note[:500],
        )
        with contextlib.suppress(Exception):
            await self.nc.publish(sj.SEARCH_REPLICAS, seen.model_dump_json().encode())

    async def keep_current(self, stop: asyncio.Event) -> None:
        """Fetch a new copy whenever the stores moved past this one and then held still for
        the settle time."""
        last: StoresVersion | None = None
        still_since = time.monotonic()
        while not stop.is_set():
            wanted = await self.owner_version()
            now = time.monotonic()
            if wanted is not None and not self.served.holds(wanted):
                if wanted != last:
                    last, still_since = wanted, now
                elif (
                    now - still_since >= self.settings.search_replica_settle_s
                    and not await self.refresh()
                ):
                    still_since = now  # try again after another settle time
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)

    async def keep_announcing(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.announce()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ANNOUNCE_EVERY_S)

    async def close(self) -> None:
        for task in list(self._closing):
            task.cancel()
        await asyncio.to_thread(shutil.rmtree, self.root, True)


async def first_copy(replica: CopyKeeper, stop: asyncio.Event) -> bool:
    """Wait for the owner and the first copy; False when stopped first."""
    while not stop.is_set():
        if await replica.owner_version() is not None and await replica.refresh():
            return True
        if replica.note:
            log.warning("replica_without_copy", replica=replica.name, note=replica.note)
            await replica.announce()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 5.0)
    return False


async def run_replica(settings: Settings, name: str, stop: asyncio.Event) -> None:
    """One replica process, until `stop`: its copy, its subscriber, its announcements."""
    broker = create_broker(settings)
    resources = Resources(settings, Bus.from_settings(broker, settings))
    await asyncio.to_thread(shutil.rmtree, copies_dir(settings, name), True)  # an earlier run's
    replica: CopyKeeper | None = None
    try:
        await broker.connect()
        nc = broker.connection
        resources.bus.fence = DoneFence(nc.jetstream())
        replica = CopyKeeper(settings, name, resources, nc)
        from workers.search import create_replica_router  # the search role: this process's

        broker.include_router(create_replica_router(resources, name, replica.served))
        if not await first_copy(replica, stop):
            return
        await resources.warm_up()
        await broker.start()
        replica.taking = True
        await replica.announce()
        log.info("search_replica_started", replica=name, version=replica.served.version)
        await asyncio.gather(replica.keep_current(stop), replica.keep_announcing(stop))
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(broker.stop(), 10.0)
        with contextlib.suppress(Exception):
            await resources.aclose()
        if replica is not None:
            await replica.close()
        log.info("search_replica_stopped", replica=name)
