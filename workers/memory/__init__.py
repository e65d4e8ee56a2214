"""Memory worker: records a conversation's turns, remembers what they taught, recalls it.

Three subscribers:
- `rag.cmd.memory`, `cmd.remember` (from the orchestrator's outbox when a session's request
  ends): completes the turn in the session store, and adds an accepted answer, or a fact the
  user stated, to the scope's semantic memory;
- `rag.cmd.memory`, `cmd.forget` (from the API): removes a scope's or one memory's vectors
  (the API already took them out of the index, so they are never recalled meanwhile);
- `rag.cmd.search.memory`: the `memory` channel, the scope's memories nearest the query.

The memory vectors belong to this worker alone: with the embedded store, writing and searching
them happen in one process, whatever process the other workers run in.

What a turn leaves in memory and what the channel recalls are the memory engine's
(`engines.memory.recall`: `memorable`, `recall`); it never cites the user's own questions.
"""

from __future__ import annotations

import asyncio

from faststream.nats import NatsRouter

from contracts.access import session_space
from contracts.commands import SearchCommand
from contracts.enums import CHANNEL_PHASE, Channel, Step
from contracts.results import SearchResult
from contracts.sessions import MemoryMessage, RememberTurn
from engines.memory.recall import memorable, recall
from infra.errors import PoisonMessage
from infra.logging import get_logger
from infra.memory.semantic import MemoryIndex, scope_of
from infra.memory.sessions import SessionStore, forgotten_key
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.topology import step_consumer, subscriber_kwargs
from infra.runtime.worker_runtime import (
    SHOWN_QUERY_CHARS,
    ResultPublisher,
    result_event_id,
    step_result_fields,
    step_router,
)

__all__ = ["create_router"]

log = get_logger(__name__)


def create_router(resources: Resources) -> NatsRouter:
    settings = resources.settings
    redis = resources.redis()
    claims = resources.claims()
    sessions = SessionStore.from_settings(redis, settings)
    index = MemoryIndex(redis, settings.memory_ttl_s)
    router = step_router(resources)
    commands = step_router(resources, on_dead_letter=None)  # nothing waits on a result
    resources.on_warm_up(resources.encoder, resources.memory_vectors)

    @commands.subscriber(
        **subscriber_kwargs(step_consumer(Step.MEMORY), settings, MemoryMessage),
        title="memory",
        description="Record a finished turn and remember what it taught; forget a scope.",
    )
    async def on_memory(cmd: MemoryMessage) -> None:
        if isinstance(cmd, RememberTurn):
            await remember(cmd)
            return
        vectors = await resources.memory_vectors()
        if cmd.memory_id:
            await asyncio.to_thread(vectors.delete, cmd.scope, cmd.memory_id)
        else:
            await asyncio.to_thread(vectors.drop, cmd.scope)
        log.info("memory_forgotten", scope_hash=hash(cmd.scope), memory_id=cmd.memory_id)

    async def remember(cmd: RememberTurn) -> None:
        space = session_space(cmd.tenant, cmd.reader)  # a user's sessions are its own
        if not await sessions.finish(space, cmd.session_id, cmd.turn):
            log.info("turn_of_forgotten_session", request_id=cmd.request_id)
            return
        scope = scope_of(space, cmd.session_id, settings.memory_scope)
        memory = memorable(cmd)
        if scope is None or memory is None:
            return
        encoder = await resources.encoder()
        vector = (await encoder.aencode([memory.recall_text]))[0]
        vectors = await resources.memory_vectors()
        await asyncio.to_thread(vectors.add, scope, memory, vector)
        added = await index.add(
            scope,
            memory,
            forgotten_marker=forgotten_key(space, cmd.session_id),
            asked_at=cmd.turn.submitted_at,
        )
        if not added:
            # Forgotten while the memory was encoded: the index refused it (the forget's
            # marker is set before its clear), so take its vector back out too.
            await asyncio.to_thread(vectors.delete, scope, memory.memory_id)
            log.info("memory_of_forgotten_session", request_id=cmd.request_id)
            return
        log.info("memory_added", kind=memory.kind, memory_id=memory.memory_id)

    publisher = ResultPublisher(router, Step.SEARCH, SearchResult, Channel.MEMORY)

    @router.subscriber(
        **subscriber_kwargs(step_consumer(Step.SEARCH, Channel.MEMORY), settings, SearchCommand),
        title="search.memory",
    )
    async def search_memory(cmd: SearchCommand) -> None:
        """The scope's memories nearest the query, whole (fusion cannot hydrate them)."""
        if cmd.channel is not Channel.MEMORY:
            raise PoisonMessage(f"a {cmd.channel} command on the memory subject")
        shown = cmd.query[:SHOWN_QUERY_CHARS]
        async with phase(
            resources.bus,
            cmd,
            CHANNEL_PHASE[Channel.MEMORY],
            channel=Channel.MEMORY.value,
            query=shown,
        ) as run:
            chunks = await recall(resources, cmd, claims=claims, index=index, sessions=sessions)
            run.metadata["count"] = len(chunks)
        result = SearchResult(
            **step_result_fields(cmd, run),
            event_id=result_event_id(cmd),
            channel=Channel.MEMORY,
            chunks=chunks,
        )
        await publisher.publish(result)

    router.include_router(commands)
    return router
