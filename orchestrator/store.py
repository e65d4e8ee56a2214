"""Saga state in Redis, changed only by atomic transitions.

One transition = one round trip to read the request's state, its version and whether the
inbound `event_id` was seen (skipped when this process committed the request's last state:
`orchestrator.state_cache`); a decision in Python; then one atomic Lua script that checks the
version is still the one read (optimistic concurrency: when another replica got there first,
we read and decide again), writes the new state and bumps the version, remembers the inbound
`event_id` (so a redelivered event changes nothing), queues the outbound messages in an
outbox, and moves the request's next deadline. Messages are published after the commit and
then removed from the outbox: by the request's next commit in this process (its script
deletes them too), or by a delete of their own; when a request's `done` is out, its whole
outbox goes. If the process dies in between, the redelivered inbound event finds its id
already seen and publishes what is still in the outbox (the broker drops the copies that did
go out, by `Nats-Msg-Id`). One round trip a transition while this process drives its request
(the commit), where WATCH/MULTI took five.

Keys are hash-tagged by request (`{id}`), so on Redis Cluster a request's keys share a slot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from contracts.access import session_space
from contracts.queries import QuerySubmitted
from contracts.sessions import SessionTurn
from infra.memory.sessions import SessionStore
from infra.replication import replicated
from infra.runtime.claims import claims_key
from infra.runtime.liveness import DEADLINES_KEY
from infra.settings import Settings
from orchestrator.state import RequestState
from orchestrator.state_cache import StateCache
from orchestrator.transition import OutboxEntry, Transition
from orchestrator.transition import Outgoing as Outgoing  # callers name it by the store too


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


def recent_key(tenant: str) -> str:
    """A tenant's latest request ids, scored by submission time (`GET /v1/queries`)."""
    return f"ragbus:recent:{{{tenant}}}"


RECENT_KEPT = 200
"""Request ids a tenant's recent list keeps (their states expire on their own TTL)."""

CREATE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4]) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[4])
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -tonumber(ARGV[6]) - 1)
redis.call('EXPIRE', KEYS[3], ARGV[7])
return 1
"""
"""KEYS: state, deadlines, the tenant's recent list. ARGV: the state, its TTL, its first
deadline (or ''), the request id, its submission time, how many recent ids to keep, the
recent list's TTL. Returns 1 when created, 0 when the id was taken."""


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
  redis.call('DEL', KEYS[6])
elseif ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[6])
end
local sent = tonumber(ARGV[9])
for i = 1, sent do
  redis.call('HDEL', KEYS[4], ARGV[9 + i])
end
local first = 10 + sent
local entries = tonumber(ARGV[8])
if entries > 0 then
  for i = 0, entries - 1 do
    redis.call('HSET', KEYS[4], ARGV[first + 2 * i], ARGV[first + 1 + 2 * i])
  end
  redis.call('EXPIRE', KEYS[4], ARGV[7])
end
return 1
"""
"""KEYS: state, version, seen, outbox, deadlines, claims (deleted when the request ends).
ARGV: the version read, the inbound event id (or ''), the new state (or ''), its TTL, the next
deadline ('' keep, '-' none), the request id, the bookkeeping TTL, the outbox entry count, the
count of published outbox entries to delete, their event ids, then the new entries' (event id,
entry) pairs. Returns 1 when committed, 0 when the version moved, -1 when the event was
applied meanwhile. A state saved before versions had a key of their own has no version key: it
is taken as read."""


@dataclass
class Applied:
    transition: Transition | None
    outbox: list[OutboxEntry]
    duplicate: bool = False


def initial_state(submitted: QuerySubmitted, settings: Settings, now: float) -> RequestState:
    return RequestState(
        request_id=submitted.request_id,
        tenant=submitted.tenant,
        query=submitted.query,
        search_queries=[submitted.query],
        session_id=submitted.session_id,
        namespaces=submitted.namespaces,
        filter=submitted.filter,
        reader=submitted.reader,
        top_k=submitted.top_k,
        channel_top_k=max(settings.channel_top_k, submitted.top_k),
        intent_override=submitted.intent,
        mode=submitted.mode,
        trace=submitted.trace,
        parent_id=submitted.parent_id,
        research_depth=submitted.research_depth,
        deadline_at=now + _timeout(submitted, settings),
    )


def _timeout(submitted: QuerySubmitted, settings: Settings) -> float:
    research = submitted.mode == "research"
    return settings.research_timeout_s if research else settings.request_timeout_s


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
        self.sessions = SessionStore.from_settings(redis, settings)
        self._commit_script = redis.register_script(COMMIT)
        self._create_script = redis.register_script(CREATE)
        self._cache = StateCache(settings.saga_state_cache)

    def _ttl(self, state: RequestState) -> int:
        if state.status.is_terminal:
            return self.settings.state_ttl_s
        return int(self.settings.request_timeout_s * 3 + self.settings.state_ttl_s)

    async def create(self, submitted: QuerySubmitted, *, drive: bool = False) -> RequestState:
        """Record a new request, its first deadline and its place in its tenant's recent
        requests, in one atomic round trip; `StateExists` when its id is taken. With `drive`
        this process decides the request's first transition next (`api.submission`), so the
        state is kept as the one it committed (`state_cache`): that transition reads nothing."""
        state = initial_state(submitted, self.settings, time.time())
        due = next_due(state)
        created = await replicated(
            self.redis,
            lambda client: self._create_script(
                keys=[state_key(state.request_id), DEADLINES_KEY, recent_key(state.tenant)],
                args=[
                    state.model_dump_json(exclude_defaults=True),
                    self._ttl(state),
                    "" if due is None else repr(due),
                    state.request_id,
                    repr(state.created_at.timestamp()),
                    RECENT_KEPT,
                    self.settings.state_ttl_s,
                ],
                client=client,
            ),
            "saga_create",
        )
        if not created:
            raise StateExists(state.request_id)
        if drive:
            self._cache.put(state.request_id, state, _version(state))
        if state.session_id is not None:
            # the question takes its place in the conversation now, by submission time; if
            # this write is lost, the memory worker records the turn when the request ends
            turn = SessionTurn(
                request_id=state.request_id,
                query=state.query,
                submitted_at=state.created_at.timestamp(),
            )
            await self.sessions.begin(
                session_space(state.tenant, state.reader), state.session_id, turn
            )
        return state

    async def recent(self, tenant: str, limit: int) -> list[RequestState]:
        """The tenant's latest requests, newest first (those whose state has not expired)."""
        ids = await self.redis.zrevrange(recent_key(tenant), 0, max(0, limit - 1))
        async with self.redis.pipeline(transaction=False) as pipe:
            for request_id in ids:
                pipe.get(state_key(str(request_id)))
            raws = await pipe.execute()
        states = [RequestState.model_validate_json(raw) for raw in raws if raw]
        return [state for state in states if state.tenant == tenant]

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
        cached = self._cache.take(request_id)
        sent = cached.sent if cached is not None else ()
        current: RequestState | None
        while True:
            if cached is not None:  # what this process committed last (`state_cache`)
                current, version, cached = cached.state, cached.version, None
            else:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.get(skey)
                    pipe.get(vkey)
                    pipe.sismember(dkey, event_id or "")
                    raw, stored_version, seen = await pipe.execute()
                if event_id is not None and seen:
                    return await self._duplicate(request_id, sent)
                current = RequestState.model_validate_json(raw) if raw else None
                version = int(stored_version) if stored_version is not None else _version(current)
            transition = decide(current)
            entries = [m.entry() for m in transition.messages]
            outcome = await self._commit(
                request_id, event_id, version, current, transition.state, entries, sent
            )
            if outcome == 1:
                if transition.state is not None:
                    self._cache.put(request_id, transition.state, version + 1)
                return Applied(transition, entries)
            if outcome == -1:  # another replica applied this very event first
                return await self._duplicate(request_id, sent)
            # another replica changed this request first: read and decide again

    async def _duplicate(self, request_id: str, sent: tuple[str, ...]) -> Applied:
        """An event applied already: the messages its transition left unpublished (those this
        process has published since are deleted, not sent again)."""
        return Applied(None, await self._pending_less(request_id, sent), duplicate=True)

    async def _commit(
        self,
        request_id: str,
        event_id: str | None,
        version: int,
        current: RequestState | None,
        new: RequestState | None,
        entries: list[OutboxEntry],
        sent: tuple[str, ...] = (),
    ) -> int:
        state_json, due = "", ""
        if new is not None:
            new.version = version + 1
            state_json = new.model_dump_json(exclude_defaults=True)
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
            claims_key(request_id),
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
            len(sent),
            *sent,
        ]
        for index, entry in enumerate(entries):
            placed = OutboxEntry(
                entry.event_id,
                entry.subject,
                entry.stream,
                entry.body,
                (version + 1, index),
                entry.kind,
            )
            args += [placed.event_id, placed.to_json()]
        return int(
            await replicated(
                self.redis,
                lambda client: self._commit_script(keys=keys, args=args, client=client),
                "saga_commit",
            )
        )

    async def outbox_sent(self, request_id: str, event_ids: list[str]) -> None:
        """Delete outbox entries that went out."""
        if event_ids:
            await self.redis.hdel(outbox_key(request_id), *event_ids)

    async def published(self, request_id: str, event_ids: list[str], *, ended: bool) -> None:
        """A transition's messages went out. Once a request's `done` is out nothing more of it
        may be sent, so its whole outbox goes (entries still waiting there belong to
        transitions whose process died before publishing them; they are moot now). Otherwise
        the request's next commit in this process deletes them with its own script
        (`StateCache.note_sent`), or they are deleted now when it has no cached state."""
        if ended:
            await self.redis.delete(outbox_key(request_id))
        elif event_ids and not self._cache.note_sent(request_id, event_ids):
            await self.outbox_sent(request_id, event_ids)

    async def outbox_pending(self, request_id: str) -> bool:
        """Whether a committed transition's messages are still to be published (its process
        died between the commit and the publish; a redelivery will publish them)."""
        return bool(await self.redis.exists(outbox_key(request_id)))

    async def unpublished(self, request_id: str) -> list[OutboxEntry]:
        """`pending_outbox` less what this process has published (and kept for the request's
        next commit to delete: deleted now instead)."""
        return await self._pending_less(request_id, self._cache.forget_sent(request_id))

    async def _pending_less(self, request_id: str, sent: tuple[str, ...]) -> list[OutboxEntry]:
        """The pending outbox once the entries known published (`sent`) are deleted."""
        await self.outbox_sent(request_id, list(sent))
        return await self.pending_outbox(request_id)

    async def pending_outbox(self, request_id: str) -> list[OutboxEntry]:
        """The messages still to publish, in the order their transitions decided them."""
        raw = await self.redis.hgetall(outbox_key(request_id))
        entries = [OutboxEntry.from_json(str(eid), str(text)) for eid, text in raw.items()]
        return sorted(entries, key=lambda entry: entry.place)
