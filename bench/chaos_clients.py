"""The chaos run's clients: closed-loop askers that outlast the failures around them, retrying a
submission with the same `Idempotency-Key` and resuming a dropped event stream with
`Last-Event-ID`, and each request as a client saw it (`Tracked`)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field

from client import RagbusClient

QUESTIONS = (
    "Who designed the Gatun Locks?",
    "Why did the French attempt to build the canal fail?",
    "How did sanitation change the construction of the canal?",
    "What was the Culebra Cut?",
    "When was the canal handed to Panama?",
    "What water problem does the expansion face?",
)


TURNS_A_SESSION = 10
"""Questions a loop asks in one conversation before it starts another: well under the turns a
session keeps (`RAGBUS_SESSION_MAX_TURNS`), so every turn must still be there."""


@dataclass
class Tracked:
    """One request as a client saw it."""

    request_id: str
    submitted_at: float
    seen: set[tuple[int, int]] = field(default_factory=set)
    """The events it received, as (stream sequence, part): the part of one of several phase
    events stored in one message, 0 for a message of one event."""
    status: str = "unfinished"
    latency_ms: float | None = None
    resumes: int = 0
    done_seq: int | None = None
    """The id of the `done` the client got: the stream's own, or one the API made from the
    request's record (its id the subject's last sequence then)."""
    question: str = ""
    key: str = ""
    """The `Idempotency-Key` the API accepted it under: asked again, it must name this
    request (`bench.chaos_redis`)."""
    session_id: str | None = None


class Clients:
    """Closed-loop askers that outlast the failures around them."""

    def __init__(
        self, url: str, stop: asyncio.Event, request_timeout_s: float, *, sessions: bool = False
    ) -> None:
        self.url = url
        self.stop = stop
        self.timeout_s = request_timeout_s
        self.sessions = sessions
        """Each loop asks in a conversation of its own (`session_id`), whose turns the checks
        count."""
        self.tracked: list[Tracked] = []
        self.submit_retries = 0
        self.gave_up_submitting = 0

    async def _submit(
        self, client: RagbusClient, question: str, key: str, session_id: str | None
    ) -> str | None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                answer = await client.submit(question, idempotency_key=key, session_id=session_id)
                return str(answer["request_id"])
            except Exception:  # the API or the bus is down: the same key again, later
                self.submit_retries += 1
                await asyncio.sleep(0.5)
        self.gave_up_submitting += 1
        return None

    async def _follow(self, client: RagbusClient, tracked: Tracked) -> None:
        deadline = time.monotonic() + self.timeout_s + 60
        last: str | None = None
        while time.monotonic() < deadline:
            try:
                async for message in client.stream_events(tracked.request_id, last):
                    # `<seq>`, or `<seq>.<part>` for one of the phase events of one message
                    seq, _, part = (message.id or "").partition(".")
                    if seq.isdigit():
                        last = message.id
                        tracked.seen.add((int(seq), int(part) if part.isdigit() else 0))
                    if message.event == "done":
                        tracked.done_seq = int(seq) if seq.isdigit() else None
                        tracked.status = str(message.data.get("data", {}).get("status"))
                        tracked.latency_ms = (time.monotonic() - tracked.submitted_at) * 1000
                        return
            except Exception:
                pass
            tracked.resumes += 1
            await asyncio.sleep(0.5)

    async def loop(self) -> None:
        session_id: str | None = None
        asked_in_session = 0
        async with RagbusClient(self.url, timeout=10) as client:
            while not self.stop.is_set():
                if self.sessions and asked_in_session % TURNS_A_SESSION == 0:
                    session_id = f"chaos-{uuid.uuid4().hex[:12]}"
                asked_in_session += 1
                started = time.monotonic()
                question, key = random.choice(QUESTIONS), uuid.uuid4().hex
                request_id = await self._submit(client, question, key, session_id)
                if request_id is None:
                    continue
                tracked = Tracked(
                    request_id, started, question=question, key=key, session_id=session_id
                )
                self.tracked.append(tracked)
                await self._follow(client, tracked)
