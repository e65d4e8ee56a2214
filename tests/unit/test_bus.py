"""Publishing retries a missing ack: safe, because the message id makes a re-send a no-op."""

from __future__ import annotations

from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.js.api import PubAck

from contracts.queries import QuerySubmitted
from infra.runtime.bus import MSG_ID_HEADER, Bus


class FlakyBroker:
    def __init__(self, failures: int, error: type[Exception] = nats.errors.TimeoutError) -> None:
        self.failures = failures
        self.error = error
        self.calls: list[dict[str, Any]] = []

    async def publish(self, body: Any, subject: str, **kwargs: Any) -> PubAck:
        self.calls.append({"body": body, "subject": subject, **kwargs})
        if len(self.calls) <= self.failures:
            raise self.error
        return PubAck(stream="RAG_QUERIES", seq=len(self.calls))


async def test_a_late_ack_is_retried_with_the_same_message_id() -> None:
    broker = FlakyBroker(failures=1)
    message = QuerySubmitted(request_id="r1", query="q")
    ack = await Bus(broker).publish(message, "rag.query.submitted", "RAG_QUERIES")  # type: ignore[arg-type]
    assert ack is not None
    assert len(broker.calls) == 2
    assert {c["headers"][MSG_ID_HEADER] for c in broker.calls} == {message.event_id}


async def test_a_stream_without_a_leader_is_waited_for() -> None:
    """A cluster that lost the stream's leader answers "no response from stream" until it
    has elected another: the publish waits it out, with the same message id."""
    broker = FlakyBroker(failures=3, error=nats.js.errors.NoStreamResponseError)
    message = QuerySubmitted(request_id="r1", query="q")
    ack = await Bus(broker).publish(message, "rag.query.submitted", "RAG_QUERIES")  # type: ignore[arg-type]
    assert ack is not None
    assert len(broker.calls) == 4
    assert {c["headers"][MSG_ID_HEADER] for c in broker.calls} == {message.event_id}


async def test_a_step_event_waiting_out_an_election_is_dropped_once_its_request_ended() -> None:
    """The request's done went out while the step's event waited for a leader: the re-send
    asks first, finds the request finished, and the event never lands after the done."""
    from contracts.enums import Phase, PhaseStatus
    from contracts.events import PhaseData, PhaseEvent
    from infra.runtime.phase_events import send_while_live
    from infra.runtime.step_context import message_context

    broker = FlakyBroker(failures=1, error=nats.js.errors.NoStreamResponseError)
    live = {"r1": False}

    async def is_live(request_id: str) -> bool:
        return live[request_id]

    event = PhaseEvent(
        request_id="r1",
        data=PhaseData(phase=Phase.CRITIC, status=PhaseStatus.COMPLETED),
    )
    with message_context(is_live):
        await send_while_live(Bus(broker), event)  # type: ignore[arg-type]
        assert len(broker.calls) == 1  # the first try only: no re-send after the done
    # another message, whose request is still live: re-sent once the leader answers
    live["r1"], broker.calls = True, []
    with message_context(is_live):
        await send_while_live(Bus(broker), event)  # type: ignore[arg-type]
        assert len(broker.calls) == 2


async def test_the_error_surfaces_when_the_retry_budget_is_spent() -> None:
    broker = FlakyBroker(failures=100)
    with pytest.raises(nats.errors.TimeoutError):
        await Bus(broker, publish_retry_s=0.5).publish(  # type: ignore[arg-type]
            QuerySubmitted(request_id="r1", query="q"), "rag.query.submitted", "RAG_QUERIES"
        )
    assert len(broker.calls) == 2  # at 0 s and 0.2 s; the next, at 0.6 s, is past the budget


async def test_an_error_that_a_retry_cannot_fix_is_raised_at_once() -> None:
    broker = FlakyBroker(failures=1, error=nats.js.errors.BadRequestError)
    with pytest.raises(nats.js.errors.BadRequestError):
        await Bus(broker).publish(  # type: ignore[arg-type]
            QuerySubmitted(request_id="r1", query="q"), "rag.query.submitted", "RAG_QUERIES"
        )
    assert len(broker.calls) == 1


class ElectingJetStream:
    """A JetStream API that answers "unavailable" to its first calls, as a cluster does
    while it elects new leaders after losing a node."""

    def __init__(self, unavailable: int) -> None:
        self.unavailable = unavailable
        self.streams: list[str] = []
        self.consumers: list[str] = []

    def _answer(self) -> None:
        if self.unavailable > 0:
            self.unavailable -= 1
            raise nats.js.errors.ServiceUnavailableError

    async def add_stream(self, config: Any) -> None:
        self._answer()
        self.streams.append(config.name)

    async def add_consumer(self, stream: str, config: Any) -> None:
        self._answer()
        self.consumers.append(config.durable_name)

    async def object_store(self, bucket: str) -> object:
        """The files' object store (`declare_files_bucket`), there already."""
        self._answer()
        return object()


async def test_start_up_waits_for_a_cluster_that_is_electing_leaders() -> None:
    from infra.runtime.topology import all_consumers, declare_topology, stream_specs
    from infra.settings import Settings

    js = ElectingJetStream(unavailable=2)
    await declare_topology(js, Settings(), wait_s=5)  # type: ignore[arg-type]
    assert len(set(js.streams)) == len(stream_specs(Settings()))
    assert len(set(js.consumers)) == len(all_consumers())


async def test_start_up_gives_up_when_jetstream_stays_unavailable() -> None:
    from infra.runtime.topology import declare_topology
    from infra.settings import Settings

    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        await declare_topology(ElectingJetStream(unavailable=100), Settings(), wait_s=0.4)  # type: ignore[arg-type]
