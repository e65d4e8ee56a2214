"""Each answer-side router driven end to end through FastStream's in-memory NATS broker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import JStream, NatsBroker, NatsRouter, TestNatsBroker

from contracts import subjects as sj
from contracts.commands import (
    ClassifyCommand,
    CriticCommand,
    FuseCommand,
    GenerateCommand,
    SearchCommand,
    ToolCommand,
)
from contracts.enums import Channel, Intent, Step, StepStatus
from contracts.envelope import Envelope
from contracts.events import caller_events
from contracts.models import RetrievedChunk, ToolCall, ToolOutcome
from contracts.results import (
    ClassifyResult,
    CriticResult,
    FuseResult,
    GenerateResult,
    StepFailure,
    ToolResult,
    any_result_adapter,
)
from engines.fuse.follow_up import KEEP
from infra.retrieval.vectors.codec import unpack_query
from infra.runtime.bus import Bus
from infra.runtime.resources import Resources
from infra.settings import Settings
from tests.unit.fakes import FakeEncoder, MemoryClaims
from workers import classify, critic, fuse, generate, tool


@dataclass
class Harness:
    broker: TestNatsBroker
    resources: Resources
    results: list[dict[str, Any]] = field(default_factory=list)
    dead: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, cmd: Envelope | dict[str, Any], subject: str) -> None:
        body = cmd.model_dump(mode="json") if isinstance(cmd, Envelope) else cmd
        await self.broker.publish(body, subject, stream=sj.STREAM_CMD)

    def tokens(self) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events if e["type"] == "token"]

    def phases(self) -> list[tuple[str, str]]:
        return [
            (e["data"]["phase"], e["data"]["status"]) for e in self.events if e["type"] == "phase"
        ]


RouterFactory = Callable[[Resources], NatsRouter]


@pytest.fixture
def harness_for(tmp_path: Path) -> Callable[[RouterFactory], AbstractAsyncContextManager[Harness]]:
    """`async with harness_for(create_router) as h:` — the router on an in-memory broker,
    with a fake encoder and collectors on the result, dead-letter and event subjects."""

    @asynccontextmanager
    async def build(create_router: RouterFactory) -> AsyncIterator[Harness]:
        broker = NatsBroker()
        resources = Resources(Settings(data_dir=tmp_path), Bus(broker))
        resources._encoder = FakeEncoder()  # type: ignore[assignment]
        resources._claims = MemoryClaims()

        async def every_request_is_live(request_id: str) -> bool:
            return True

        resources.is_live = every_request_is_live  # type: ignore[method-assign]
        broker.include_router(create_router(resources))
        harness = Harness(broker=None, resources=resources)  # type: ignore[arg-type]

        @broker.subscriber("rag.res.>", stream=JStream(sj.STREAM_RES, declare=False))
        async def on_result(body: dict[str, Any]) -> None:
            harness.results.append(body)

        @broker.subscriber("rag.dlq.>", stream=JStream(sj.STREAM_DLQ, declare=False))
        async def on_dead(body: dict[str, Any]) -> None:
            harness.dead.append(body)

        @broker.subscriber("rag.events.>", stream=JStream(sj.STREAM_EVENTS, declare=False))
        async def on_event(body: dict[str, Any]) -> None:
            harness.events.extend(caller_events(body))  # a `phases` message: its entries

        async with TestNatsBroker(broker) as test_broker:
            harness.broker = test_broker
            yield harness

    return build


CHUNKS = [
    RetrievedChunk(
        chunk_id="c1",
        document_id="d1",
        text="JetStream stores messages in streams on disk. Consumers acknowledge each message.",
    ),
    RetrievedChunk(
        chunk_id="c2",
        document_id="d2",
        text="Redis keeps the saga state of each request. Transitions are atomic Lua scripts.",
    ),
]


async def test_classify_publishes_intent_weights_and_vector(harness_for: Any) -> None:
    async with harness_for(classify.create_router) as h:
        cmd = ClassifyCommand(request_id="req-1", query="What is 17 * 23 + 4?")
        await h.send(cmd, sj.cmd_subject(Step.CLASSIFY))
        [body] = h.results
        result = ClassifyResult.model_validate(body)
        assert (result.intent, result.method, result.command_id) == (
            Intent.TOOL,
            "rules",
            cmd.event_id,
        )
        # the vector waits in the claim store; the result carries its claim check
        assert result.query_vector is not None and result.query_vector.startswith("claim:")
        found = await h.resources.claims().with_vector(
            SearchCommand(request_id="req-1", channel=Channel.VECTOR, query="q", top_k=5,
                          namespaces=["default"],
                          query_vector=result.query_vector)
        )  # fmt: skip
        assert len(unpack_query(found.query_vector)) == 256
        assert h.phases() == [
            ("intent_classification", "in_progress"),
            ("intent_classification", "completed"),
        ]
        completed = h.events[-1]["data"]
        assert completed["metadata"]["intent"] == "tool"
        assert completed["duration_ms"] >= 0


async def test_fuse_publishes_fused_chunks(harness_for: Any) -> None:
    async with harness_for(fuse.create_router) as h:
        cmd = FuseCommand(
            request_id="req-2",
            query="q",
            weights={Channel.VECTOR: 0.5, Channel.SPARSE: 0.5},
            results={Channel.VECTOR: CHUNKS, Channel.SPARSE: CHUNKS[::-1]},
            top_k=5,
        )
        await h.send(cmd, sj.cmd_subject(Step.FUSE))
        result = FuseResult.model_validate(h.results[0])
        assert {c.chunk_id for c in result.chunks} == {"c1", "c2"}
        assert result.effective_weights[Channel.VECTOR] == 0.5
        assert result.channel_counts[Channel.SPARSE] == 2
        assert h.events[-1]["data"]["metadata"]["counts"]["vector"] == 2


async def test_fuse_adds_a_decomposed_retrys_findings_to_the_carried_list(
    harness_for: Any,
) -> None:
    def ranked(*ids: str) -> list[RetrievedChunk]:
        return [RetrievedChunk(chunk_id=cid, document_id="d-" + cid, text=cid) for cid in ids]

    carried = ranked(*(f"c{i}" for i in range(1, 11)))
    async with harness_for(fuse.create_router) as h:
        cmd = FuseCommand(
            request_id="req-2b",
            attempt=2,
            query="who founded it",
            weights={Channel.VECTOR: 0.5, Channel.SPARSE: 0.5},
            results={Channel.VECTOR: ranked("n1", "c1"), Channel.SPARSE: ranked("n1")},
            sub_results=[{Channel.SPARSE: ranked("n2")}],
            carried=carried,
            top_k=8,
        )
        await h.send(cmd, sj.cmd_subject(Step.FUSE))
        result = FuseResult.model_validate(h.results[0])
        ids = [c.chunk_id for c in result.chunks]
        assert ids[:KEEP] == [c.chunk_id for c in carried[:KEEP]]
        assert ids[KEEP : KEEP + 2] == ["n1", "n2"]
        assert len(ids) == 8
        assert h.events[-1]["data"]["metadata"]["follow_up"] == 2


async def test_extractive_generate_publishes_a_cited_answer_unstreamed(harness_for: Any) -> None:
    async with harness_for(generate.create_router) as h:
        cmd = GenerateCommand(
            request_id="req-3",
            query="Where does JetStream store messages?",
            intent=Intent.FACTUAL,
            contexts=CHUNKS,
        )
        await h.send(cmd, sj.cmd_subject(Step.GENERATE))
        result = GenerateResult.model_validate(h.results[0])
        assert result.generator == "extractive"
        assert result.citations
        assert set(result.citations.values()) <= {"c1", "c2"}
        # only a model streams: the caller gets an extractive answer once, in `answer`
        assert h.tokens() == []


async def test_generate_judges_its_own_answer_when_asked(harness_for: Any) -> None:
    """With `critique_attempts_left` the worker runs the critic's judgement on its answer:
    the phase `critic` and its verdict come with the answer, as the critic step's would."""
    async with harness_for(generate.create_router) as h:
        cmd = GenerateCommand(
            request_id="req-3c",
            query="Where does JetStream store messages?",
            intent=Intent.FACTUAL,
            contexts=CHUNKS,
            critique_attempts_left=1,
        )
        await h.send(cmd, sj.cmd_subject(Step.GENERATE))
        result = GenerateResult.model_validate(h.results[0])
        assert result.critique is not None and result.critique.verdict == "accept"
        assert set(result.critique.scores) == {
            "grounding", "citation_validity", "coverage", "retrieval"
        }  # fmt: skip
        assert h.phases()[-3:] == [
            ("generation", "completed"),
            ("critic", "in_progress"),
            ("critic", "completed"),
        ]
        assert h.events[-1]["data"]["metadata"]["verdict"] == "accept"


async def test_an_answer_that_asks_for_tools_is_not_judged_yet() -> None:
    from workers.generate.self_critique import wants_critique

    asked = GenerateCommand(
        request_id="r", query="q", intent=Intent.TOOL, contexts=[], critique_attempts_left=1,
        tool_rounds_left=1,
    )  # fmt: skip
    call = ToolCall(id="1", name="calculator", arguments={"expression": "1+1"})
    assert not wants_critique(asked, [call])  # the saga runs the tools first
    assert wants_critique(asked, [])
    assert wants_critique(asked.model_copy(update={"tool_rounds_left": 0}), [call])
    assert not wants_critique(asked.model_copy(update={"critique_attempts_left": None}), [])


async def test_generate_answers_from_tool_outcomes(harness_for: Any) -> None:
    async with harness_for(generate.create_router) as h:
        cmd = GenerateCommand(
            request_id="req-4",
            query="What is 17 * 23 + 4?",
            intent=Intent.TOOL,
            contexts=[],
            tool_results=[
                ToolOutcome(call_id="1", name="calculator", ok=True, output="17 * 23 + 4 = 395")
            ],
        )
        await h.send(cmd, sj.cmd_subject(Step.GENERATE))
        result = GenerateResult.model_validate(h.results[0])
        assert result.answer == "17 * 23 + 4 = 395 (calculator)."
        assert result.citations == {}


async def test_critic_publishes_a_verdict(harness_for: Any) -> None:
    async with harness_for(critic.create_router) as h:
        cmd = CriticCommand(
            request_id="req-5",
            query="Where does JetStream store messages?",
            intent=Intent.FACTUAL,
            answer="JetStream stores messages in streams on disk [1].",
            citations={1: "c1"},
            contexts=CHUNKS,
            attempts_left=1,
        )
        await h.send(cmd, sj.cmd_subject(Step.CRITIC))
        result = CriticResult.model_validate(h.results[0])
        assert result.verdict == "accept"
        assert set(result.scores) == {"grounding", "citation_validity", "coverage", "retrieval"}
        assert h.events[-1]["data"]["metadata"]["verdict"] == "accept"


async def test_tool_plans_and_runs_the_calculator(harness_for: Any) -> None:
    async with harness_for(tool.create_router) as h:
        cmd = ToolCommand(request_id="req-6", query="what is 17 * 23 + 4?")
        await h.send(cmd, sj.cmd_subject(Step.TOOL))
        [outcome] = ToolResult.model_validate(h.results[0]).outcomes
        assert (outcome.ok, outcome.output) == (True, "17 * 23 + 4 = 395")

        unsafe = ToolCommand(
            request_id="req-7",
            query="x",
            calls=[
                ToolCall(id="c", name="calculator", arguments={"expression": "__import__('os')"})
            ],
        )
        await h.send(unsafe, sj.cmd_subject(Step.TOOL))
        [refused] = ToolResult.model_validate(h.results[1]).outcomes
        assert not refused.ok
        assert "not allowed" in (refused.error or "")
        assert h.dead == []


@pytest.mark.parametrize(
    ("module", "step"),
    [
        (classify, Step.CLASSIFY),
        (fuse, Step.FUSE),
        (generate, Step.GENERATE),
        (critic, Step.CRITIC),
        (tool, Step.TOOL),
    ],
)
async def test_a_malformed_command_is_dead_lettered(
    harness_for: Any, module: Any, step: Step
) -> None:
    subject = sj.cmd_subject(step)
    async with harness_for(module.create_router) as h:
        await h.send({"request_id": "req-bad", "event_id": "e-bad", "bogus": True}, subject)
        [letter] = h.dead
        assert letter["original_subject"] == subject
        assert letter["reason"] == "poison"
        assert letter["request_id"] == "req-bad"
        [raw] = h.results  # the orchestrator hears at once that the step failed
        failure = any_result_adapter.validate_python(raw)  # read as the orchestrator reads it
        assert isinstance(failure, StepFailure)
        assert (failure.status, failure.command_id) == (StepStatus.FAILED, "e-bad")


@pytest.mark.parametrize(("live", "dead_lettered"), [(True, True), (False, False)])
async def test_a_step_whose_claims_are_gone_is_dead_lettered_only_while_its_request_lives(
    harness_for: Any, live: bool, dead_lettered: bool
) -> None:
    # A command redelivered after its request's done finds its claims gone with the request:
    # nothing waits for it, so it is dropped (no page for the operator); while the request
    # lives, the same failure is a dead letter and the saga hears of it.
    async def request_is(request_id: str) -> bool:
        return live

    def create_router(resources: Resources) -> NatsRouter:
        resources.is_live = request_is  # type: ignore[method-assign]
        return generate.create_router(resources)

    async with harness_for(create_router) as h:
        cmd = GenerateCommand(
            request_id="req-gone",
            query="Where does JetStream store messages?",
            intent=Intent.FACTUAL,
            contexts_claim="contexts:00ff",
        )
        await h.send(cmd, sj.cmd_subject(Step.GENERATE))
        assert bool(h.dead) is dead_lettered
        assert bool(h.results) is dead_lettered
        if dead_lettered:
            assert h.dead[0]["reason"] == "poison"
            assert "no longer claimed" in h.dead[0]["error"]
