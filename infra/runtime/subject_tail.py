"""A request's subject tail: its last message's sequence, and whether that message is the
request's `done`. What the done fence (`infra.runtime.done_fence`) reads before it publishes,
and what the runtime's `Bus` holds once it is connected to JetStream (`Bus.fence`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext


@dataclass(frozen=True)
class SubjectTail:
    """The last message on a subject: its sequence (0 when the subject has none) and whether
    it is the request's `done`."""

    seq: int
    done: bool


class DoneFence:
    """Reads a request's subject tail; given to the runtime's `Bus` once it is connected."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def tail(self, stream: str, subject: str) -> SubjectTail:
        try:
            last = await self._js.get_last_msg(stream, subject)
        except nats.js.errors.NotFoundError:
            return SubjectTail(0, done=False)
        return SubjectTail(last.seq or 0, done=_is_done(last.data))


def _is_done(data: bytes | None) -> bool:
    try:
        body = json.loads(data or b"")
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("type") == "done"
