"""An OpenAI conversation as a ragbus session (`api.openai_chat`).

The last `user` message is the question; the user/assistant pairs before it are the turns it
follows. They are written as finished turns of a session (`SessionStore.begin`: a turn id
written before is left alone), so the classify step makes a follow-up standalone from them
as it does for any `session_id`: the caller's own session (the pairs it lacks are added, each
in its place among the turns it has), or one of the request's own, `oai-<32 hex>`, derived
from the messages and the `Idempotency-Key` when one is sent (a retry asks the same request),
random otherwise: a regenerated answer never reads the answer it replaces as a turn.
Only the last `RAGBUS_SESSION_CONTEXT_TURNS` pairs are written, the turns a rewrite reads.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field

from api.asking import Door
from api.auth import Caller
from api.openai_schemas import AssistantMessage, ChatCompletionRequest, UserMessage, text_of
from contracts.enums import RequestStatus
from contracts.queries import MAX_QUERY_CHARS
from contracts.sessions import MAX_TURN_ANSWER_CHARS, SessionTurn
from infra.memory.sessions import SessionStore


@dataclass
class Pair:
    """An earlier question and the answer after it (None: none came)."""

    question: str
    answer: str | None = None


@dataclass
class Conversation:
    question: str
    pairs: list[Pair] = field(default_factory=list)
    prompt_chars: int = 0

    @classmethod
    def of(cls, body: ChatCompletionRequest) -> Conversation:
        """The last user message is the question; the user/assistant messages before it are
        the pairs; the rest is ignored."""
        last = max(i for i, m in enumerate(body.messages) if isinstance(m, UserMessage))
        pairs: list[Pair] = []
        for message in body.messages[:last]:
            if isinstance(message, UserMessage):
                pairs.append(Pair(text_of(message.content)))
            elif isinstance(message, AssistantMessage) and pairs:
                said = text_of(message.content)
                if said:
                    earlier = pairs[-1].answer
                    pairs[-1].answer = f"{earlier}\n\n{said}" if earlier else said
        chars = sum(len(text_of(m.content)) for m in body.messages)
        question = text_of(body.messages[last].content)
        return cls(question=question, pairs=pairs, prompt_chars=chars)


def _norm(text: str) -> str:
    return " ".join(text.split())[:MAX_QUERY_CHARS]


async def session_for(
    door: Door,
    caller: Caller,
    body: ChatCompletionRequest,
    conversation: Conversation,
    key: str | None,
) -> str | None:
    """The session the question is asked in, its earlier turns written: the caller's, or one
    of the request's own; None for a first question without one."""
    keep = door.settings.session_context_turns
    pairs = conversation.pairs[-keep:] if keep > 0 else []
    if body.session_id is not None:
        session_id = body.session_id
    elif not pairs:
        return None
    elif key is None:
        session_id = f"oai-{uuid.uuid4().hex}"
    else:  # a retry with the same key asks the same request
        said = [[p.question, p.answer] for p in pairs] + [conversation.question, key]
        session_id = f"oai-{hashlib.sha256(json.dumps(said).encode()).hexdigest()[:32]}"
    if pairs:
        sessions = SessionStore.from_settings(door.redis, door.settings)
        await seed(sessions, caller.space, session_id, pairs)
    return session_id


async def seed(sessions: SessionStore, tenant: str, session_id: str, pairs: list[Pair]) -> int:
    """Write the pairs the session lacks (by question) as finished turns, each between the
    session's turns of the pairs around it (the latest before now when none follows), so the
    conversation reads in the order of the messages. Idempotent: a pair found (or a turn id
    written before) is left alone. Returns the turns written."""
    existing = await sessions.turns(tenant, session_id)
    used: set[str] = set()
    times: list[float | None] = []
    for pair in pairs:
        asked = _norm(pair.question)
        found = next(
            (t for t in existing if t.request_id not in used and _norm(t.query) == asked), None
        )
        if found is not None:
            used.add(found.request_id)
        times.append(found.submitted_at if found is not None else None)
    written = 0
    now = time.time()
    for n, (pair, at) in enumerate(zip(pairs, _placed(times, now), strict=True)):
        if times[n] is not None:
            continue
        digest = hashlib.sha256(
            json.dumps([session_id, n, pair.question, pair.answer]).encode()
        ).hexdigest()
        turn = SessionTurn(
            request_id=f"oai-{digest[:40]}",
            query=pair.question.strip()[:MAX_QUERY_CHARS],
            answer=pair.answer[:MAX_TURN_ANSWER_CHARS] if pair.answer else None,
            status=RequestStatus.COMPLETED.value,
            submitted_at=at,
            finished_at=at,
        )
        written += await sessions.begin(tenant, session_id, turn)
    return written


def _placed(times: list[float | None], now: float) -> list[float]:
    """Times for the pairs without one: evenly between the known ones around them (before
    `now` where none follows, a millisecond apart where none precedes)."""
    placed: list[float] = []
    n = 0
    while n < len(times):
        known = times[n]
        if known is not None:
            placed.append(known)
            n += 1
            continue
        end = n
        while end < len(times) and times[end] is None:
            end += 1
        run = end - n
        high = times[end] if end < len(times) else now
        assert high is not None
        low = placed[-1] if placed else high - (run + 1) * 0.001
        step = (high - low) / (run + 1)
        placed.extend(low + step * (i + 1) for i in range(run))
        n = end
    return placed
