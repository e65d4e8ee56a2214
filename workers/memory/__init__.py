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

The channel never cites the user's own questions: an answer is remembered without its question
(which is embedded beside it, for recall, but is not its text), and what it recalls is cut of
any line or sentence that is the question being asked or an earlier question of the session
(`evidence`), a memory with nothing else left not recalled at all. A fact the user stated is
recalled as such ("You said"), unless it is the very question being asked.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence

from faststream.nats import NatsRouter

from contracts.commands import SearchCommand
from contracts.enums import CHANNEL_PHASE, Channel, Step
from contracts.models import RetrievedChunk
from contracts.results import SearchResult
from contracts.sessions import MemoryMessage, RememberTurn, SessionTurn
from infra.errors import PoisonMessage
from infra.logging import get_logger
from infra.memory.semantic import Memory, MemoryIndex, new_memory, scope_of
from infra.memory.sessions import SessionStore, forgotten_key
from infra.retrieval.vectors.codec import unpack_query
from infra.runtime.bus import step_consumer, subscriber_kwargs
from infra.runtime.phase_events import phase
from infra.runtime.resources import Resources
from infra.runtime.worker_runtime import ResultPublisher, step_result_fields, step_router
from workers.search import SHOWN_QUERY_CHARS, result_event_id

log = get_logger(__name__)

_QUESTION_START = re.compile(
    r"^\s*(?:who|whom|whose|what|which|when|where|why|how|is|are|was|were|do|does|did|can|"
    r"could|should|would|will|may|might|must|has|have|had|tell|show|list|give|find|explain|"
    r"describe|compare|summari[sz]e|compute|calculate)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|my|mine|we|our|me)\b|^\s*(?:remember|note)\b", re.I)
_CITATION_MARK = re.compile(r"\s*\[\d+\]")


def is_statement(query: str) -> bool:
    """A fact the user states about themselves or asks to be remembered ("I am allergic to
    penicillin.", "Remember that the audit is in May."), not a question or an instruction."""
    text = query.strip()
    return (
        len(text.split()) >= 3
        and "?" not in text
        and not _QUESTION_START.match(text)
        and bool(_FIRST_PERSON.search(text))
    )


def memorable(cmd: RememberTurn) -> Memory | None:
    """What a finished turn leaves in memory: the user's statement, or an accepted answer (its
    text the answer alone: the question is kept beside it, for recall, never cited)."""
    turn = cmd.turn
    if is_statement(turn.query):
        return new_memory("fact", turn.query.strip(), "You said", turn.request_id)
    if cmd.accepted and turn.answer:
        answer = _CITATION_MARK.sub("", turn.answer).strip()
        question = turn.context_text
        return new_memory(
            "answer",
            answer,
            f"Earlier answer: {question[:120]}",
            turn.request_id,
            question=question,
        )
    return None


_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")


def _said(text: str) -> str:
    """Text as compared with what the user asked: its words, lower case."""
    return " ".join(_WORD.findall(text.lower()))


def _sentences(line: str) -> list[str]:
    return [part for part in _SENTENCE_BREAK.split(line.strip()) if part]


def _pieces(text: str) -> list[str]:
    """The text, each of its lines, and each sentence of each line."""
    lines = text.splitlines()
    return [text, *lines, *(sentence for line in lines for sentence in _sentences(line))]


def users_questions(query: str, request_id: str, turns: Sequence[SessionTurn]) -> set[str]:
    """The user's own words a memory must not be cited for, as `_said` writes them: the
    question being asked (as searched, and as asked), every earlier question of the session
    (as asked and as made standalone), and each of their lines and sentences. A statement of
    an earlier turn is not a question: it is remembered, and recalled, as what the user said."""
    texts: list[str] = [query]
    for turn in turns:
        if turn.request_id == request_id or not is_statement(turn.query):
            texts += [turn.query, turn.standalone_query or ""]
    return {said for text in texts for piece in _pieces(text) if (said := _said(piece))}


def evidence(memory: Memory, asked: Iterable[str]) -> str:
    """What of a memory the channel may cite: its text less every line or sentence that is one
    of the user's questions (`users_questions`); empty when nothing else is left."""
    asked = set(asked)
    text = memory.text
    if memory.kind == "answer" and not memory.question and "\n" in text:
        text = text.split("\n", 1)[1]  # made as "question\nanswer", before they were apart
    if _said(text) in asked:
        return ""
    kept_lines = []
    for line in text.splitlines():
        if _said(line) in asked:
            continue
        kept = [part for part in _sentences(line) if _said(part) not in asked]
        if len(kept) == len(_sentences(line)):
            kept_lines.append(line.rstrip())
        elif kept:
            kept_lines.append(" ".join(kept))
    return "\n".join(line for line in kept_lines if _said(line)).strip()


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
        if not await sessions.finish(cmd.tenant, cmd.session_id, cmd.turn):
            log.info("turn_of_forgotten_session", request_id=cmd.request_id)
            return
        scope = scope_of(cmd.tenant, cmd.session_id, settings.memory_scope)
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
            forgotten_marker=forgotten_key(cmd.tenant, cmd.session_id),
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
            chunks = await recall(cmd)
            run.metadata["count"] = len(chunks)
        result = SearchResult(
            **step_result_fields(cmd, run),
            event_id=result_event_id(cmd),
            channel=Channel.MEMORY,
            chunks=chunks,
        )
        await publisher.publish(result)

    async def recall(cmd: SearchCommand) -> list[RetrievedChunk]:
        scope = scope_of(cmd.tenant, cmd.session_id, settings.memory_scope)
        if scope is None:
            return []
        encoder = await resources.encoder()
        cmd = await claims.with_vector(cmd)
        vector = unpack_query(cmd.query_vector, encoder.dim)
        if vector is None:
            vector = (await encoder.aencode([cmd.query]))[0]
        vectors = await resources.memory_vectors()
        hits = await vectors.store.read(vectors.search, scope, vector, cmd.top_k)
        hits = [hit for hit in hits if hit.score >= settings.memory_min_score]
        found = await index.get(scope, [hit.chunk_id for hit in hits])
        hits = [hit for hit in hits if hit.chunk_id in found]  # deleted: never recalled
        if not hits:
            return []
        whole = await vectors.store.read(vectors.texts, hits)
        turns = await sessions.turns(cmd.tenant, cmd.session_id) if cmd.session_id else []
        asked = users_questions(cmd.query, cmd.request_id, turns)
        cited = []
        for chunk in whole:
            text = evidence(found[chunk.chunk_id], asked)
            if text:  # nothing but the user's own question: not recalled
                cited.append(chunk.model_copy(update={"text": text}))
        channel = Channel.MEMORY.value
        return [
            chunk.model_copy(update={"rank": rank, "channels": {channel: rank}})
            for rank, chunk in enumerate(cited, start=1)
        ]

    router.include_router(commands)
    return router
