"""The `/v1` conversation endpoints: a session's turns, its memories, and forgetting them.

A session is its caller's: the tenant key's are the tenant's, each user's its own
(`contracts.access.session_space`), and another tenant's session of the same id is another
conversation, and this one answers 404 for it. A session exists while it has a turn or, with
session-scoped memory, something it taught (memories outlive turns: RAGBUS_MEMORY_TTL_S against
RAGBUS_SESSION_TTL_S); every path answers 404 for one that does not (`require_session`).
Forgetting takes the turns and the memory index out of Redis at once, so nothing of the
session is shown or recalled from then on, and asks the memory worker (`cmd.forget`) to
remove the vectors.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, status
from pydantic import BaseModel, Field

from api.auth import CallerDep, authenticate
from api.deps import BusDep, RedisDep, SettingsDep
from api.routes import V1_ERRORS
from contracts import subjects as sj
from contracts.enums import Step
from contracts.envelope import new_request_id
from contracts.queries import SESSION_ID_PATTERN
from contracts.sessions import ForgetMemory, SessionTurn
from infra.logging import get_logger
from infra.memory.semantic import MemoryIndex, MemoryKind, scope_of
from infra.memory.sessions import SessionStore
from infra.runtime.bus import Bus
from infra.settings import Settings

log = get_logger(__name__)

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)], responses=V1_ERRORS)

SessionPath = Annotated[
    str,
    Path(
        pattern=SESSION_ID_PATTERN,
        description="Letters, digits, '.', '_', ':' or '-'; 1-128, the first a letter or digit.",
    ),
]


class SessionView(BaseModel):
    session_id: str
    turns: list[SessionTurn] = Field(description="In the order the questions were asked.")


class SessionForgotten(BaseModel):
    session_id: str
    turns: int = Field(description="How many turns were deleted.")
    memories: int = Field(description="How many memories were deleted.")


class MemoryView(BaseModel):
    memory_id: str
    kind: MemoryKind
    text: str
    request_id: str = Field(description="The request whose turn taught it.")
    created_at: float


class MemoryList(BaseModel):
    scope: str = Field(description="`session` or `tenant` (RAGBUS_MEMORY_SCOPE).")
    memories: list[MemoryView]


def sessions_of(redis: RedisDep, settings: SettingsDep) -> SessionStore:
    return SessionStore.from_settings(redis, settings)


def memories_of(redis: RedisDep, settings: SettingsDep) -> MemoryIndex:
    return MemoryIndex(redis, settings.memory_ttl_s)


SessionsDep = Annotated[SessionStore, Depends(sessions_of)]
MemoriesDep = Annotated[MemoryIndex, Depends(memories_of)]


async def require_session(
    tenant: str,
    session_id: str,
    sessions: SessionStore,
    memories: MemoryIndex,
    settings: Settings,
) -> None:
    """404 unless the tenant has the session: a turn, or with session-scoped memory a memory
    (never used, expired or forgotten: 404; another tenant's: 404, its keys are that
    tenant's). With tenant-scoped memory a session's memories are every session's, so they
    make no session exist."""
    if await sessions.exists(tenant, session_id):
        return
    if settings.memory_scope == "session" and await memories.count(
        _scope(tenant, session_id, settings)
    ):
        return
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}")


@router.get("/sessions/{session_id}", response_model=SessionView, summary="A conversation")
async def get_session(
    session_id: SessionPath,
    caller: CallerDep,
    sessions: SessionsDep,
    memories: MemoriesDep,
    settings: SettingsDep,
) -> SessionView:
    """The session's turns: each question as asked, as made standalone, and its answer
    (`null` while the request runs); none when only its memories are left. 404 when the
    session is unknown (never used, expired or forgotten)."""
    turns = await sessions.turns(caller.space, session_id)
    if not turns:
        await require_session(caller.space, session_id, sessions, memories, settings)
    return SessionView(session_id=session_id, turns=turns)


@router.delete(
    "/sessions/{session_id}", response_model=SessionForgotten, summary="Forget a conversation"
)
async def delete_session(
    session_id: SessionPath,
    caller: CallerDep,
    sessions: SessionsDep,
    memories: MemoriesDep,
    bus: BusDep,
    settings: SettingsDep,
) -> SessionForgotten:
    """Deletes the turns and, with session-scoped memory, everything the session taught; a
    request of the session still running does not bring its turn back. 404 when there was
    nothing to forget."""
    turns = await sessions.forget(caller.space, session_id)
    forgotten = 0
    if settings.memory_scope == "session":
        scope = scope_of(caller.space, session_id, "session")
        assert scope is not None
        forgotten = await memories.clear(scope)
        await _forget_vectors(bus, caller.tenant, scope, None)
    if not turns and not forgotten:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}")
    log.info("session_forgotten", turns=turns, memories=forgotten)
    return SessionForgotten(session_id=session_id, turns=turns, memories=forgotten)


def _scope(tenant: str, session_id: str, settings: Settings) -> str:
    scope = scope_of(tenant, session_id, settings.memory_scope)
    assert scope is not None  # a session always has a scope
    return scope


@router.get(
    "/sessions/{session_id}/memories",
    response_model=MemoryList,
    summary="What a conversation remembers",
)
async def list_memories(
    session_id: SessionPath,
    caller: CallerDep,
    sessions: SessionsDep,
    memories: MemoriesDep,
    settings: SettingsDep,
) -> MemoryList:
    """The memories the session's questions recall: accepted answers and facts the user stated,
    oldest first. With RAGBUS_MEMORY_SCOPE=tenant every session of the tenant shares them.
    404 when the session is unknown."""
    await require_session(caller.space, session_id, sessions, memories, settings)
    found = await memories.list(_scope(caller.space, session_id, settings))
    return MemoryList(
        scope=settings.memory_scope,
        memories=[
            MemoryView(
                memory_id=m.memory_id,
                kind=m.kind,
                text=m.text,
                request_id=m.request_id,
                created_at=m.created_at,
            )
            for m in found
        ],
    )


@router.delete(
    "/sessions/{session_id}/memories/{memory_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Forget one memory",
)
async def delete_memory(
    session_id: SessionPath,
    memory_id: Annotated[str, Path(pattern=r"^[0-9a-f-]{36}$", description="A memory's id.")],
    caller: CallerDep,
    sessions: SessionsDep,
    memories: MemoriesDep,
    bus: BusDep,
    settings: SettingsDep,
) -> None:
    """404 when the session is unknown, or the memory is not its scope's."""
    await require_session(caller.space, session_id, sessions, memories, settings)
    scope = _scope(caller.space, session_id, settings)
    if not await memories.delete(scope, memory_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no memory {memory_id}")
    await _forget_vectors(bus, caller.tenant, scope, memory_id)


async def _forget_vectors(bus: Bus, tenant: str, scope: str, memory_id: str | None) -> None:
    """Ask the memory worker to remove the vectors; they are out of the index already, so a
    bus that is away only delays the clean-up (the next forget of the scope retries it)."""
    command = ForgetMemory(
        request_id=new_request_id(), tenant=tenant, scope=scope, memory_id=memory_id
    )
    try:
        await bus.publish(command, sj.cmd_subject(Step.MEMORY), sj.STREAM_CMD)
    except Exception:
        log.exception("memory_forget_publish_failed")
