"""An MCP server's tools through the real bus: the reference `server-everything` from npm,
started by the tool worker in its sandbox, its tools offered to a model (the local fake OpenAI
server) in the ReAct loop and called as one `rag.cmd.tool` step each; a question matching the
operator's route sent to its tool with no model asked; `GET /v1/tools` showing them; a
server that goes away costing its tools only."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.runtime.services import free_port, start_nats, start_redis
from launcher.layout import WORKER_KINDS
from tests.fake_llm import FakeLLM, fake_llm
from tests.integration.conftest import running, serving_api, stack_settings
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / "tools" / "mcp" / "node_modules" / ".bin" / "mcp-server-everything"
ROUTES = [{"pattern": r"^echo\s+(?P<message>.+)$", "tool": "echo"}]

if not EVERYTHING.exists():
    pytest.skip(
        "the reference MCP servers are not installed: make mcp-peers", allow_module_level=True
    )
if shutil.which("bwrap") is None:
    pytest.skip("the sandbox needs bubblewrap (make setup installs it)", allow_module_level=True)


@dataclass
class Stack:
    http: httpx.AsyncClient
    llm: FakeLLM


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("mcp-bus")
    nats_svc = start_nats(free_port(), root / "nats")
    redis_svc = start_redis(free_port(), root / "redis", persistent=False)
    servers = {"everything": {"command": str(EVERYTHING), "args": ["stdio"], "routes": ROUTES}}
    try:
        with fake_llm() as llm:
            settings = stack_settings(
                nats_svc.url,
                redis_svc.url,
                root / "data",
                llm_base_url=llm.base_url,
                llm_model="echo",
                llm_timeout_s=10.0,
                mcp_servers=json.dumps({"mcpServers": servers}),
            )
            async with (
                running(settings, orchestrator=True, workers=WORKER_KINDS) as runtime,
                serving_api(runtime) as url,
                httpx.AsyncClient(base_url=url, timeout=60) as http,
            ):
                yield Stack(http, llm)
    finally:
        redis_svc.stop()
        nats_svc.stop()


async def ask(http: httpx.AsyncClient, query: str, **fields: Any) -> list[Any]:
    response = await http.post("/v1/queries", json={"query": query, **fields})
    assert response.status_code == 202, response.text
    events = await read_events(http, response.json()["events_url"])
    kinds = [e.event for e in events]
    assert kinds.count("done") == 1 and kinds[-1] == "done", kinds
    return events


def completed(events: list[Any], phase: str) -> list[dict[str, Any]]:
    return [
        e.data["data"]["metadata"]
        for e in events
        if e.event == "phase"
        and e.data["data"]["phase"] == phase
        and e.data["data"]["status"] == "completed"
    ]


def answer_of(events: list[Any]) -> str:
    [answer] = [e.data["data"]["content"] for e in events if e.event == "answer"]
    return str(answer)


async def test_the_servers_tools_are_listed_under_its_prefix(stack: Stack) -> None:
    listed = (await stack.http.get("/v1/tools")).json()["tools"]
    by_name = {tool["name"]: tool for tool in listed}
    assert by_name["calculator"]["server"] is None
    echo = by_name["everything__echo"]
    assert echo["server"] == "everything"
    assert echo["parameters"]["required"] == ["message"]  # the server's own schema


async def test_the_model_is_offered_the_tools_and_calls_one_as_a_tool_step(stack: Stack) -> None:
    events = await ask(stack.http, "What does the reference server repeat?", intent="factual")
    assert events[-1].data["data"]["status"] == "completed"
    offered = [FakeLLM.offered(body) for body in stack.llm.requests if body.get("tools")]
    assert offered and {"everything__echo", "calculator"} <= set(offered[-1])
    [tool_step] = completed(events, "tool_execution")
    assert tool_step["calls"] == ["everything__echo"] and tool_step["ok"] == 1
    generations = completed(events, "generation")
    assert generations[0]["tool_calls"] == ["everything__echo"]  # the model asked, not a rule
    assert "What does the reference server repeat?" in answer_of(events)


async def test_a_question_matching_a_route_goes_to_its_tool_with_no_model(stack: Stack) -> None:
    before = len(stack.llm.requests)
    events = await ask(stack.http, "echo the bus carries it")
    [classified] = completed(events, "intent_classification")
    assert classified["tool_route"] == "everything__echo"
    [tool_step] = completed(events, "tool_execution")
    assert tool_step["calls"] == ["everything__echo"] and tool_step["ok"] == 1
    assert "the bus carries it" in answer_of(events)
    # the model wrote the answer from the outcome; it chose no tool
    assert all(not body.get("tool_choice") for body in stack.llm.requests[before:])


async def test_through_the_openai_door_a_models_tokens_stream_as_they_come(stack: Stack) -> None:
    """One request with its tool round behind `/v1/chat/completions`: the model's answer
    arrives as content deltas, the completion's id is the request's."""
    body = {
        "model": "ragbus",
        "stream": True,
        "messages": [{"role": "user", "content": "What does the reference server repeat?"}],
    }
    deltas: list[str] = []
    ids: set[str] = set()
    async with stack.http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            assert "error" not in chunk, chunk
            ids.add(chunk["id"])
            deltas.extend(
                choice["delta"]["content"]
                for choice in chunk["choices"]
                if choice["delta"].get("content")
            )
    assert len(deltas) >= 2  # the first token event at once, then the rest: not one answer
    assert "".join(deltas).startswith("The tool says: ")
    [request_id] = ids
    view = (await stack.http.get(f"/v1/queries/{request_id}")).json()
    assert view["status"] == "completed"
    assert view["answer"]["metadata"]["generator"] == "llm"
