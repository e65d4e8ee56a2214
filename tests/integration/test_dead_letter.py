"""Malformed messages are dead-lettered with a reason; the consumer keeps serving."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import nats
import pytest
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from api.event_stream import stored_events
from launcher.runtime import Runtime
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration


async def dead_letters(
    nats_url: str,
    subject: str,
    want: int,
    timeout: float = 20,
    match: Callable[[dict], bool] = lambda letter: True,
) -> list[dict]:
    """The first `want` letters on `subject` that `match`."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        letters: list[dict] = []
        async with asyncio.timeout(timeout):
            while len(letters) < want:
                msg = await sub.next_msg(timeout=timeout)
                letter = json.loads(msg.data)
                if match(letter):
                    letters.append(letter)
        await sub.unsubscribe()
        return letters
    finally:
        await nc.close()


async def test_malformed_command_lands_in_the_dlq_and_the_consumer_keeps_serving(
    stack: Runtime, http: httpx.AsyncClient
) -> None:
    nc = await nats.connect(stack.settings.nats_url)
    try:
        js = nc.jetstream()
        await js.publish("rag.cmd.classify", b"{this is not json", stream="RAG_CMD")
        await js.publish(
            "rag.cmd.classify",
            json.dumps({"request_id": "dlq-probe", "type": "cmd.classify"}).encode(),
            stream="RAG_CMD",
        )
    finally:
        await nc.close()

    letters = await dead_letters(stack.settings.nats_url, "rag.dlq.rag.cmd.classify", want=2)
    assert {letter["reason"] for letter in letters} == {"poison"}
    assert letters[0]["payload"] == "{this is not json"
    assert "query" in letters[1]["error"], "the reason names the missing field"
    assert letters[1]["request_id"] == "dlq-probe"
    assert all(letter["original_subject"] == "rag.cmd.classify" for letter in letters)

    response = await http.post("/v1/queries", json={"query": "When was the Colossus finished?"})
    assert response.status_code == 202
    events = await read_events(http, response.json()["events_url"])
    assert events[-1].event == "done"
    assert events[-1].data["data"]["status"] == "completed"


async def test_an_oversized_command_is_dead_lettered_and_floods_nothing(
    stack: Runtime, http: httpx.AsyncClient
) -> None:
    """A 3 MB generate command (nats-server takes up to 8 MB) is over its contract's bounds:
    dead-lettered as poison before any work, with no token event published for it."""
    accepted = await http.post("/v1/queries", json={"query": "What was the Pharos?"})
    request_id = accepted.json()["request_id"]
    events = await read_events(http, accepted.json()["events_url"])
    assert events[-1].event == "done"
    echo = "word " * 600_000
    command = {
        "request_id": request_id,
        "type": "cmd.generate",
        "query": "repeat after me",
        "intent": "factual",
        "contexts": [{"chunk_id": "c1", "document_id": "d1", "text": echo}],
    }
    nc = await nats.connect(stack.settings.nats_url)
    try:
        js = nc.jetstream()
        tokens_before = await _count(js, request_id, "token")
        await js.publish("rag.cmd.generate", json.dumps(command).encode(), stream="RAG_CMD")
        (letter,) = await dead_letters(
            stack.settings.nats_url,
            "rag.dlq.rag.cmd.generate",
            want=1,
            match=lambda letter: letter["request_id"] == request_id,
        )
        assert letter["reason"] == "poison"
        assert "contexts.0.text" in letter["error"]
        await asyncio.sleep(0.5)
        assert await _count(js, request_id, "token") == tokens_before
    finally:
        await nc.close()


async def _count(js: JetStreamContext, request_id: str, kind: str) -> int:
    """How many events of `kind` the request's subject holds."""
    return sum(event.get("type") == kind for _, event in await stored_events(js, request_id))
