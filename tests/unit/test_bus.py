"""Publishing retries a missing ack: safe, because the message id makes a re-send a no-op."""

from __future__ import annotations

from typing import Any

import nats.errors
import pytest
from nats.js.api import PubAck

from contracts.queries import QuerySubmitted
from infra.runtime.bus import MSG_ID_HEADER, PUBLISH_ATTEMPTS, Bus


class FlakyBroker:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[dict[str, Any]] = []

    async def publish(self, body: Any, subject: str, **kwargs: Any) -> PubAck:
        self.calls.append({"body": body, "subject": subject, **kwargs})
        if len(self.calls) <= self.failures:
            raise nats.errors.TimeoutError
        return PubAck(stream="RAG_QUERIES", seq=len(self.calls))


async def test_a_late_ack_is_retried_with_the_same_message_id() -> None:
    broker = FlakyBroker(failures=1)
    message = QuerySubmitted(request_id="r1", query="q")
    ack = await Bus(broker).publish(message, "rag.query.submitted", "RAG_QUERIES")  # type: ignore[arg-type]
    assert ack is not None
    assert len(broker.calls) == 2
    assert {c["headers"][MSG_ID_HEADER] for c in broker.calls} == {message.event_id}


async def test_the_error_surfaces_when_every_attempt_times_out() -> None:
    broker = FlakyBroker(failures=PUBLISH_ATTEMPTS)
    with pytest.raises(nats.errors.TimeoutError):
        await Bus(broker).publish(  # type: ignore[arg-type]
            QuerySubmitted(request_id="r1", query="q"), "rag.query.submitted", "RAG_QUERIES"
        )
    assert len(broker.calls) == PUBLISH_ATTEMPTS
