"""The model's side of conversations and research (tests' local OpenAI-compatible server): a
follow-up rewritten by the model, a research plan written by it, and what a failing or
empty-handed model leaves (an error the worker turns into the rules' result)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contracts.models import RetrievedChunk
from contracts.sessions import SessionTurn
from engines.classify.llm_rewrite import SYSTEM_PROMPT, RewriteUnusable, llm_rewrite
from engines.critic.llm_decompose import llm_plan
from infra.llm import LLMClient
from tests.fake_llm import FakeLLM

HISTORY = [
    SessionTurn(
        request_id="r1",
        query="Who designed the Skerryvore lighthouse?",
        answer="Alan Stevenson designed it [1].",
        submitted_at=1.0,
    )
]


async def test_the_model_rewrites_a_follow_up_from_the_turns(
    client_for: Callable[..., LLMClient], server: FakeLLM
) -> None:
    before = len(server.calls_for("rewriter"))
    made = await llm_rewrite(client_for("rewriter"), "When was it first lit?", HISTORY)
    assert made == "When was lighthouse first lit?"
    [call] = server.calls_for("rewriter")[before:]
    assert call["messages"][0]["content"] == SYSTEM_PROMPT
    prompt = call["messages"][1]["content"]
    assert "User: Who designed the Skerryvore lighthouse?" in prompt
    assert "Assistant: Alan Stevenson designed it [1]." in prompt


async def test_a_model_without_a_rewrite_or_failing_raises_for_the_rules_to_stand(
    client_for: Callable[..., LLMClient],
) -> None:
    with pytest.raises(RewriteUnusable):
        await llm_rewrite(client_for("empty"), "When was it first lit?", HISTORY)
    with pytest.raises(Exception, match=r"500|Internal"):
        await llm_rewrite(client_for("fail500", max_retries=0), "When was it lit?", HISTORY)


async def test_the_model_plans_research_within_the_limit(
    client_for: Callable[..., LLMClient],
) -> None:
    contexts = [RetrievedChunk(chunk_id="c", document_id="d", text="Pharos light.")]
    planned = await llm_plan(client_for("researcher"), "Who built the Pharos?", contexts, 4)
    # blanks and non-strings dropped, duplicates kept once
    assert planned == ["Who built the Pharos?", "background of: Who built the Pharos?"]
    assert await llm_plan(client_for("researcher"), "Who built the Pharos?", contexts, 1) == [
        "Who built the Pharos?"
    ]
    assert await llm_plan(client_for("empty"), "Who built the Pharos?", contexts, 4) == []
