"""With an LLM configured, a decomposing critic sends the model's follow-up queries (tests'
local OpenAI-compatible server); a failing or empty-handed model leaves the bridge ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contracts import subjects as sj
from contracts.commands import CriticCommand
from contracts.enums import Intent, Step
from contracts.models import RetrievedChunk
from contracts.results import CriticResult
from engines.critic.decompose import sub_queries
from engines.critic.llm_decompose import SYSTEM_PROMPT
from infra.settings import Settings
from tests.fake_llm import FakeLLM
from tests.unit.conftest import WorkerHarness, worker_harness
from tests.unit.fakes import FakeEncoder
from workers.critic import create_router

QUERY = (
    "Which public university in New Jersey did the author of Alexander and the Terrible Day "
    "graduate from?"
)
BOOK = RetrievedChunk(
    chunk_id="c-book",
    document_id="book",
    title="Alexander and the Terrible Day",
    text="Alexander and the Terrible Day is a book by the author Judith Viorst, illustrated "
    "by Ray Cruz.",
)
ILLUSTRATOR = RetrievedChunk(
    chunk_id="c-cruz", document_id="cruz", text="Ray Cruz illustrated the book in New York."
)
CONTEXTS = [BOOK, ILLUSTRATOR]


def _command() -> CriticCommand:
    return CriticCommand(
        request_id="req-plan",
        query=QUERY,
        intent=Intent.FACTUAL,
        answer=f"{BOOK.text[:-1]} [1].",
        citations={1: BOOK.chunk_id},
        contexts=CONTEXTS,
        attempts_left=1,
    )


async def _critique(h: WorkerHarness) -> tuple[CriticResult, dict[str, Any]]:
    await h.publish(_command(), sj.cmd_subject(Step.CRITIC), sj.STREAM_CMD)
    [body] = h.on("rag.res.")
    return CriticResult.model_validate(body), h.on("rag.events.")[-1]["data"]["metadata"]


def _settings(tmp_path: Path, server: FakeLLM | None, model: str = "planner") -> Settings:
    if server is None:
        return Settings(data_dir=tmp_path)
    return Settings(
        data_dir=tmp_path, llm_base_url=server.base_url, llm_model=model, llm_max_retries=0
    )


async def test_without_a_model_the_bridge_follow_ups_are_sent(tmp_path: Path) -> None:
    async with worker_harness(create_router, _settings(tmp_path, None), FakeEncoder()) as h:
        result, metadata = await _critique(h)
    assert (result.verdict, result.strategy) == ("retry", "decompose")
    assert result.sub_queries == sub_queries(QUERY, CONTEXTS)
    assert {q.split(" public")[0] for q in result.sub_queries} == {"Judith Viorst", "Ray Cruz"}
    assert metadata["planner"] == "bridges" and metadata["sub_queries"] == result.sub_queries


async def test_the_models_follow_ups_replace_the_bridge_ones(
    tmp_path: Path, server: FakeLLM
) -> None:
    before = len(server.calls_for("planner"))
    async with worker_harness(create_router, _settings(tmp_path, server), FakeEncoder()) as h:
        result, metadata = await _critique(h)
    [call] = server.calls_for("planner")[before:]
    assert call["messages"][0]["content"] == SYSTEM_PROMPT
    assert "[1] Alexander and the Terrible Day: " in call["messages"][1]["content"]
    assert result.strategy == "decompose"
    assert result.sub_queries == ["Judith Viorst from", "Ray Cruz from"]
    assert metadata["planner"] == "llm" and "plan_error" not in metadata


async def test_a_failing_or_empty_handed_model_leaves_the_bridge_follow_ups(
    tmp_path: Path, server: FakeLLM
) -> None:
    for model, error in (("fail500", "InternalServerError"), ("empty", "PlanUnusable")):
        settings = _settings(tmp_path, server, model)
        async with worker_harness(create_router, settings, FakeEncoder()) as h:
            result, metadata = await _critique(h)
        assert result.sub_queries == sub_queries(QUERY, CONTEXTS)
        assert metadata["planner"] == "bridges"
        assert error in metadata["plan_error"]
