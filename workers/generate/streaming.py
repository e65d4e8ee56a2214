"""Streams an answer to the caller as token events, a few words at a time.

The extractive answer exists whole before it is sent; streaming it anyway gives every
generator the same event shape, so callers render LLM and extractive answers alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from contracts.envelope import Envelope
from contracts.events import TokenData, TokenEvent
from infra.runtime.bus import Bus

WORDS_PER_TOKEN = 4

_WORD = re.compile(r"\S+\s*")


def pieces(text: str, words: int = WORDS_PER_TOKEN) -> Iterator[str]:
    """`text` in pieces of `words` words each; joined back they give `text` exactly."""
    tokens = _WORD.findall(text)
    lead = text[: len(text) - len(text.lstrip())]
    for start in range(0, len(tokens), words):
        yield (lead if start == 0 else "") + "".join(tokens[start : start + words])


class TokenEmitter:
    """Sends `token` events for one request with consecutive indexes, however many sources
    (an LLM stream, then perhaps a fallback answer) contribute to them."""

    def __init__(self, bus: Bus, cmd: Envelope) -> None:
        self.bus = bus
        self.cmd = cmd
        self.count = 0

    async def emit(self, text: str) -> None:
        if not text:
            return
        await self.bus.emit(
            TokenEvent(
                request_id=self.cmd.request_id,
                attempt=self.cmd.attempt,
                trace=self.cmd.trace,
                data=TokenData(text=text, index=self.count),
            )
        )
        self.count += 1


async def stream_answer(
    bus: Bus, cmd: Envelope, text: str, emitter: TokenEmitter | None = None
) -> int:
    """Emit the answer as `token` events on the request's subject; returns how many."""
    emitter = emitter or TokenEmitter(bus, cmd)
    start = emitter.count
    for piece in pieces(text):
        await emitter.emit(piece)
    return emitter.count - start
