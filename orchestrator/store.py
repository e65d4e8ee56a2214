"""Saga state in Redis, changed only by atomic transitions.

One transition = one round trip to read the request's state, its version and whether the
inbound `event_id` was seen; a decision in Python; then one atomic Lua script that checks the
version is still the one read (optimistic concurrency: when another replica got there first,
we read and decide again), writes the new state and bumps the version, remembers the inbound
`event_id` (so a redelivered event changes nothing), queues the outbound messages in an
outbox, and moves the request's next deadline. Messages are published after the commit and
then removed from the outbox; if the process dies in between, the redelivered inbound event
finds its id already seen and publishes what is still in the outbox (the broker drops the
copies that did go out, by `Nats-Msg-Id`). Three round trips a transition, where WATCH/MULTI
took five.

Keys are hash-tagged by request (`{id}`), so on Redis Cluster a request's keys share a slot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from contracts.envelope import Envelope
from contracts.queries import QuerySubmitted
from infra.runtime.liveness import DEADLINES_KEY
from infra.settings import Settings
from orchestrator.state import RequestState


class StateExists(Exception):
    """A request with this id was already submitted."""


def state_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:state"


def seen_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:seen"


def outbox_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:outbox"


def version_key(request_id: str) -> str:
    return f"ragbus:req:{{{request_id}}}:version"


COMMIT = """
local version = redis.call('GET', KEYS[2])
if version and version ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then
  if redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 1 then return -1 end
  redis.call('SADD', KEYS[3], ARGV[2])
  redis.call('EXPIRE', KEYS[3], ARGV[7])
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4])
  redis.call('SET', KEYS[2], tonumber(ARGV[1]) + 1, 'EX', ARGV[4])
end
if ARGV[5] == '-' then
  redis.call('ZREM', KEYS[5], ARGV[6])
elseif ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[6])
end
local entries = tonumber(ARGV[8])
if entries > 0 then
  for i = 0, entries - 1 do
    redis.call('HSET', KEYS[4], ARGV[9 + 2 * i], ARGV[10 + 2 * i])
  end
  redis.call('EXPIRE', KEYS[4], ARGV[7])
end
return 1
"""
"""KEYS: state, version, seen, outbox, deadlines. ARGV: the version read, the inbound event id
(or ''), the new state (or ''), its TTL, the next deadline ('' keep, '-' none), the request id,
the bookkeeping TTL, the outbox entry count, then (event id, entry) pairs. Returns 1 when
committed, 0 when the version moved, -1 when the event was applied meanwhile. A state saved
before versions had a key of their own has no version key: it is taken as read."""


@dataclass(frozen=True)
class OutboxEntry:
    """A message waiting to be published: its body is the JSON it will be published as,
    serialised once. Kept in Redis as `subject`, `stream` and body on three lines (neither
    a subject nor a stream name holds a line break, and the body's JSON is one line)."""

    event_id: str
    subject: str
    stream: str
    body: str

    def to_json(self) -> str:
        return f"{self.subject}\n{self.stream}\n{self.body}"

    @classmethod
    def from_json(cls, event_id: str, text: str) -> OutboxEntry:
        if text.startswith("{"):  # kept by a version that stored the entry as one JSON object
            data = json.loads(text)
            return cls(event_id, data["subject"], data["stream"], json.dumps(data["body"]))
        subject, stream, body = text.split("\n", 2)
        return cls(event_id, subject, stream, body)


@dataclass(frozen=True)
class Outgoing:
    """A message a transition wants published once it has committed."""

    subject: str
    stream: str
    message: Envelope

    def entry(self) -> OutboxEntry:
        return OutboxEntry(
            self.message.event_id, self.subject, self.stream, self.message.model_dump_json()
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


def _version(state: RequestState | None) -> int:
    """The version of a state saved before versions had a key of their own (or 0)."""
    return state.version if state is not None else 0


class StateStore:
    def __init__(self, redis: aioredis.Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self._commit_script = redis.register_script(COMMIT)

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
        skey, vkey, dkey = state_key(request_id), version_key(request_id), seen_key(request_id)
        while True:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(skey)
                pipe.get(vkey)
                pipe.sismember(dkey, event_id or "")
                raw, stored_version, seen = await pipe.execute()
            if event_id is not None and seen:
                return Applied(None, await self.pending_outbox(request_id), duplicate=True)
            current = RequestState.model_validate_json(raw) if raw else None
            version = int(stored_version) if stored_version is not None else _version(current)
            transition = decide(current)
            entries = [m.entry() for m in transition.messages]
            outcome = await self._commit(
                request_id, event_id, version, current, transition.state, entries
            )
            if outcome == 1:
                return Applied(transition, entries)
            if outcome == -1:  # another replica applied this very event first
                return Applied(None, await self.pending_outbox(request_id), duplicate=True)
            # another replica changed this request first: read and decide again

    async def _commit(
        self,
        request_id: str,
        event_id: str | None,
        version: int,
        current: RequestState | None,
        new: RequestState | None,
        entries: list[OutboxEntry],
    ) -> int:
        state_json, due = "", ""
        if new is not None:
            new.version = version + 1
            state_json = new.model_dump_json()
            next_at = next_due(new)
            due = "-" if next_at is None else repr(next_at)
        elif current is None:
            due = "-"  # a tick for a request that no longer exists
        ttl = self._ttl(new) if new is not None else self.settings.state_ttl_s
        keys = [
            state_key(request_id),
            version_key(request_id),
            seen_key(request_id),
            outbox_key(request_id),
            DEADLINES_KEY,
        ]
        args: list[str | int] = [
            version,
            event_id or "",
            state_json,
            ttl,
            due,
            request_id,
            self.settings.state_ttl_s,
            len(entries),
        ]
        for entry in entries:
            args += [entry.event_id, entry.to_json()]
        return int(await self._commit_script(keys=keys, args=args))

    async def outbox_sent(self, request_id: str, event_ids: list[str]) -> None:
        if event_ids:
            await self.redis.hdel(outbox_key(request_id), *event_ids)

    async def pending_outbox(self, request_id: str) -> list[OutboxEntry]:
        raw = await self.redis.hgetall(outbox_key(request_id))
        return [OutboxEntry.from_json(str(eid), str(text)) for eid, text in raw.items()]
