"""What a step's handler knows about the message it handles: how many times JetStream has
delivered it, and how it asks whether its request is still live. The error policy
(`worker_runtime.error_policy`) sets both for each message (`message_context`), because
handlers take only their decoded message (no dependency injection on the hot path)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class RequestNotLive(Exception):
    """The command's request does not exist or has finished: drop the command unrun."""


class _Liveness:
    """One message's view of whether its request is live. `once` asks Redis once however
    many phases the message runs (a search command runs one per channel, side by side: they
    share the one answer); `now` asks again, for an event a long step is about to send."""

    def __init__(self, is_live: Callable[[str], Awaitable[bool]]) -> None:
        self._is_live = is_live
        self._asked: dict[str, asyncio.Future[bool]] = {}
        self._asked_at: dict[str, float] = {}

    def once(self, request_id: str) -> Awaitable[bool]:
        if request_id not in self._asked:
            self._asked[request_id] = asyncio.ensure_future(self._is_live(request_id))
            self._asked_at[request_id] = time.monotonic()
        return self._asked[request_id]

    def age(self, request_id: str) -> float:
        """Seconds since this message first asked whether its request is live (0 when it
        has not asked)."""
        asked_at = self._asked_at.get(request_id)
        return 0.0 if asked_at is None else time.monotonic() - asked_at

    async def now(self, request_id: str) -> bool:
        return await self._is_live(request_id)

    def found_finished(self, request_id: str) -> bool:
        """Whether this message has already found its request finished."""
        asked = self._asked.get(request_id)
        return (
            asked is not None and asked.done() and not asked.cancelled()
            and asked.exception() is None and not asked.result()
        )  # fmt: skip

    def finished(self, request_id: str) -> None:
        """The request was found finished: every later `once` for this message says so, so
        its next phase does not start (nothing of it may land after the request's done)."""
        ended: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ended.set_result(False)
        self._asked[request_id] = ended


LIVENESS: ContextVar[_Liveness | None] = ContextVar("ragbus_liveness", default=None)
"""How the message being handled asks whether its request is live (set by `message_context`)."""


DELIVERIES: ContextVar[int] = ContextVar("ragbus_deliveries", default=1)
"""How many times JetStream has delivered the message being handled (set by `message_context`)."""


def current_deliveries() -> int:
    """The delivery count of the message being handled: handlers take only their decoded
    message (no dependency injection on the hot path), so the policy hands this over."""
    return DELIVERIES.get()


async def require_live(request_id: str) -> None:
    liveness = LIVENESS.get()
    if liveness is not None and not await liveness.once(request_id):
        raise RequestNotLive(request_id)


def heard_live_before(request_id: str, seconds: float) -> bool:
    """Whether the message being handled asked about its request more than `seconds` ago: a
    message that waited (behind other work in its process, or for a step before this one)
    may find its request finished since, however quick its own step, and an event it sends
    then asks again, as a long step's does."""
    liveness = LIVENESS.get()
    return liveness is not None and liveness.age(request_id) > seconds


async def still_live(request_id: str) -> bool:
    """Asked afresh before a long step sends an event: its request may have finished (timed
    out, cancelled) while it ran, and nothing may follow a request's `done`."""
    liveness = LIVENESS.get()
    return liveness is None or await liveness.now(request_id)


@contextmanager
def message_context(
    is_live: Callable[[str], Awaitable[bool]] | None, deliveries: int = 1
) -> Iterator[_Liveness | None]:
    """While one message is handled: its delivery count, and its view of whether its
    request is live (none: every request counts as live)."""
    liveness = _Liveness(is_live) if is_live is not None else None
    liveness_token = LIVENESS.set(liveness)
    deliveries_token = DELIVERIES.set(deliveries)
    try:
        yield liveness
    finally:
        DELIVERIES.reset(deliveries_token)
        LIVENESS.reset(liveness_token)
