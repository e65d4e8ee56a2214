"""What a conversation's memory keeps and what it recalls: the memory engine.

- `memorable`: what a finished turn leaves in the scope's semantic memory: a fact the user
  stated, or an accepted answer;
- `recall`: the `memory` channel: the scope's memories nearest the query, each cut of the
  user's own questions (`evidence`).

The channel never cites the user's own questions: an answer is remembered without its question
(which is embedded beside it, for recall, but is not its text), and what it recalls is cut of
any line or sentence that is the question being asked or an earlier question of the session
(`evidence`), a memory with nothing else left not recalled at all. A fact the user stated is
recalled as such ("You said"), unless it is the very question being asked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from contracts.access import session_space
from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.models import RetrievedChunk
from contracts.sessions import RememberTurn, SessionTurn
from infra.memory.semantic import Memory, MemoryIndex, new_memory, scope_of
from infra.memory.sessions import SessionStore
from infra.retrieval.vectors.codec import unpack_query

if TYPE_CHECKING:
    from infra.runtime.claims import Claims
    from infra.runtime.resources import Resources

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


async def recall(
    resources: Resources,
    cmd: SearchCommand,
    *,
    claims: Claims,
    index: MemoryIndex,
    sessions: SessionStore,
) -> list[RetrievedChunk]:
    """The scope's memories nearest `cmd.query`, whole (fusion cannot hydrate them), ranked
    for the `memory` channel; none without a scope. A memory deleted from `index` is never
    recalled, nor one with nothing left but the user's own questions, nor, for a request
    with a metadata filter, a remembered answer (only the facts the user stated)."""
    settings = resources.settings
    space = session_space(cmd.tenant, cmd.reader)  # a user's memories are its own
    scope = scope_of(space, cmd.session_id, settings.memory_scope)
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
    if cmd.filter is not None:
        # a remembered answer drew on documents the filter may leave out: a filtered request
        # recalls only what the user stated (no document's, so no metadata to pass)
        found = {key: memory for key, memory in found.items() if memory.kind == "fact"}
    hits = [hit for hit in hits if hit.chunk_id in found]  # deleted: never recalled
    if not hits:
        return []
    whole = await vectors.store.read(vectors.texts, hits)
    turns = await sessions.turns(space, cmd.session_id) if cmd.session_id else []
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
