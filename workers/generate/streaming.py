"""Streams a model's answer to the caller as `token` events, coalesced.

Every event is a message stored in JetStream and relayed to each reader, so text is sent a
few times a second, not once per word: the first text goes out at once (the reader sees the
answer start), later text gathers for `FLUSH_S` or up to `MAX_TOKEN_CHARS` before it is sent.
An LLM's stream becomes a handful of events per second; joined in order, they give the text
exactly. An extractive answer is not streamed: it exists whole before it could be sent, and
the request's `answer` event carries it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator

from contracts.envelope import Envelope
from contracts.events import MAX_TOKEN_CHARS, TokenData, TokenEvent
from infra.runtime.bus import Bus
from infra.runtime.step_context import RequestNotLive, still_live

FLUSH_S = 0.25
"""Held text goes out once this long has passed since the last event."""


def pieces(text: str, max_chars: int = MAX_TOKEN_CHARS) -> Iterator[str]:
    """`text` in pieces of at most `max_chars`, cut after a space where there is one; joined
    back they give `text` exactly."""
    while len(text) > max_chars:
        cut = text.rfind(" ", 0, max_chars) + 1 or max_chars
        yield text[:cut]
        text = text[cut:]
    if text:
        yield text


class TokenEmitter:
    """Sends `token` events for one request with consecutive indexes, however many sources
    (an LLM stream, then perhaps a fallback answer) contribute to them. `emit` gathers text,
    `flush` sends what is held; a step calls `flush` when its text is complete.

    Each flush first asks whether the request is still live: a model can stream on after
    its request timed out or was cancelled, and nothing may follow the request's `done`. A
    flush that finds it finished raises `RequestNotLive`, which stops the step (the error
    policy drops its command) and the model's now useless stream with it."""

    def __init__(
        self,
        bus: Bus,
        cmd: Envelope,
        *,
        clock: Callable[[], float] = time.monotonic,
        is_live: Callable[[str], Awaitable[bool]] = still_live,
    ) -> None:
        self.bus = bus
        self.cmd = cmd
        self._is_live = is_live
        self.count = 0
        """Events sent so far."""
        self._held = ""
        self._clock = clock
        self._last = float("-inf")

    async def emit(self, text: str) -> None:
        if not text:
            return
        self._held += text
        if len(self._held) >= MAX_TOKEN_CHARS or self._clock() - self._last >= FLUSH_S:
            await self.flush()

    async def flush(self) -> None:
        held, self._held = self._held, ""
        if not held:
            return
        request_id = self.cmd.request_id
        if not await self._is_live(request_id):
            raise RequestNotLive(request_id)
        for piece in pieces(held):
            await self.bus.emit(
                TokenEvent(
                    **self.cmd.correlation(),
                    data=TokenData(text=piece, index=self.count),
                ),
                still_wanted=lambda: self._is_live(request_id),
            )
            self.count += 1
        self._last = self._clock()
