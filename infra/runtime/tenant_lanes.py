"""`LanesRouter`: a worker's subscribers made at run time, one a tenant with work waiting, so
that one tenant's messages never queue behind another's.

A work-queue stream delivers a consumer's messages in the order they were stored: with one
consumer for every tenant's files, 100 files of one tenant kept a one-page file of another's
waiting for hours (issue 54). Here each tenant's messages are on subjects of their own
(`rag.ingest.parse.<tenant>.<job>`), each tenant has a durable pull consumer of its own (its
lane, `topology.parse_lane_consumer`), and each process subscribes to the lanes of the tenants
that have messages waiting: every `poll_s` it asks the stream which subjects hold messages
(one `STREAM.INFO` with a subject filter), and opens a subscriber for each tenant among them
it does not serve yet. A subscriber takes one message at a time, so a process holds at most one
message of each tenant, and what runs first among the held ones is the worker's to decide
(`infra.runtime.fair_slots`). A lane idle for `idle_s` is closed in this process (its consumer
stays, for the other replicas, until the server removes it, `PARSE_LANE_IDLE_S`).

The subscribers are FastStream's, on this router, so the error policy (acks, heartbeats,
retries and dead letters) is the same as every other worker's; they are made once the broker
runs (`open`), which the process's runtime calls, and stopped with it (`close`). One lane is
always open: `base`, an earlier release's subjects, which also shows that a worker is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
import nats.js.errors
from faststream.nats import NatsRouter
from nats.js import JetStreamContext

from infra.errors import describe_error
from infra.logging import get_logger
from infra.runtime.topology import ConsumerSpec, declare_consumer, subscriber_kwargs
from infra.settings import Settings

log = get_logger(__name__)

POLL_S = 1.0
"""How often a process asks which tenants have messages waiting: a new tenant's first file
waits at most this long (and a fetch) for its lane to open."""
IDLE_S = 60.0

Handler = Callable[[Any], Awaitable[None]]


class LanesRouter(NatsRouter):
    """A router whose subscribers are lanes opened as tenants' messages appear (see the
    module). `lane_of(subject)` names the tenant of a subject (None for none of the lanes'),
    `consumer(tenant)` its lane's durable consumer, `handler(tenant)` what takes its messages;
    `base` is the lane always open."""

    def __init__(
        self,
        *,
        settings: Settings,
        stream: str,
        subjects: str,
        model: Any,
        base: ConsumerSpec,
        consumer: Callable[[str], ConsumerSpec],
        lane_of: Callable[[str], str | None],
        handler: Callable[[str], Handler],
        title: str = "",
        poll_s: float | None = None,
        idle_s: float | None = None,
        **router_kwargs: Any,
    ) -> None:
        super().__init__(**router_kwargs)
        self._title = title
        self._settings = settings
        self._stream = stream
        self._subjects = subjects
        self._model = model
        self._base = base
        self._consumer = consumer
        self._lane_of = lane_of
        self._handler = handler
        self.poll_s = POLL_S if poll_s is None else poll_s
        self.idle_s = IDLE_S if idle_s is None else idle_s
        self._js: JetStreamContext | None = None
        self._lanes: dict[str, Any] = {}
        """Every lane subscriber made in this process, open or closed, by tenant."""
        self._open: set[str] = set()
        self._last_busy: dict[str, float] = {}
        self._watch: asyncio.Task[None] | None = None
        self.closing = asyncio.Event()
        """Set as the lanes close: a handler waiting on something of its own (a tenant's
        budget) gives its message back rather than hold the stop."""

    @property
    def open_lanes(self) -> set[str]:
        return set(self._open)

    def document(self) -> None:
        """Describe the lanes in the AsyncAPI document (`ragbus asyncapi`), as one subscriber
        on every lane's subjects: for a router that is documented, never started (a started
        one would take every tenant's messages in one lane)."""
        subject = self._subjects.removesuffix(">") + "{tenant}.{job}"
        kwargs = subscriber_kwargs(self._consumer("{tenant}"), self._settings, self._model, 1)
        kwargs["subject"] = subject
        self.subscriber(**kwargs, title=self._title or None)(self._handler("{tenant}"))

    async def open(self, js: JetStreamContext) -> None:
        """Once the broker runs: the base lane, then the watch for tenants' lanes."""
        self._js = js
        await self._start_lane("", self._base)
        self._watch = asyncio.create_task(self._watch_lanes(), name="tenant-lanes")

    async def close(self) -> None:
        """Stop watching, and every lane this process has open."""
        self.closing.set()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        for tenant in list(self._open):
            await self._stop_lane(tenant)

    async def waiting(self) -> dict[str, int]:
        """Messages waiting (or being worked on) in each tenant's lane, from the stream."""
        assert self._js is not None
        info = await self._js.stream_info(self._stream, subjects_filter=self._subjects)
        counts: dict[str, int] = {}
        for subject, count in (info.state.subjects or {}).items():
            tenant = self._lane_of(subject)
            if tenant:
                counts[tenant] = counts.get(tenant, 0) + count
        return counts

    async def _watch_lanes(self) -> None:
        while True:
            try:
                await self.reconcile()
            except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as exc:
                log.warning("lanes_not_read", error=describe_error(exc))
            await asyncio.sleep(self.poll_s)

    async def reconcile(self) -> None:
        """One look at the stream: open the lanes of tenants with messages waiting, close the
        ones idle past `idle_s`."""
        waiting = await self.waiting()
        now = time.monotonic()
        for tenant in waiting:
            self._last_busy[tenant] = now
            if tenant not in self._open:
                await self._start_lane(tenant, self._consumer(tenant))
        for tenant in list(self._open):
            if tenant and now - self._last_busy.get(tenant, now) > self.idle_s:
                await self._stop_lane(tenant)

    async def _start_lane(self, tenant: str, spec: ConsumerSpec) -> None:
        assert self._js is not None
        await declare_consumer(self._js, spec, self._settings)
        subscriber = self._lanes.get(tenant)
        if subscriber is None:
            kwargs = subscriber_kwargs(spec, self._settings, self._model, concurrency=1)
            subscriber = self.subscriber(**kwargs, include_in_schema=False)
            subscriber(self._handler(tenant))
            self._lanes[tenant] = subscriber
        await subscriber.start()
        self._open.add(tenant)
        self._last_busy[tenant] = time.monotonic()
        log.info("lane_opened", lane=spec.durable)

    async def _stop_lane(self, tenant: str) -> None:
        self._open.discard(tenant)
        subscriber = self._lanes.get(tenant)
        if subscriber is not None:
            await subscriber.stop()
        log.info("lane_closed", lane=tenant or "base")
