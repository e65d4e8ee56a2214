"""LLM generation against a local OpenAI-compatible server (tests/fake_llm.py), through the
generate worker on FastStream's in-memory broker: streaming, citations, tools, fallbacks."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import subjects as sj
from contracts.commands import GenerateCommand
from contracts.enums import Intent, Step
from contracts.models import ToolOutcome
from contracts.results import GenerateResult
from engines.generate.llm import CitationFilter, build_messages, check_citations, tool_turns
from infra.llm import LLMClient
from tests.fake_llm import FakeLLM
from tests.unit.test_answer_workers_broker import (
    CHUNKS,
    harness_for,  # noqa: F401  (fixture)
)
from workers import generate


def command(**overrides: Any) -> GenerateCommand:
    values: dict[str, Any] = {
        "request_id": "req-llm",
        "query": "Where does JetStream store messages?",
        "intent": Intent.FACTUAL,
        "contexts": CHUNKS,
    }
    values.update(overrides)
    return GenerateCommand(**values)


async def generate_with(harness_for: Any, client: LLMClient, cmd: GenerateCommand) -> Any:  # noqa: F811
    async with harness_for(lambda r: generate.create_router(r, llm=client)) as h:
        await h.send(cmd, sj.cmd_subject(Step.GENERATE))
        [body] = h.results
        completed = [
            e["data"]
            for e in h.events
            if e["type"] == "phase" and e["data"]["status"] != "in_progress"
        ]
        return GenerateResult.model_validate(body), h.tokens(), completed[-1]["metadata"], h


# ---------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("pieces", "valid", "text", "cited", "dropped"),
    [
        (["A [1]. B [", "9]."], 2, "A [1]. B.", {1}, [9]),
        (["A [1, ", "9, 2]."], 2, "A [1, 2].", {1, 2}, [9]),
        (["Array[i] and [note] stay", "."], 2, "Array[i] and [note] stay.", set(), []),
        (["No contexts [1]."], 0, "No contexts.", set(), [1]),
        (["Unclosed [1"], 3, "Unclosed [1", set(), []),
    ],
)
def test_citation_filter_streams_and_drops_unknown_numbers(
    pieces: list[str], valid: int, text: str, cited: set[int], dropped: list[int]
) -> None:
    checker = CitationFilter(valid)
    out = "".join(checker.feed(piece) for piece in pieces) + checker.flush()
    assert (out, checker.cited, checker.dropped) == (text, cited, dropped)
    assert check_citations("".join(pieces), valid)[0] == text


def test_prompt_numbers_the_contexts_and_replays_tool_turns() -> None:
    outcomes = [
        ToolOutcome(
            call_id="call_1",
            name="calculator",
            ok=True,
            arguments={"expression": "17*23+4"},
            output="17*23+4 = 395",
        ),
        ToolOutcome(call_id="failed", name="tool", ok=False, error="boom"),
        ToolOutcome(call_id="failed", name="tool", ok=False, error="again"),
    ]
    messages = build_messages(command(tool_results=outcomes))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert "[1] JetStream stores" in messages[1]["content"]
    assert "[2] Redis keeps" in messages[1]["content"]
    assistant = messages[2]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert ids == ["call_1", "failed", "failed-2"]
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"expression": "17*23+4"}'
    assert [m["tool_call_id"] for m in messages[3:]] == ids
    assert messages[4]["content"] == "ERROR: boom"
    assert tool_turns([]) == []


def test_a_decomposed_attempts_follow_ups_are_in_the_prompt_before_the_question() -> None:
    plain = build_messages(command())[1]["content"]
    assert "Also searched" not in plain
    follow_ups = ["JetStream consumer acknowledgement", "Redis Lua scripts"]
    prompt = build_messages(command(follow_ups=follow_ups))[1]["content"]
    assert "- JetStream consumer acknowledgement\n- Redis Lua scripts" in prompt
    assert prompt.index("Also searched") < prompt.index("Question:")
    assert prompt.rsplit("Question:", 1)[1].strip() == command().query


# ---------------------------------------------------------------- through the worker


async def test_llm_answer_streams_and_bogus_citations_are_removed_and_reported(
    harness_for: Any,  # noqa: F811
    client_for: Any,
    server: FakeLLM,
) -> None:
    result, tokens, metadata, _ = await generate_with(harness_for, client_for("cite"), command())
    assert result.generator == "llm"
    assert (
        result.answer
        == "JetStream stores messages in streams on disk [1]. It was invented on Mars."
    )
    assert result.citations == {1: "c1"}
    assert "".join(t["text"] for t in tokens) == result.answer
    assert [t["index"] for t in tokens] == list(range(len(tokens)))
    assert len(tokens) > 1  # forwarded as they arrived, not in one piece
    assert metadata["generator"] == "llm"
    assert metadata["invalid_citations"] == [9]
    assert metadata["citations_removed"] == 1
    request = server.calls_for("cite")[-1]
    assert "tools" not in request  # tool_rounds_left == 0
    assert request["stream"] is True
    assert "[1] JetStream stores" in request["messages"][1]["content"]


async def test_llm_asks_for_a_tool_then_answers_with_its_result(
    harness_for: Any,  # noqa: F811
    client_for: Any,
    server: FakeLLM,
) -> None:
    question = "what is 17*23+4"
    first, _, metadata, _ = await generate_with(
        harness_for,
        client_for("calculator"),
        command(query=question, contexts=[], tool_rounds_left=2),
    )
    [call] = first.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "call_calc_1",
        "calculator",
        {"expression": "17*23+4"},
    )
    assert metadata["tool_calls"] == ["calculator"]
    offered = {t["function"]["name"] for t in server.calls_for("calculator")[-1]["tools"]}
    assert offered == {"calculator", "python", "search"}

    outcome = ToolOutcome(
        call_id=call.id,
        name="calculator",
        ok=True,
        arguments=call.arguments,
        output="17*23+4 = 395",
    )
    second, _, _, _ = await generate_with(
        harness_for,
        client_for("calculator"),
        command(query=question, contexts=[], tool_results=[outcome], tool_rounds_left=1),
    )
    assert second.tool_calls == []
    assert "395" in second.answer
    replay = server.calls_for("calculator")[-1]["messages"]
    assert replay[2]["tool_calls"][0]["id"] == "call_calc_1"
    assert replay[3] == {"role": "tool", "tool_call_id": "call_calc_1", "content": "17*23+4 = 395"}


async def test_tools_are_not_offered_once_the_budget_is_spent(
    harness_for: Any,  # noqa: F811
    client_for: Any,
    server: FakeLLM,
) -> None:
    result, _, metadata, _ = await generate_with(
        harness_for, client_for("greedy"), command(tool_rounds_left=0)
    )
    assert "tools" not in server.calls_for("greedy")[-1]
    assert result.tool_calls == []
    assert (result.generator, metadata["fallback_from"]) == ("extractive", "llm")
    assert "tool budget" in metadata["reason"]
    assert result.answer


@pytest.mark.parametrize(
    ("model", "reason", "requests"),
    [
        ("fail500", "HTTP 500", 3),
        ("hang", "did not answer in time", 3),
        ("empty", "empty answer", 1),
        ("break", "stream broke after 2 tokens", 1),
    ],
)
async def test_failures_fall_back_to_the_extractive_answer_and_say_so(
    harness_for: Any,  # noqa: F811
    client_for: Any,
    server: FakeLLM,
    model: str,
    reason: str,
    requests: int,
) -> None:
    before = len(server.calls_for(model))
    result, tokens, metadata, _ = await generate_with(
        harness_for, client_for(model, timeout_s=0.5), command()
    )
    assert len(server.calls_for(model)) - before == requests  # retried only before a token
    assert result.generator == "extractive"
    assert (metadata["generator"], metadata["fallback_from"]) == ("extractive", "llm")
    assert reason in metadata["reason"]
    assert result.answer and result.citations  # never a silent empty answer
    # what the model streamed stays streamed; the extractive answer is not streamed after it
    assert [t["index"] for t in tokens] == list(range(len(tokens)))
    assert len(tokens) == metadata.get("partial_llm_tokens", 0)
    if model == "break":
        assert metadata["partial_llm_tokens"] == 2


async def test_a_transient_failure_is_retried_before_the_first_token(
    harness_for: Any,  # noqa: F811
    client_for: Any,
    server: FakeLLM,
) -> None:
    result, _, metadata, _ = await generate_with(harness_for, client_for("flaky"), command())
    assert result.generator == "llm"
    assert metadata["attempts"] == 2


async def test_without_an_llm_url_generation_stays_extractive(harness_for: Any) -> None:  # noqa: F811
    async with harness_for(generate.create_router) as h:
        await h.send(command(), sj.cmd_subject(Step.GENERATE))
        result = GenerateResult.model_validate(h.results[0])
        assert result.generator == "extractive"
        assert h.events[0]["data"]["metadata"] == {"generator": "extractive"}


def test_client_settings_come_from_ragbus_llm_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.settings import Settings

    monkeypatch.setenv("RAGBUS_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAGBUS_LLM_MODEL", "qwen")
    monkeypatch.setenv("RAGBUS_LLM_TIMEOUT_S", "7")
    client = LLMClient.from_settings(Settings())
    assert (client.base_url, client.model, client.timeout_s) == ("http://127.0.0.1:9/v1", "qwen", 7)
