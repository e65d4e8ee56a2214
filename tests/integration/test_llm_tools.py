"""The ReAct loop through the real bus: an LLM (the local fake OpenAI server) asks for the
calculator, the tool worker runs it, generation answers with the result — once."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from infra.runtime.services import free_port, start_nats, start_redis
from launcher.layout import WORKER_KINDS
from tests.fake_llm import fake_llm
from tests.integration.conftest import running, serving_api, stack_settings
from tests.integration.sse import read_events

pytestmark = pytest.mark.integration


async def test_llm_requests_the_calculator_through_the_bus(tmp_path: Path) -> None:
    nats_svc = start_nats(free_port(), tmp_path / "nats")
    redis_svc = start_redis(free_port(), tmp_path / "redis", persistent=False)
    try:
        with fake_llm() as llm:
            settings = stack_settings(
                nats_svc.url,
                redis_svc.url,
                tmp_path / "data",
                llm_base_url=llm.base_url,
                llm_model="calculator",
                llm_timeout_s=10.0,
            )
            async with (
                running(settings, orchestrator=True, workers=WORKER_KINDS) as runtime,
                serving_api(runtime) as url,
                httpx.AsyncClient(base_url=url, timeout=60) as http,
            ):
                response = await http.post(
                    "/v1/queries", json={"query": "what is 17*23+4", "intent": "factual"}
                )
                assert response.status_code == 202, response.text
                events = await read_events(http, response.json()["events_url"])

            kinds = [e.event for e in events]
            assert kinds.count("done") == 1 and kinds[-1] == "done"
            assert events[-1].data["data"]["status"] == "completed"
            phases = [
                (e.data["data"]["phase"], e.data["data"]["status"], e.data["data"]["metadata"])
                for e in events
                if e.event == "phase"
            ]
            tool_done = [m for p, s, m in phases if p == "tool_execution" and s == "completed"]
            assert tool_done and tool_done[0]["calls"] == ["calculator"]
            assert tool_done[0]["ok"] == 1
            generations = [m for p, s, m in phases if p == "generation" and s == "completed"]
            assert generations[0]["tool_calls"] == ["calculator"]  # the LLM, not the planner
            assert generations[-1]["generator"] == "llm"
            [answer] = [e.data["data"] for e in events if e.event == "answer"]
            assert "395" in answer["content"]
            assert answer["metadata"]["generator"] == "llm"
            assert answer["metadata"]["intent"] == "factual"
            [tool] = answer["metadata"]["tools"]
            assert (tool["name"], tool["ok"], tool["arguments"]) == (
                "calculator",
                True,
                {"expression": "17*23+4"},
            )
            replay = llm.calls_for("calculator")[-1]["messages"]
            assert replay[-1]["role"] == "tool" and "395" in replay[-1]["content"]
    finally:
        nats_svc.stop()
        redis_svc.stop()
