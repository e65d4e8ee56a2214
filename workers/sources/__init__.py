"""Sources worker: keeps the tenants' sources in sync, each sync an ingest job on the bus.

One subscriber, `rag.cmd.sources` (`SyncSource`, from the API, the scheduler and the
watchers), runs a source's sync (`infra.sources.sync.SourceSyncer`); the scheduler that runs
beside it publishes the syncs a source's schedule and its folder's changes ask for
(`infra.sources.schedule.Scheduler`). The worker owns no store: the documents it publishes are
parsed and indexed by the parse and ingest workers, as any other job's.
"""

from __future__ import annotations

from faststream.middlewares import AckPolicy
from faststream.nats import NatsRouter

from contracts.sources import SyncSource
from infra.runtime.resources import Resources
from infra.runtime.topology import SOURCES_WORKER, subscriber_kwargs
from infra.runtime.worker_runtime import error_policy
from infra.sources.schedule import Scheduler
from infra.sources.sync import SourceSyncer

__all__ = ["create_router"]


def create_router(resources: Resources) -> NatsRouter:
    settings, bus = resources.settings, resources.bus
    syncer: SourceSyncer | None = None
    scheduler = Scheduler(bus, resources.redis(), settings)
    resources.on_warm_up(scheduler.start)
    resources.on_close(scheduler.stop)

    def syncs() -> SourceSyncer:
        nonlocal syncer
        if syncer is None:  # the broker is connected by the time a message comes
            syncer = SourceSyncer(bus, resources.redis(), bus.broker.connection, settings)
        return syncer

    # nothing waits on a sync's result, and its id is a job's, not a request's: no liveness
    router = NatsRouter(
        middlewares=[error_policy(bus, settings, on_dead_letter=None)],
        ack_policy=AckPolicy.MANUAL,
    )

    @router.subscriber(
        **subscriber_kwargs(SOURCES_WORKER, settings, SyncSource),
        title="sources",
        description="Sync one source: its changes, as an ingest job.",
    )
    async def on_sync(command: SyncSource) -> None:
        await syncs().handle(command)

    return router
