"""Messages for requests the API never recorded run nothing: a forged submission starts no
saga, and commands for an unknown request are dropped before their worker's model runs. No
result and no caller event is published under the unknown id; each drop is counted."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import nats
import pytest
from prometheus_client import REGISTRY

from contracts import subjects as sj
from contracts.commands import ClassifyCommand, SearchCommand
from contracts.enums import Channel, Step
from contracts.queries import QuerySubmitted
from launcher.runtime import Runtime

pytestmark = pytest.mark.integration


def _dropped(kind: str) -> float:
    return REGISTRY.get_sample_value("ragbus_unknown_requests_total", {"kind": kind}) or 0.0


async def test_forged_submissions_and_commands_run_nothing(
    stack: Runtime, http: httpx.AsyncClient
) -> None:
    forged = f"forged-{uuid.uuid4().hex[:12]}"
    before = {kind: _dropped(kind) for kind in ("submission", "command")}
    nc = await nats.connect(stack.settings.nats_url)
    seen: list[str] = []

    async def watch(msg: nats.aio.msg.Msg) -> None:
        if forged in msg.subject or forged.encode() in msg.data:
            seen.append(msg.subject)

    try:
        await nc.subscribe("rag.res.>", cb=watch)
        await nc.subscribe("rag.events.>", cb=watch)
        await nc.subscribe("rag.cmd.>", cb=watch)
        js = nc.jetstream()
        for message, subject, stream in (
            (
                QuerySubmitted(request_id=forged, query="What is the Pharos?"),
                sj.QUERY_SUBMITTED,
                sj.STREAM_QUERIES,
            ),
            (
                ClassifyCommand(request_id=forged, query="What is the Pharos?"),
                sj.cmd_subject(Step.CLASSIFY),
                sj.STREAM_CMD,
            ),
            (
                SearchCommand(
                    request_id=forged,
                    channel=Channel.SPARSE,
                    query="Pharos lighthouse",
                    namespaces=["default"],
                    top_k=5,
                ),
                sj.cmd_subject(Step.SEARCH, Channel.SPARSE),
                sj.STREAM_CMD,
            ),
        ):
            await js.publish(subject, message.model_dump_json().encode(), stream=stream)

        for _ in range(100):
            if _dropped("command") >= before["command"] + 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # time for anything that would wrongly follow
        await nc.flush()
    finally:
        await nc.close()

    assert _dropped("submission") == before["submission"] + 1
    assert _dropped("command") == before["command"] + 2
    assert [s for s in seen if not s.startswith("rag.cmd.")] == [], "no result, no event"
    assert len(seen) == 2, "only the two forged commands themselves were on rag.cmd"
    assert (await http.get(f"/v1/queries/{forged}")).status_code == 404

    # The stack still answers real questions.
    accepted = await http.post("/v1/queries", json={"query": "When was the Colossus built?"})
    assert accepted.status_code == 202
