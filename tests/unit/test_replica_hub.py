"""The store owner's choice of a search replica (`infra.runtime.replica_hub`): only one whose
copy holds every write, only while it runs no more than the owner, and the owner answers
whenever the replica does not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts import subjects as sj
from contracts.commands import SearchCommand
from contracts.enums import Channel
from contracts.replicas import ReplicaAnswer, ReplicaSeen, ReplicaTask, StoresVersion
from infra.runtime.replica_hub import HANDOFFS, SEEN_FOR_S, ReplicaHub, ServedCopy
from infra.settings import Settings
from launcher.layout import replicas_wanted

V1 = StoresVersion(owner="a", vectors=3, graph=2)
V2 = StoresVersion(owner="a", vectors=4, graph=2)


class Reply:
    def __init__(self, data: bytes) -> None:
        self.data = data


class FakeNats:
    """Answers each request with what `answer` says, and records what was asked."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[str, bytes]] = []

    async def request(self, subject: str, data: bytes, timeout: float) -> Reply:
        self.asked.append((subject, data))
        if isinstance(self.answer, BaseException):
            raise self.answer
        if isinstance(self.answer, bytes):
            return Reply(self.answer)
        return Reply(self.answer.model_dump_json().encode())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def hub(answer: Any = None, version: StoresVersion = V1) -> tuple[ReplicaHub, Any, Clock]:
    nats, clock = FakeNats(answer or ReplicaAnswer(status="done")), Clock()
    current = {"version": version}
    made = ReplicaHub(nats, lambda: current["version"], clock=clock)  # type: ignore[arg-type]
    return made, (nats, current), clock


def command() -> SearchCommand:
    return SearchCommand(
        request_id="r1",
        tenant="default",
        channel=Channel.VECTOR,
        query="why",
        top_k=5,
        namespaces=["default"],
    )


def handed(outcome: str) -> float:
    return HANDOFFS.labels(outcome=outcome)._value.get()  # type: ignore[no-any-return]


def test_only_a_replica_whose_copy_holds_every_write_is_fresh() -> None:
    made, (_, current), clock = hub()
    assert made.pick() is None, "no replica yet"
    made.seen(ReplicaSeen(replica="r0", version=V1))
    made.seen(ReplicaSeen(replica="r1", version=None, note="no room"))
    assert [r.name for r in made.fresh()] == ["r0"]
    current["version"] = V2  # a write: r0's copy is behind now
    assert made.fresh() == []
    made.seen(ReplicaSeen(replica="r0", version=V2))
    assert [r.name for r in made.fresh()] == ["r0"]
    clock.now += SEEN_FOR_S + 0.1  # not heard from: taken for gone
    assert made.fresh() == []


def test_a_replica_takes_no_more_commands_than_the_owner_answers_itself() -> None:
    made, _, _ = hub()
    made.seen(ReplicaSeen(replica="r0", version=V1))
    made.seen(ReplicaSeen(replica="r1", version=V1))
    made.replicas["r0"].running = 1
    assert made.pick() is made.replicas["r1"], "the one with fewer in hand"
    made.replicas["r1"].running = 1
    assert made.pick() is None, "both hold more than the owner runs (none)"
    with made.answering_here():
        assert made.running_here == 1
        assert made.pick() is not None
    assert made.running_here == 0


async def test_a_command_handed_off_carries_the_version_its_copy_must_hold() -> None:
    made, (nats, _), _ = hub()
    made.seen(ReplicaSeen(replica="r0", version=V1))
    before = handed("done")
    assert await made.hand_off(command(), Channel.VECTOR, deliveries=2)
    assert handed("done") == before + 1
    [(subject, body)] = nats.asked
    assert subject == sj.search_replica_subject("r0")
    task = ReplicaTask.model_validate_json(body)
    assert task.version == V1 and task.deliveries == 2 and task.command.request_id == "r1"
    assert made.replicas["r0"].running == 0, "counted while in hand only"


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (ReplicaAnswer(status="stale"), "stale"),
        (ReplicaAnswer(status="failed", error="boom"), "failed"),
        (TimeoutError(), "timeout"),
        (ConnectionError("no responders"), "unreachable"),
        (b"{not json", "failed"),
    ],
)
async def test_the_owner_answers_whenever_the_replica_does_not(answer: Any, outcome: str) -> None:
    made, _, _ = hub(answer)
    made.seen(ReplicaSeen(replica="r0", version=V1))
    before = handed(outcome)
    assert not await made.hand_off(command(), Channel.VECTOR)
    assert handed(outcome) == before + 1
    if outcome in {"stale", "timeout", "unreachable"}:  # not again until it says its copy
        assert made.fresh() == []


async def test_no_replica_no_request() -> None:
    made, (nats, _), _ = hub()
    assert not await made.hand_off(command(), Channel.VECTOR)
    assert nats.asked == []


async def test_a_malformed_announcement_is_ignored() -> None:
    made, _, _ = hub()

    class Msg:
        data = b'{"replica": "R0.*", "version": null}'

    await made._seen(Msg())  # type: ignore[arg-type]
    assert made.replicas == {}


def test_a_copy_holds_the_writes_of_its_owner_up_to_its_own() -> None:
    served = ServedCopy()
    assert not served.holds(V1)
    served.serve(V2)
    assert served.holds(V1) and served.holds(V2)
    assert not served.holds(StoresVersion(owner="a", vectors=4, graph=3))
    assert not served.holds(StoresVersion(owner="b", vectors=0, graph=0)), "another owner's"


async def test_an_old_copy_is_drained_of_the_commands_begun_on_it() -> None:
    served = ServedCopy()
    served.serve(V1)
    entered, leave = asyncio.Event(), asyncio.Event()

    async def command_on_the_old_copy() -> None:
        with served.answering():
            entered.set()
            await leave.wait()

    task = asyncio.create_task(command_on_the_old_copy())
    await entered.wait()
    old = served.serve(V2)
    assert old == 1 and served.busy == 1
    with served.answering():  # a command on the new copy does not hold the old one
        assert not await served.drained(old, 0.05)
        leave.set()
        assert await served.drained(old, 2.0)
    await task
    assert served.busy == 0


def test_only_an_owner_of_embedded_stores_that_searches_them_starts_replicas() -> None:
    settings = Settings(search_replicas=2, qdrant_url="", neo4j_uri="")
    assert replicas_wanted(settings, ["search", "ingest", "fuse"]) == 2
    assert replicas_wanted(settings, ["search", "fuse"]) == 0
    assert replicas_wanted(settings, ["ingest"]) == 0
    served = Settings(search_replicas=2, qdrant_url="http://q:6333", neo4j_uri="")
    assert replicas_wanted(served, ["search", "ingest"]) == 0
    assert replicas_wanted(Settings(qdrant_url="", neo4j_uri=""), ["search", "ingest"]) == 0


def test_a_replica_subject_takes_no_wildcard() -> None:
    assert sj.search_replica_subject("r0") == "rag.ctl.search.replica.r0"
    for bad in ("*", ">", "r0.x", ""):
        with pytest.raises(ValueError, match="invalid id"):
            sj.search_replica_subject(bad)
