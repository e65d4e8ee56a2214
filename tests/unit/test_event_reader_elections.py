"""A request's event reader waits out a stream that is electing a leader.

On a cluster that has just lost a stream's leader, JetStream answers nothing (or "no response
from stream") for seconds: creating the reader's ordered consumer and asking the subject's last
sequence both fail meanwhile. The SSE relay used to end the caller's stream mid-body then
(`make test`'s cluster test saw "incomplete chunked read"); the reader now retries them."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import nats.errors
import nats.js.errors

from api.event_stream import each_event, request_messages


class Subscription:
    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.pending = [
            SimpleNamespace(
                data=json.dumps(body).encode(),
                metadata=SimpleNamespace(sequence=SimpleNamespace(stream=seq)),
            )
            for seq, body in enumerate(bodies, start=1)
        ]

    async def next_msg(self, timeout: float) -> Any:
        if not self.pending:
            raise nats.errors.TimeoutError
        return self.pending.pop(0)

    async def unsubscribe(self) -> None:
        return None


class ElectingJetStream:
    """Fails the first `failures` calls of each API, as a stream with no leader does."""

    def __init__(self, bodies: list[dict[str, Any]], failures: int) -> None:
        self.bodies = bodies
        self.failures = {"subscribe": failures, "last": failures}
        self.calls = {"subscribe": 0, "last": 0}

    def _fail(self, api: str, error: type[Exception]) -> None:
        self.calls[api] += 1
        if self.calls[api] <= self.failures[api]:
            raise error

    async def subscribe(self, subject: str, **kwargs: Any) -> Subscription:
        self._fail("subscribe", nats.errors.TimeoutError)
        return Subscription(self.bodies)

    async def get_last_msg(self, stream: str, subject: str) -> Any:
        self._fail("last", nats.js.errors.NoStreamResponseError)
        return SimpleNamespace(seq=len(self.bodies))


async def test_the_reader_waits_for_a_leader_and_misses_nothing() -> None:
    bodies = [
        {"type": "phase", "data": {"phase": "critic"}},
        {"type": "answer", "data": {"content": "x"}},
    ]
    js = ElectingJetStream(bodies, failures=2)

    async def finished() -> bool:
        return True

    seen = [
        (seq, event["type"])
        async for seq, event in each_event(
            request_messages(
                js,  # type: ignore[arg-type]
                "r1",
                is_finished=finished,
                idle_s=0.01,
            )
        )
    ]
    assert seen == [(1, "phase"), (2, "answer")]
    assert js.calls["subscribe"] == 3  # two unanswered, then the consumer
    assert js.calls["last"] >= 3  # the quiet subject's last sequence, asked through the election
