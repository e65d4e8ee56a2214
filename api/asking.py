"""What every door does with a question, whichever protocol it speaks.

`POST /v1/queries` and `/v1/chat` are FastAPI routes with their dependencies; the other doors
(the OpenAI-compatible `/v1/chat/completions`, MCP's `ask` and `search` over streamable HTTP
and stdio) translate their protocol into the same calls, through a `Door` made from the
application's connections:
- `ask`: the caller's quota (`take_submission`), then the request recorded and handed to the
  saga (`submit_query`): one request on the bus, with its trace, tenant and events, exactly
  as `POST /v1/queries` makes it;
- `events`: its caller events one at a time, up to its `done` (`api.sse.request_events`,
  through the process's shared consumer);
- `state`: its record, the caller's own or `HTTPException` 404;
- `follow`: its events with how it ended kept (`Followed`), for a door that says the answer
  its own way.

A door never decides what a question gets; it only says it in its own protocol.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from nats.js import JetStreamContext
from starlette.datastructures import State

from api.auth import Caller
from api.event_hub import EventHub
from api.idempotency import Idempotency
from api.routes import owned_request, submit_query, take_submission
from api.schemas import QueryRequest
from api.sse import request_events
from api.submission import Submitter
from contracts.events import AnswerData, ErrorData
from contracts.queries import QuerySubmitted
from infra.settings import Settings
from infra.tenancy.quotas import Quotas, submission_cost
from orchestrator.state import RequestState
from orchestrator.store import StateStore


@dataclass(frozen=True)
class Door:
    settings: Settings
    store: StateStore
    submitter: Submitter
    js: JetStreamContext
    redis: aioredis.Redis
    hub: EventHub | None = None

    @classmethod
    def of(cls, state: State) -> Door:
        """The door of an application whose lifespan opened its connections (`api.app`)."""
        return cls(
            settings=state.settings,
            store=state.store,
            submitter=Submitter(state.bus, getattr(state, "saga", None)),
            js=state.js,
            redis=state.redis,
            hub=getattr(state, "event_hub", None),
        )

    async def ask(
        self, caller: Caller, body: QueryRequest, idempotency_key: str | None = None
    ) -> tuple[QuerySubmitted, bool]:
        """Take the caller's quota and submit: 429 (`HTTPException`) past its rate, 409 or
        503 as `POST /v1/queries` answers them. The flag: an earlier request of the same
        `idempotency_key`."""
        await self.take_quota(caller, body)
        return await self.submit(caller, body, idempotency_key)

    async def take_quota(self, caller: Caller, body: QueryRequest) -> None:
        """The question's share of the caller's rate, or 429: for a door that writes
        something of the question before it submits (a conversation's turns), first."""
        await take_submission(Quotas(self.redis), caller, submission_cost(self.settings, body.mode))

    async def submit(
        self, caller: Caller, body: QueryRequest, idempotency_key: str | None = None
    ) -> tuple[QuerySubmitted, bool]:
        """`ask` once its quota is taken."""
        idempotency = Idempotency(self.redis, self.settings.idempotency_ttl_s, caller.space)
        return await submit_query(
            body, caller, self.store, self.submitter, self.settings, idempotency, idempotency_key
        )

    async def events(self, caller: Caller, request_id: str) -> AsyncGenerator[dict[str, Any]]:
        """The request's caller events in order, each with its stream `seq`; the last is its
        `done` (one made from its record when the stored events expired)."""
        messages = request_events(self.js, self.store, caller.tenant, request_id, hub=self.hub)
        async with aclosing(messages):
            async for _, events in messages:
                for event in events:
                    yield event

    async def state(self, caller: Caller, request_id: str) -> RequestState:
        """The caller's request, or 404 (another tenant's answers as a missing one)."""
        return await owned_request(self.store, caller, request_id)

    def follow(self, caller: Caller, request_id: str) -> Followed:
        return Followed(self, caller, request_id)


class Followed:
    """A request followed to its end: `each` yields its caller events; as they pass, and from
    its record where they expired, it keeps how the request ended: `answer`, `error`, `status`."""

    def __init__(self, door: Door, caller: Caller, request_id: str) -> None:
        self.door = door
        self.caller = caller
        self.request_id = request_id
        self.answer: AnswerData | None = None
        self.error: ErrorData | None = None
        self.status: str | None = None

    async def each(self) -> AsyncGenerator[dict[str, Any]]:
        events = self.door.events(self.caller, self.request_id)
        async with aclosing(events):
            async for event in events:
                kind, data = event.get("type"), event.get("data") or {}
                if kind == "answer":
                    self.answer = AnswerData.model_validate(data)
                elif kind == "error":
                    self.error = ErrorData.model_validate(data)
                elif kind == "done":
                    self.status = str(data.get("status"))
                yield event
        if self.answer is None and self.error is None:  # its events expired: its record
            state = await self.door.state(self.caller, self.request_id)
            self.answer, self.error, self.status = state.answer, state.error, state.status.value
