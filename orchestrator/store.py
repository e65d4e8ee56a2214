"""Saga state in Redis, changed only by atomic transitions.

One transition = WATCH the request's keys, read its state, decide in Python, then in
one MULTI: write the new state, remember the inbound `event_id` (so a redelivered
event changes nothing), queue the outbound messages in an outbox, and move the
request's next deadline. Messages are published after the commit and then removed
from the outbox; if the process dies in between, the redelivered inbound event finds
its id already seen and publishes what is still in the outbox (the broker drops the
copies that did go out, by `Nats-Msg-Id`).

Keys are hash-tagged by request (`{id}`), so on Redis Cluster a request's keys share a slot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from contracts.envelope import Envelope
from contracts.queries import QuerySubmitted
from infra.settings import Settings
from orchestrator.state import RequestState

DEADLINES_KEY = "ragbus:deadlines"


class StateExists(Exception):
    """A request with this id was already submitted."""


def state_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:state"


def seen_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:seen"


def outbox_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:outbox"


@dataclass(frozen=True)
class OutboxEntry:
    """A message waiting to be published, in the form it is kept in Redis."""

    event_id: str
    subject: str
    stream: str
    body: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({"subject": self.subject, "stream": self.stream, "body": self.body})

    @classmethod
    def from_json(cls, event_id: str, text: str) -> OutboxEntry:
        data = json.loads(text)
        return cls(event_id, data["subject"], data["stream"], data["body"])


@dataclass(frozen=True)
class Outgoing:
    """A message a transition wants published once it has committed."""

    subject: str
    stream: str
    message: Envelope

    def entry(self) -> OutboxEntry:
        return OutboxEntry(
            self.message.event_id, self.subject, self.stream, self.message.model_dump(mode="json")
        )


@dataclass
class Transition:
    """What a saga step decided: the new state (None: nothing to change) and what to send."""

    state: RequestState | None
    messages: list[Outgoing] = field(default_factory=list)


@dataclass
class Applied:
    transition: Transition | None
    outbox: list[OutboxEntry]
    duplicate: bool = False


def initial_state(submitted: QuerySubmitted, settings: Settings, now: float) -> RequestState:
    return RequestState(
        request_id=submitted.request_id,
        query=submitted.query,
        search_queries=[submitted.query],
        session_id=submitted.session_id,
        namespaces=submitted.namespaces,
        top_k=submitted.top_k,
        channel_top_k=max(settings.channel_top_k, submitted.top_k),
        intent_override=submitted.intent,
        mode=submitted.mode,
        trace=submitted.trace,
        deadline_at=now + settings.request_timeout_s,
    )


def next_due(state: RequestState) -> float | None:
    if state.status.is_terminal:
        return None
    due = state.deadline_at
    if state.pending is not None:
        due = min(due, state.pending.deadline_at)
    return due


class StateStore:
    def __init__(self, redis: aioredis.Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings

    def _ttl(self, state: RequestState) -> int:
        if state.status.is_terminal:
            return self.settings.state_ttl_s
        return int(self.settings.request_timeout_s * 3 + self.settings.state_ttl_s)

    async def create(self, submitted: QuerySubmitted) -> RequestState:
        state = initial_state(submitted, self.settings, time.time())
        key = state_key(state.request_id)
        created = await self.redis.set(key, state.model_dump_json(), nx=True, ex=self._ttl(state))
        if not created:
            raise StateExists(state.request_id)
        due = next_due(state)
        if due is not None:
            await self.redis.zadd(DEADLINES_KEY, {state.request_id: due})
        return state

    async def get(self, request_id: str) -> RequestState | None:
        raw = await self.redis.get(state_key(request_id))
        return RequestState.model_validate_json(raw) if raw else None

    async def due(self, now: float, limit: int = 100) -> list[str]:
        members = await self.redis.zrangebyscore(DEADLINES_KEY, "-inf", now, start=0, num=limit)
        return [str(m) for m in members]

    async def apply(
        self,
        request_id: str,
        event_id: str | None,
        decide: Callable[[RequestState | None], Transition],
    ) -> Applied:
        """Run `decide` on the current state and commit its outcome atomically."""
        skey, dkey = state_key(request_id), seen_key(request_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(skey, dkey)
                    if event_id is not None and await pipe.sismember(dkey, event_id):
                        return Applied(None, await self.pending_outbox(request_id), duplicate=True)
                    raw = await pipe.get(skey)
                    current = RequestState.model_validate_json(raw) if raw else None
                    transition = decide(current)
                    entries = [m.entry() for m in transition.messages]
                    pipe.multi()
                    self._stage(pipe, request_id, event_id, current, transition.state, entries)
                    await pipe.execute()
                    return Applied(transition, entries)
                except WatchError:
                    continue  # another replica changed this request first: decide again

    def _stage(
        self,
        pipe: Any,
        request_id: str,
        event_id: str | None,
        current: RequestState | None,
        new: RequestState | None,
        entries: list[OutboxEntry],
    ) -> None:
        """Queue one transition's writes inside the MULTI."""
        if new is not None:
            new.version = (current.version if current else 0) + 1
            pipe.set(state_key(request_id), new.model_dump_json(), ex=self._ttl(new))
            due = next_due(new)
            if due is None:
                pipe.zrem(DEADLINES_KEY, request_id)
            else:
                pipe.zadd(DEADLINES_KEY, {request_id: due})
        elif current is None:
            pipe.zrem(DEADLINES_KEY, request_id)  # a tick for a request that no longer exists
        if event_id is not None:
            pipe.sadd(seen_key(request_id), event_id)
            pipe.expire(seen_key(request_id), self.settings.state_ttl_s)
        if entries:
            okey = outbox_key(request_id)
            pipe.hset(okey, mapping={e.event_id: e.to_json() for e in entries})
            pipe.expire(okey, self.settings.state_ttl_s)

    async def _outbox(self, okey: str) -> list[OutboxEntry]:
        raw = await self.redis.hgetall(okey)
        entries = []
        for event_id, text in raw.items():
            data = json.loads(text)
            entries.append(
                OutboxEntry(str(event_id), data["subject"], data["stream"], data["body"])
            )
        return entries

    async def outbox_sent(self, request_id: str, event_ids: list[str]) -> None:
        if event_ids:
            await self.redis.hdel(outbox_key(request_id), *event_ids)

    async def pending_outbox(self, request_id: str) -> list[OutboxEntry]:
        raw = await self.redis.hgetall(outbox_key(request_id))
        return [OutboxEntry.from_json(str(eid), str(text)) for eid, text in raw.items()]
