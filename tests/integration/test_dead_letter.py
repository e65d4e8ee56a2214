"""Malformed messages are dead-lettered with a reason; the consumer keeps serving."""

from __future__ import annotations

import asyncio
import json

import httpx
import nats
import pytest
from nats.js.api import DeliverPolicy

from api.launcher import Runtime
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration


async def dead_letters(nats_url: str, subject: str, want: int, timeout: float = 20) -> list[dict]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        letters: list[dict] = []
        async with asyncio.timeout(timeout):
            while len(letters) < want:
                msg = await sub.next_msg(timeout=timeout)
                letters.append(json.loads(msg.data))
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
