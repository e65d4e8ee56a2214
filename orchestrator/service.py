"""The orchestrator's bus side: consume submissions and results, commit, publish, time out.

Any number of replicas can run this against the same durable consumers: every change
to a request is an atomic Redis transition (see `orchestrator.store`), so replicas
never double-apply an event or overwrite each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import structlog
from faststream import AckPolicy
from faststream.nats import NatsRouter

from contracts.advisories import MaxDeliveriesAdvisory
from contracts.enums import RequestStatus
from contracts.envelope import TraceContext
from contracts.queries import ChildFinished, QueryCancelled, QueryMessage, QuerySubmitted
from contracts.results import AnyResult
from infra.logging import get_logger
from infra.metrics import REQUEST_SECONDS, REQUESTS, UNKNOWN_REQUESTS
from infra.runtime.bus import Bus, PublishAbandoned
from infra.runtime.dead_letters import handle_max_deliveries
from infra.runtime.ingest_jobs import JobTracker
from infra.runtime.liveness import is_live
from infra.runtime.resources import Resources
from infra.runtime.sweeper import sweep_orphans
from infra.runtime.topology import (
    ORCHESTRATOR_ADVISORIES,
    ORCHESTRATOR_QUERIES,
    ORCHESTRATOR_RESULTS,
    subscriber_kwargs,
)
from infra.runtime.worker_runtime import error_policy
from infra.telemetry import continue_trace, tracer, tracing_on
from orchestrator.saga import Clock, Saga
from orchestrator.state import RequestState
from orchestrator.store import StateExists, StateStore
from orchestrator.transition import DONE, OutboxEntry, Transition

log = get_logger(__name__)


class KeyedLocks:
    """One lock per request while anyone holds or waits for it. A request's results arrive
    together (its search channels answer at once); deciding them one at a time in this
    process spares the optimistic commit its lost races, each a wasted read and decision
    (a quarter of the transitions at c = 8 in `ragbus bench-bus`). Replicas still race, and
    the version check in the commit still settles it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, holders = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, holders + 1)
        try:
            async with lock:
                yield
        finally:
            lock, holders = self._locks[key]
            if holders == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, holders - 1)


class Orchestrator:
    def __init__(self, resources: Resources) -> None:
        self.settings = resources.settings
        self.bus: Bus = resources.bus
        self.store = StateStore(resources.redis(), resources.settings)
        self.saga = Saga(resources.settings)
        self._serial = KeyedLocks()
        self._timer: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def resume(self, submitted: QuerySubmitted) -> None:
        """A submission the API in this process replays by its `Idempotency-Key`
        (`RAGBUS_SUBMIT_IN_PROCESS`): a request still `submitted` (its first step was never
        committed) takes that step now, and messages a committed step left unpublished (its
        publish failed, or its process died) go out now. Whatever did go out already is
        dropped by the broker as a copy (`Nats-Msg-Id`)."""
        state = await self.store.get(submitted.request_id)
        if state is None:
            return  # expired since: nothing left to run
        if state.status is RequestStatus.SUBMITTED:
            await self.handle_submission(submitted)
            return
        pending = await self.store.unpublished(submitted.request_id)
        if pending:
            await self._publish(submitted.request_id, pending, late=True)

    async def handle_submission(self, msg: QuerySubmitted) -> None:
        """A submission, from the bus or from the API in this process (which recorded it with
        `StateStore.create(..., drive=True)`, so the transition starts from that state)."""
        if msg.parent_id is not None:
            await self._adopt(msg)
        await self._apply(
            msg.request_id,
            msg.event_id,
            self._known(
                "submission", lambda state: self.saga.on_submitted(state, msg, Clock.system())
            ),
            step=msg.type,
            trace=msg.trace,
        )

    async def handle_child(self, msg: ChildFinished) -> None:
        await self._apply(
            msg.request_id,
            msg.event_id,
            self._known("child", lambda state: self.saga.on_child(state, msg)),
            step=msg.type,
            trace=msg.trace,
        )

    async def handle_cancel(self, msg: QueryCancelled) -> None:
        await self._apply(
            msg.request_id,
            msg.event_id,
            self._known("cancel", lambda state: self.saga.on_cancelled(state, msg)),
            step=msg.type,
            trace=msg.trace,
        )

    async def handle_result(self, result: AnyResult) -> None:
        await self._apply(
            result.request_id,
            result.event_id,
            self._known("result", lambda state: self.saga.on_result(state, result, Clock.system())),
            step=result.type,
            trace=result.trace,
        )

    async def _adopt(self, msg: QuerySubmitted) -> None:
        """Record a research child the API never saw: only a child its parent's state lists,
        of the parent's tenant (anything else is forged and runs nothing, as ever)."""
        parent = await self.store.get(msg.parent_id or "")
        listed = parent is not None and any(c.request_id == msg.request_id for c in parent.children)
        if not listed or parent is None or parent.tenant != msg.tenant:
            log.warning("child_without_parent", parent_id=msg.parent_id)
            return
        with contextlib.suppress(StateExists):
            await self.store.create(msg)

    @staticmethod
    def _known(
        kind: str, decide: Callable[[RequestState | None], Transition]
    ) -> Callable[[RequestState | None], Transition]:
        """Count and log a message for a request with no state: the API records every request
        before publishing it, so such a message is forged, or its request expired."""

        def checked(state: RequestState | None) -> Transition:
            if state is None:
                UNKNOWN_REQUESTS.labels(kind=kind).inc()
                log.warning("message_for_unknown_request", kind=kind)
            return decide(state)

        return checked

    async def tick(self, request_id: str) -> None:
        """A deadline passed. No message brought the request's trace here: with tracing on,
        its state does."""
        state = await self.store.get(request_id) if tracing_on() else None
        await self._apply(
            request_id,
            None,
            lambda state: self.saga.on_tick(state, Clock.system()),
            step="deadline",
            trace=state.trace if state is not None else None,
        )

    async def _apply(
        self,
        request_id: str,
        event_id: str | None,
        decide: Callable[[RequestState | None], Transition],
        *,
        step: str,
        trace: TraceContext | None,
    ) -> None:
        """One saga transition, as the span `saga <what came>` of the request's trace."""
        structlog.contextvars.bind_contextvars(
            request_id=request_id, trace_id=trace.trace_id if trace else None
        )
        with (
            continue_trace(trace),
            tracer().start_as_current_span(
                f"saga {step}", attributes={"ragbus.request_id": request_id}
            ) as span,
        ):
            async with self._serial.hold(request_id):
                applied = await self.store.apply(request_id, event_id, decide)
            if applied.duplicate:
                log.info("event_already_applied", event_id=event_id, resend=len(applied.outbox))
                span.set_attribute("ragbus.duplicate", True)
            elif applied.transition and applied.transition.state:
                state = applied.transition.state
                self._observe(state)
                span.set_attributes(
                    {"ragbus.status": state.status.value, "ragbus.attempt": state.attempt}
                )
            await self._publish(request_id, applied.outbox, late=applied.duplicate)

    async def _publish(
        self, request_id: str, entries: list[OutboxEntry], *, late: bool = False
    ) -> None:
        """Publish a transition's messages: one subject's messages in their order (a request's
        `answer` before its `done`), different subjects' side by side.

        Nothing follows a request's `done`: a progress event (`OutboxEntry.progress`) whose
        publish must wait out JetStream asks before each re-send whether its request is still
        live; and when a redelivery finds messages still queued (`late`: their process died
        before it had published them) of a request that has finished and whose `done` is no
        longer among them (it went out), their progress events are left out."""
        if (
            late
            and any(e.progress for e in entries)
            and not any(e.kind == DONE for e in entries)
            and not await self._live(request_id)
        ):
            dropped = [e for e in entries if e.progress]
            entries = [e for e in entries if not e.progress]
            log.info("late_progress_dropped", events=len(dropped))
            await self.store.outbox_sent(request_id, [e.event_id for e in dropped])
        by_subject: dict[str, list[OutboxEntry]] = {}
        for entry in entries:
            by_subject.setdefault(entry.subject, []).append(entry)

        async def in_order(queue: list[OutboxEntry]) -> None:
            for entry in queue:
                try:
                    await self.bus.publish_raw(
                        entry.body.encode(),
                        entry.subject,
                        entry.stream,
                        entry.event_id,
                        (lambda: self._live(request_id)) if entry.progress else None,
                    )
                except PublishAbandoned:
                    log.info("late_progress_dropped", events=1)

        await asyncio.gather(*(in_order(queue) for queue in by_subject.values()))
        await self.store.published(
            request_id, [e.event_id for e in entries], ended=any(e.kind == DONE for e in entries)
        )

    async def _live(self, request_id: str) -> bool:
        return await is_live(self.store.redis, request_id)

    @staticmethod
    def _observe(state: RequestState) -> None:
        log.info(
            "saga_transition",
            status=state.status.value,
            attempt=state.attempt,
            pending=state.pending.step if state.pending else None,
        )
        if state.status.is_terminal and state.finished_at is not None:
            REQUESTS.labels(status=state.status.value).inc()
            REQUEST_SECONDS.observe((state.finished_at - state.created_at).total_seconds())

    # ----------------------------------------------------------------- deadlines
    def start_timer(self) -> None:
        if self._timer is None:
            self._timer = asyncio.create_task(self._run_timer(), name="saga-deadlines")
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._run_sweeper(), name="orphan-sweeper")

    async def stop_timer(self) -> None:
        for task in (self._timer, self._sweeper):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._timer = self._sweeper = None

    async def _run_sweeper(self) -> None:
        """Orphaned work-queue messages (`infra.runtime.sweeper`), now and then."""
        while True:
            await asyncio.sleep(self.settings.sweep_interval_s)
            try:
                swept = await sweep_orphans(self.bus.broker.connection.jetstream())
                if swept:
                    log.warning("orphans_swept", swept=swept)
            except Exception as exc:  # the broker is away: sweep next time
                log.warning("orphan_sweep_failed", error=str(exc))

    async def _run_timer(self) -> None:
        """Every replica looks; the atomic transition makes a double look harmless."""
        while True:
            try:
                for request_id in await self.store.due(time.time()):
                    await self.tick(request_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis or NATS hiccup: keep the timer alive
                log.warning("deadline_timer_error", error=str(exc))
            finally:
                structlog.contextvars.clear_contextvars()
            await asyncio.sleep(self.settings.deadline_poll_s)


def create_router(resources: Resources, orchestrator: Orchestrator | None = None) -> NatsRouter:
    orch = orchestrator or Orchestrator(resources)
    router = NatsRouter(
        middlewares=[error_policy(resources.bus, resources.settings, on_dead_letter=None)],
        ack_policy=AckPolicy.MANUAL,
    )

    @router.subscriber(
        **subscriber_kwargs(ORCHESTRATOR_QUERIES, resources.settings, QueryMessage),
        title="orchestrator:submissions",
        description="Starts a request's saga, cancels one, or tells a research request that "
        "one of its children ended.",
    )
    async def on_query(msg: QueryMessage) -> None:
        if isinstance(msg, QueryCancelled):
            await orch.handle_cancel(msg)
        elif isinstance(msg, ChildFinished):
            await orch.handle_child(msg)
        else:
            await orch.handle_submission(msg)

    @router.subscriber(
        **subscriber_kwargs(ORCHESTRATOR_RESULTS, resources.settings, AnyResult),
        title="orchestrator:results",
        description="Every worker's result; advances the saga.",
    )
    async def on_result(result: AnyResult) -> None:
        await orch.handle_result(result)

    @router.subscriber(
        **subscriber_kwargs(ORCHESTRATOR_ADVISORIES, resources.settings, MaxDeliveriesAdvisory),
        title="orchestrator:max-deliveries",
        description="JetStream stopped delivering a message that was never acknowledged: "
        "dead-letter it, fail its step, and take it out of its work queue.",
    )
    async def on_max_deliveries(advisory: MaxDeliveriesAdvisory) -> None:
        js = resources.bus.broker.connection.jetstream()
        jobs = JobTracker(resources.redis(), resources.settings.state_ttl_s)
        await handle_max_deliveries(
            js, resources.bus, advisory, jobs, resources.settings.ingest_requeues
        )

    router.orchestrator = orch  # type: ignore[attr-defined]
    return router
