"""Streams an answer to the caller as token events, a few words at a time.

The extractive answer exists whole before it is sent; streaming it anyway gives every
generator the same event shape, so callers render LLM and extractive answers alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from contracts.envelope import Envelope
from contracts.events import TokenData, TokenEvent
from infra.bus import Bus

WORDS_PER_TOKEN = 4

_WORD = re.compile(r"\S+\s*")


def pieces(text: str, words: int = WORDS_PER_TOKEN) -> Iterator[str]:
    """`text` in pieces of `words` words each; joined back they give `text` exactly."""
    tokens = _WORD.findall(text)
    lead = text[: len(text) - len(text.lstrip())]
    for start in range(0, len(tokens), words):
        yield (lead if start == 0 else "") + "".join(tokens[start : start + words])


async def stream_answer(bus: Bus, cmd: Envelope, text: str) -> int:
    """Emit the answer as `token` events on the request's subject; returns how many."""
    count = 0
    for index, piece in enumerate(pieces(text)):
        await bus.emit(
            TokenEvent(
                request_id=cmd.request_id,
                attempt=cmd.attempt,
                trace=cmd.trace,
                data=TokenData(text=piece, index=index),
            )
        )
        count += 1
    return count
