"""How the API hands a question it has recorded to the saga.

Where the orchestrator runs in the API's process (`ragbus up`) and `RAGBUS_SUBMIT_IN_PROCESS`
is on, the saga takes the question's first step here: the state the API records is the one
that step starts from (`StateStore.create(..., drive=True)`), and the step's commit puts its
first command in the request's outbox and publishes it, as a step taken on a consumed
submission would. That spares a request the submission's publish and consume, a saga
transition's read of its state, and a hop of latency. Otherwise, and for every submission that
does not come from this API (a research parent's children, any NATS client), it travels as
`rag.query.submitted` to whichever orchestrator replica consumes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contracts import subjects as sj
from contracts.enums import RequestStatus
from contracts.queries import QuerySubmitted
from infra.runtime.bus import Bus
from orchestrator.store import StateStore

if TYPE_CHECKING:
    from orchestrator.service import Orchestrator


class Submitter:
    """`record` a question, then `send` it (new) or `send_again` (replayed by its key)."""

    def __init__(self, bus: Bus, saga: Orchestrator | None = None) -> None:
        self.bus = bus
        self.saga = saga

    @property
    def in_process(self) -> bool:
        return self.saga is not None

    async def record(self, store: StateStore, submitted: QuerySubmitted) -> None:
        """The request's state, before anything is sent (`StateExists` for a taken id)."""
        await store.create(submitted, drive=self.in_process)

    async def send(self, submitted: QuerySubmitted) -> None:
        if self.saga is not None:
            await self.saga.handle_submission(submitted)
        else:
            await self.bus.publish(submitted, sj.QUERY_SUBMITTED, sj.STREAM_QUERIES)

    async def send_again(self, store: StateStore, submitted: QuerySubmitted) -> bool:
        """A replayed submission: sent again only where it may never have got under way
        (in process, `Orchestrator.resume` also sends what its first step left unpublished).
        False when there was nothing to send."""
        if self.saga is not None:
            await self.saga.resume(submitted)
            return True
        state = await store.get(submitted.request_id)
        if state is None or state.status is not RequestStatus.SUBMITTED:
            return False  # under way (or finished): nothing to send again
        await self.send(submitted)
        return True
