from __future__ import annotations

import pytest

from contracts.models import RetrievedChunk, ToolOutcome
from engines.critic.scoring import WEIGHTS, Scores, claims, score_answer
from engines.critic.verdict import judge_answer, judge_tools, keyword_query
from tests.unit.fakes import BrokenEncoder, FakeEncoder, with_stored_vectors


def ctx(cid: str, text: str) -> RetrievedChunk:
    return RetrievedChunk(chunk_id=cid, document_id="d-" + cid, text=text)


CONTEXTS = [
    ctx("a", "JetStream stores messages in streams on disk. Consumers acknowledge messages."),
    ctx("b", "Redis keeps the saga state of every request in one JSON document."),
    ctx("c", "The orchestrator applies each transition atomically with a Lua script."),
]
QUERY = "Where does JetStream store messages?"


def test_confidence_formula() -> None:
    assert WEIGHTS == {
        "grounding": 0.35,
        "citation_validity": 0.15,
        "coverage": 0.25,
        "retrieval": 0.25,
    }
    assert Scores(1, 1, 1, 1).confidence == pytest.approx(1.0)
    assert Scores(0.5, 1.0, 0.4, 0.2).confidence == pytest.approx(
        0.35 * 0.5 + 0.15 + 0.25 * 0.4 + 0.25 * 0.2
    )


def test_claims_keep_markers_with_their_sentence() -> None:
    found = claims("Streams live on disk [1]. Redis keeps state. [2] It uses Lua [2, 3].")
    assert [(c.text, c.markers) for c in found] == [
        ("Streams live on disk.", [1]),
        ("Redis keeps state.", [2]),
        ("It uses Lua.", [2, 3]),
    ]


async def test_a_grounded_answer_scores_high_and_is_accepted() -> None:
    scores = await score_answer(
        QUERY,
        "JetStream stores messages in streams on disk [1].",
        {1: "a"},
        CONTEXTS,
        FakeEncoder(),
    )
    assert scores.grounding == pytest.approx(1.0)
    assert scores.citation_validity == 1.0
    assert scores.coverage == 1.0
    assert 0.0 < scores.retrieval <= 1.0
    verdict = judge_answer(QUERY, scores, len(CONTEXTS), attempts_left=1, accept_at=0.55)
    assert verdict.verdict == "accept"
    assert verdict.strategy is None


async def test_uncited_sentences_are_ungrounded_and_bad_markers_invalid() -> None:
    scores = await score_answer(
        QUERY,
        "JetStream stores messages in streams on disk. Redis keeps the saga state [9].",
        {9: "missing-chunk"},
        CONTEXTS,
        FakeEncoder(),
    )
    assert scores.grounding == 0.0
    assert scores.citation_validity == 0.0


async def test_no_contexts_scores_zero_retrieval() -> None:
    scores = await score_answer(QUERY, "I could not find anything about it.", {}, [], FakeEncoder())
    assert (scores.retrieval, scores.grounding, scores.citation_validity) == (0.0, 0.0, 0.0)
    verdict = judge_answer(QUERY, scores, contexts=0, attempts_left=1, accept_at=0.55)
    assert (verdict.verdict, verdict.strategy) == ("retry", "broaden")


def test_spent_attempts_give_a_low_confidence_verdict_with_its_reason() -> None:
    verdict = judge_answer(QUERY, Scores(0.1, 0.1, 0.1, 0.1), 5, attempts_left=0, accept_at=0.55)
    assert verdict.verdict == "low_confidence"
    assert verdict.strategy is None
    assert verdict.reasons == ["retrieval was weak"]


def test_a_confident_answer_that_leaves_part_of_the_question_open_follows_up() -> None:
    incomplete = Scores(1.0, 1.0, 0.5, 0.8)  # confidence 0.825, a third of the terms missing
    verdict = judge_answer(QUERY, incomplete, 5, 1, accept_at=0.55, sub_queries=["a b"])
    assert (verdict.verdict, verdict.strategy) == ("retry", "decompose")
    assert judge_answer(QUERY, incomplete, 5, 1, accept_at=0.55).verdict == "accept"
    spent = judge_answer(QUERY, incomplete, 5, 0, accept_at=0.55, sub_queries=["a b"])
    assert spent.verdict == "accept"


@pytest.mark.parametrize(
    ("scores", "contexts", "strategy"),
    [
        (Scores(0.9, 1.0, 0.9, 0.1), 5, "broaden"),  # weak retrieval
        (Scores(0.9, 1.0, 0.9, 0.8), 1, "broaden"),  # few contexts
        (Scores(0.3, 1.0, 0.2, 0.6), 5, "rebalance"),  # terms missing, retrieval fine
        (Scores(0.1, 0.5, 0.8, 0.6), 5, "rewrite"),  # answer not backed by its citations
    ],
)
def test_retry_strategy_follows_the_weakest_signal(
    scores: Scores, contexts: int, strategy: str
) -> None:
    verdict = judge_answer(QUERY, scores, contexts, attempts_left=1, accept_at=0.95)
    assert (verdict.verdict, verdict.strategy) == ("retry", strategy)
    assert verdict.reasons
    if strategy == "rewrite":
        assert verdict.rewritten_query == "jetstream store messages"
    else:
        assert verdict.rewritten_query is None


def test_missing_terms_with_a_bridge_to_follow_decompose_the_question() -> None:
    follow_ups = ["Judith Viorst university", "Ray Cruz university"]
    for scores in (Scores(0.9, 1.0, 0.2, 0.6), Scores(0.6, 1.0, 0.6, 0.4)):
        verdict = judge_answer(
            QUERY, scores, 5, attempts_left=1, accept_at=0.95, sub_queries=follow_ups
        )
        assert (verdict.verdict, verdict.strategy) == ("retry", "decompose")
        assert verdict.sub_queries == follow_ups
        assert "follow up" in verdict.reasons[0]


def test_weak_retrieval_broadens_even_with_bridges() -> None:
    verdict = judge_answer(
        QUERY, Scores(0.9, 1.0, 0.9, 0.1), 5, attempts_left=1, accept_at=0.95, sub_queries=["x y"]
    )
    assert verdict.strategy == "broaden"
    assert verdict.sub_queries == []


def test_keyword_query_dedupes_by_stem() -> None:
    assert keyword_query("How do I store stored messages, and the Messages?") == "store messages"
    assert keyword_query("what is it?") == "what is it?"


def test_tool_answers_are_judged_by_their_outcomes() -> None:
    ok = [ToolOutcome(call_id="1", name="calculator", ok=True, output="2 + 2 = 4")]
    failed = [ToolOutcome(call_id="1", name="calculator", ok=False, error="division by zero")]
    accepted = judge_tools(ok, attempt=1, attempts_left=1)
    assert (accepted.verdict, accepted.confidence) == ("accept", 0.9)
    retry = judge_tools(failed, attempt=1, attempts_left=1)
    assert (retry.verdict, retry.strategy) == ("retry", "rewrite")
    final = judge_tools(failed, attempt=2, attempts_left=1)
    assert final.verdict == "accept"
    assert "calculator failed" in final.reasons[0]


async def test_stored_vectors_score_as_encoding_would_without_an_encoder() -> None:
    encoder = FakeEncoder()
    answer = (  # extractive: every claim is a sentence of the context it cites
        "JetStream stores messages in streams on disk [1]. "
        "Redis keeps the saga state of every request in one JSON document [2]."
    )
    citations = {1: "a", 2: "b"}
    encoded = await score_answer(QUERY, answer, citations, CONTEXTS, encoder)
    stored = await score_answer(
        QUERY,
        answer,
        citations,
        [with_stored_vectors(c, encoder) for c in CONTEXTS],
        BrokenEncoder(),
        query_vector=encoder.encode([QUERY])[0],
    )
    for name, value in encoded.as_dict().items():
        assert stored.as_dict()[name] == pytest.approx(value, abs=2e-3), name
