"""Hypothesis-made messages on every work subject of a real `ragbus up`: every message that its
contract refuses is dead-lettered with a reason, no valid one is, and the consumers keep
serving (a real question still completes afterwards).

The messages are mutations of one valid message per contract (a field dropped, a field given
any JSON value, an unknown field, a string far over its bound), arbitrary JSON, and bytes that
are not JSON. What is expected of each is decided by the contract itself, validated the way
the consumer validates it; each message carries a `Fuzz-Id` header, which its dead letter keeps.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
import nats
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from nats.js.api import DeliverPolicy
from pydantic import TypeAdapter, ValidationError

from contracts import subjects as sj
from contracts.commands import (
    ClassifyCommand,
    CriticCommand,
    FuseCommand,
    GenerateCommand,
    SearchCommand,
    ToolCommand,
)
from contracts.enums import Channel, Intent, Step
from contracts.ingest import IngestJobSealed, ingest_message_adapter
from contracts.models import RetrievedChunk
from contracts.queries import QuerySubmitted
from contracts.results import ClassifyResult, any_result_adapter
from tests.fuzz.conftest import FUZZ_TOKEN, SCALE, UpStack

pytestmark = pytest.mark.integration

PER_SUBJECT = 30 * SCALE
SETTLE_S = 60.0

CHUNK = RetrievedChunk(chunk_id="c1", document_id="d1", text="The Pharos stood at Alexandria.")
RID = "fuzz-request"


def _valid(channel: Channel = Channel.SPARSE) -> dict[str, Any]:
    """One valid message per subject (for requests that do not exist)."""
    search = SearchCommand(
        request_id=RID, channel=channel, query="pharos", namespaces=["default"], top_k=5
    )
    messages: dict[str, Any] = {
        sj.QUERY_SUBMITTED: QuerySubmitted(request_id=RID, query="What was the Pharos?"),
        sj.cmd_subject(Step.CLASSIFY): ClassifyCommand(request_id=RID, query="pharos"),
        sj.cmd_subject(Step.SEARCH, channel): search,
        sj.cmd_subject(Step.FUSE): FuseCommand(
            request_id=RID,
            query="pharos",
            weights={channel: 1.0},
            results={channel: [CHUNK]},
            top_k=5,
        ),
        sj.cmd_subject(Step.GENERATE): GenerateCommand(
            request_id=RID, query="pharos", intent=Intent.FACTUAL, contexts=[CHUNK]
        ),
        sj.cmd_subject(Step.CRITIC): CriticCommand(
            request_id=RID,
            query="pharos",
            intent=Intent.FACTUAL,
            answer="It stood at Alexandria [1].",
            citations={1: "c1"},
            contexts=[CHUNK],
            attempts_left=0,
        ),
        sj.cmd_subject(Step.TOOL): ToolCommand(request_id=RID, query="2 + 2"),
        sj.res_subject(Step.CLASSIFY): ClassifyResult(
            request_id=RID,
            command_id="x",
            intent=Intent.FACTUAL,
            confidence=0.5,
            method="rules",
            weights={channel: 1.0},
        ),
        sj.ingest_docs_subject("fuzz-job"): IngestJobSealed(request_id="fuzz-job", expected=0),
    }
    return {subject: m.model_dump(mode="json") for subject, m in messages.items()}


VALID = _valid()

ADAPTERS: dict[str, TypeAdapter[Any]] = {
    sj.QUERY_SUBMITTED: TypeAdapter(QuerySubmitted),
    sj.cmd_subject(Step.CLASSIFY): TypeAdapter(ClassifyCommand),
    sj.cmd_subject(Step.SEARCH, Channel.SPARSE): TypeAdapter(SearchCommand),
    sj.cmd_subject(Step.FUSE): TypeAdapter(FuseCommand),
    sj.cmd_subject(Step.GENERATE): TypeAdapter(GenerateCommand),
    sj.cmd_subject(Step.CRITIC): TypeAdapter(CriticCommand),
    sj.cmd_subject(Step.TOOL): TypeAdapter(ToolCommand),
    sj.res_subject(Step.CLASSIFY): any_result_adapter,
    sj.ingest_docs_subject("fuzz-job"): ingest_message_adapter,
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mutations(base: dict[str, Any]) -> st.SearchStrategy[bytes]:
    keys = sorted(base)
    dropped = st.sampled_from(keys).map(lambda k: {f: v for f, v in base.items() if f != k})
    replaced = st.tuples(st.sampled_from(keys), json_values).map(lambda kv: {**base, kv[0]: kv[1]})
    unknown = (
        st.text(min_size=1, max_size=8)
        .filter(lambda k: k not in base)
        .map(lambda k: {**base, k: 1})
    )
    oversized = st.sampled_from([k for k in keys if isinstance(base[k], str)]).map(
        lambda k: {**base, k: "x" * 70_000}
    )
    as_json = (st.just(base) | dropped | replaced | unknown | oversized | json_values).map(
        lambda value: json.dumps(value).encode()
    )
    return as_json | st.binary(max_size=64)


def _refused(subject: str, body: bytes) -> bool:
    """Whether the consumer of `subject` refuses `body` (decoded as FastStream decodes it)."""
    try:
        value = json.loads(body)
    except ValueError:
        return True
    try:
        message = ADAPTERS[subject].validate_python(value)
    except ValidationError:
        return True
    return (
        subject.startswith(f"{sj.CMD_PREFIX}.search.")
        and message.channel.value != subject.rsplit(".", 1)[1]
    )


async def _dead_letters(nats_url: str) -> dict[str, dict[str, Any]]:
    """Every letter in RAG_DLQ that carries a Fuzz-Id, by it."""
    nc = await nats.connect(nats_url)
    found: dict[str, dict[str, Any]] = {}
    try:
        sub = await nc.jetstream().subscribe(
            "rag.dlq.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except nats.errors.TimeoutError:
                return found
            letter = json.loads(msg.data)
            fuzz_id = letter.get("headers", {}).get("Fuzz-Id")
            if fuzz_id:
                found[fuzz_id] = letter
    finally:
        await nc.close()


async def _publish_and_check(up_stack: UpStack, batch: list[tuple[str, bytes]]) -> None:
    nc = await nats.connect(up_stack.nats_url)
    expected: set[str] = set()
    try:
        js = nc.jetstream()
        for n, (subject, body) in enumerate(batch):
            fuzz_id = str(n)
            headers = {"Nats-Msg-Id": uuid.uuid4().hex, "Fuzz-Id": fuzz_id}
            await js.publish(subject, body, headers=headers)
            if _refused(subject, body):
                expected.add(fuzz_id)
    finally:
        await nc.close()

    deadline = time.monotonic() + SETTLE_S
    letters: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        letters = await _dead_letters(up_stack.nats_url)
        if expected <= set(letters):
            break
        await asyncio.sleep(1.0)
    await asyncio.sleep(2.0)  # and nothing more arrives for the valid ones
    letters = await _dead_letters(up_stack.nats_url)

    assert expected, "the batch holds refused messages"
    missing = sorted(expected - set(letters), key=int)
    wrongly = sorted(set(letters) - expected, key=int)
    assert not missing, [batch[int(i)] for i in missing[:3]]
    assert not wrongly, [(batch[int(i)], letters[i]["error"]) for i in wrongly[:3]]
    assert all(letters[i]["reason"] and letters[i]["error"] for i in expected)

    async with httpx.AsyncClient(
        base_url=up_stack.url, headers={"Authorization": f"Bearer {FUZZ_TOKEN}"}, timeout=60
    ) as http:
        accepted = await http.post("/v1/queries", json={"query": "What was the Pharos?"})
        assert accepted.status_code == 202
        request_id = accepted.json()["request_id"]
        for _ in range(600):
            state = (await http.get(f"/v1/queries/{request_id}")).json()
            if state["status"] in ("completed", "failed", "timed_out"):
                break
            await asyncio.sleep(0.1)
        assert state["status"] == "completed", state
    assert up_stack.process.poll() is None, "the stack's process is alive"


def _draw_batch() -> list[tuple[str, bytes]]:
    """`PER_SUBJECT` messages a subject on average, drawn by Hypothesis (the same ones on every
    run): one batch for one live stack, so no shrinking."""
    drawn: list[tuple[str, bytes]] = []
    messages = st.sampled_from(sorted(VALID)).flatmap(
        lambda subject: _mutations(VALID[subject]).map(lambda body: (subject, body))
    )

    @given(message=messages)
    @settings(
        max_examples=PER_SUBJECT * len(VALID),
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def draw(message: tuple[str, bytes]) -> None:
        drawn.append(message)

    draw()
    return drawn


def test_every_refused_message_is_dead_lettered_and_the_consumers_keep_serving(
    up_stack: UpStack,
) -> None:
    asyncio.run(_publish_and_check(up_stack, _draw_batch()))
