"""Nothing after a done, on a real nats-server: a step's event that asks whether its request
is live goes out fenced by `Nats-Expected-Last-Subject-Sequence` (`infra.runtime.done_fence`),
so a done that lands between the read and the publish makes the stream refuse the event."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import nats.js.errors
import pytest
from faststream.nats import NatsBroker
from nats.js import JetStreamContext
from prometheus_client import REGISTRY

from api.event_stream import stored_events
from contracts import subjects as sj
from contracts.enums import Phase, PhaseStatus, RequestStatus
from contracts.envelope import utcnow
from contracts.events import DoneData, DoneEvent, PhaseData, PhaseEvent
from contracts.tenancy import DEFAULT_TENANT
from infra.runtime.bus import Bus, PublishAbandoned, create_broker
from infra.runtime.done_fence import MAX_FENCED_TRIES, DoneFence, SubjectTail, emit_unless_done
from infra.runtime.services import LocalService
from infra.runtime.topology import declare_streams
from infra.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
async def broker(own_nats: LocalService, tmp_path: Path) -> AsyncIterator[NatsBroker]:
    settings = Settings(nats_url=own_nats.url, start_services=False, data_dir=tmp_path / "d")
    broker = create_broker(settings)
    await broker.connect()
    await declare_streams(broker.connection.jetstream(), settings)
    yield broker
    await broker.stop()


@pytest.fixture
def js(broker: NatsBroker) -> JetStreamContext:
    return broker.connection.jetstream()


def _phase(request_id: str, phase: Phase = Phase.GENERATION) -> PhaseEvent:
    return PhaseEvent(
        request_id=request_id,
        data=PhaseData(
            phase=phase, status=PhaseStatus.COMPLETED, started_at=utcnow(), duration_ms=1.0
        ),
    )


def _done(request_id: str) -> DoneEvent:
    return DoneEvent(request_id=request_id, data=DoneData(status=RequestStatus.COMPLETED))


async def _types_on(js: JetStreamContext, request_id: str) -> list[str]:
    """The types of the messages stored on the request's subject, in order."""
    return [body["type"] for _, body in await stored_events(js, request_id)]


def _fenced(outcome: str) -> float:
    return REGISTRY.get_sample_value("ragbus_fenced_events_total", {"outcome": outcome}) or 0.0


async def _live() -> bool:
    return True


async def _finished() -> bool:
    return False


async def test_an_event_goes_out_fenced_while_no_done_is_there(
    broker: NatsBroker, js: JetStreamContext
) -> None:
    bus = Bus(broker)
    bus.fence = DoneFence(js)
    await emit_unless_done(bus, _phase("fence-1"), _finished)  # the fence, not Redis, decides
    await emit_unless_done(bus, _phase("fence-1", Phase.CRITIC), _finished)
    assert await _types_on(js, "fence-1") == ["phase", "phase"]


async def test_a_re_send_of_an_event_the_stream_took_is_stored_once(
    broker: NatsBroker, js: JetStreamContext
) -> None:
    # A publish whose ack was lost is sent again (`acked`): read afresh, the subject ends with
    # the event itself, and the dedupe drops the copy (nats-server 2.12 checks the expected
    # sequence before the dedupe: the first read's expectation would be refused).
    bus = Bus(broker)
    bus.fence = DoneFence(js)
    event = _phase("fence-6")
    await emit_unless_done(bus, event, _live)
    await emit_unless_done(bus, event, _live)
    assert await _types_on(js, "fence-6") == ["phase"]


async def test_an_event_after_the_done_is_dropped(broker: NatsBroker, js: JetStreamContext) -> None:
    bus = Bus(broker)
    bus.fence = DoneFence(js)
    await bus.emit(_phase("fence-2"))
    await bus.emit(_done("fence-2"))
    with pytest.raises(PublishAbandoned):
        await emit_unless_done(bus, _phase("fence-2", Phase.CRITIC), _live)
    assert await _types_on(js, "fence-2") == ["phase", "done"]


class _DoneInTheWindow(DoneFence):
    """The saga finishes the request between the fence's read and its publish: the race that
    a liveness check followed by a plain publish loses."""

    def __init__(self, js: JetStreamContext, bus: Bus, done: DoneEvent) -> None:
        super().__init__(js)
        self.bus, self.done, self.reads = bus, done, 0

    async def tail(self, stream: str, subject: str) -> SubjectTail:
        seen = await super().tail(stream, subject)
        self.reads += 1
        if self.reads == 1:
            await self.bus.emit(self.done)
        return seen


async def test_a_done_that_lands_between_the_read_and_the_publish_fences_the_event_out(
    broker: NatsBroker, js: JetStreamContext
) -> None:
    bus = Bus(broker)
    fence = _DoneInTheWindow(js, bus, _done("fence-3"))
    bus.fence = fence
    before = {o: _fenced(o) for o in ("refused", "dropped", "sent")}
    with pytest.raises(PublishAbandoned):
        await emit_unless_done(bus, _phase("fence-3"), _live)
    assert fence.reads == 2  # refused by the stream, read again, found the done
    assert {o: _fenced(o) - n for o, n in before.items()} == {"refused": 1, "dropped": 1, "sent": 0}
    assert await _types_on(js, "fence-3") == ["done"]


class _AlwaysOvertaken(DoneFence):
    """Another event of the request lands after every read."""

    def __init__(self, js: JetStreamContext, bus: Bus) -> None:
        super().__init__(js)
        self.bus, self.reads = bus, itertools.count(1)

    async def tail(self, stream: str, subject: str) -> SubjectTail:
        seen = await super().tail(stream, subject)
        next(self.reads)
        await self.bus.emit(_phase("fence-4", Phase.VECTOR_SEARCH))
        return seen


async def test_a_subject_too_busy_to_fence_falls_back_to_asking(
    broker: NatsBroker, js: JetStreamContext
) -> None:
    bus = Bus(broker)
    fence = _AlwaysOvertaken(js, bus)
    bus.fence = fence
    with pytest.raises(PublishAbandoned):
        await emit_unless_done(bus, _phase("fence-4"), _finished)
    assert next(fence.reads) == MAX_FENCED_TRIES + 1
    await emit_unless_done(bus, _phase("fence-4", Phase.CRITIC), _live)
    types = await _types_on(js, "fence-4")
    assert types == ["phase"] * (2 * MAX_FENCED_TRIES + 1)


async def test_without_a_fence_it_asks_whether_the_request_is_live(
    broker: NatsBroker, js: JetStreamContext
) -> None:
    bus = Bus(broker)
    with pytest.raises(PublishAbandoned):
        await emit_unless_done(bus, _phase("fence-5"), _finished)
    await emit_unless_done(bus, _phase("fence-5", Phase.CRITIC), _live)
    assert await _types_on(js, "fence-5") == ["phase"]


async def test_a_subject_with_nothing_on_it_reads_as_sequence_zero(js: JetStreamContext) -> None:
    """The stream takes an expected sequence of 0 on an empty subject: a request's first event
    may go out fenced."""
    tail = await DoneFence(js).tail(sj.STREAM_EVENTS, sj.events_subject(DEFAULT_TENANT, "none"))
    assert tail == SubjectTail(0, done=False)


async def test_a_clustered_streams_constant_refusal_reads_again(
    broker: NatsBroker, js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server 2.12 on a clustered stream refuses with 10164, "wrong last sequence", while
    another message for the subject is in flight through the replicas: read again and send,
    as for 10071. Taken for a failure, it had dead-lettered the step's command."""
    bus = Bus(broker)
    bus.fence = DoneFence(js)
    publish = broker.publish
    refusals = iter([nats.js.errors.BadRequestError(code=400, err_code=10164)])

    async def in_flight_once(*args: object, **kwargs: object) -> object:
        for refusal in refusals:
            raise refusal
        return await publish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(broker, "publish", in_flight_once)
    before = {o: _fenced(o) for o in ("refused", "sent")}
    await emit_unless_done(bus, _phase("fence-7"), _live)
    assert {o: _fenced(o) - n for o, n in before.items()} == {"refused": 1, "sent": 1}
    assert await _types_on(js, "fence-7") == ["phase"]
