"""The rule-based follow-up rewrite: pronouns, possessives, ellipsis, bare questions, and
questions that must be left alone."""

from __future__ import annotations

import pytest

from contracts.sessions import SessionTurn
from engines.classify.rewrite import rewrite, subject_of


def turn(query: str, answer: str | None = None, standalone: str | None = None) -> SessionTurn:
    return SessionTurn(
        request_id="r1", query=query, standalone_query=standalone, answer=answer, submitted_at=1.0
    )


@pytest.mark.parametrize(
    ("history", "follow_up", "standalone"),
    [
        (
            [turn("When was the Halvorsen Bridge opened?", "It opened in 1932 [1].")],
            "Who was its chief engineer?",
            "Who was the chief engineer of the Halvorsen Bridge?",
        ),
        (
            [turn("Who designed the Halvorsen Bridge?", "It was designed by Ingrid Dahl [1].")],
            "Where was she born?",
            "Where was Ingrid Dahl born?",
        ),
        (
            [turn("What are the side effects of statins?")],
            "What about aspirin?",
            "What are the side effects of aspirin?",
        ),
        (
            [turn("What are the side effects of statins?")],
            "Do they interact with grapefruit juice?",
            "Do statins interact with grapefruit juice?",
        ),
        (
            [turn("Does green tea reduce the risk of breast cancer?")],
            "How much of it should I drink?",
            "How much of green tea should I drink?",
        ),
        (
            [turn("Who wrote Folk Songs?", "Luciano Berio wrote it [1].")],
            "What are his best known works?",
            "What are the best known works of Luciano Berio?",
        ),
        (
            [turn("What is the capital of Norway?")],
            "And its population?",
            "The population of Norway?",
        ),
        ([turn("Is coffee bad for your heart?")], "Why?", "Why (coffee)?"),
        (
            [turn("Which city did the Enola Gay bomb?")],
            "What about the death toll?",  # an aspect of the same subject, not a new subject
            "What about the death toll of the Enola Gay?",
        ),
    ],
)
def test_a_follow_up_becomes_standalone(
    history: list[SessionTurn], follow_up: str, standalone: str
) -> None:
    made = rewrite(follow_up, history)
    assert (made.standalone, made.method) == (standalone, "rules")


def test_the_latest_turn_that_names_something_is_the_antecedent() -> None:
    history = [
        turn("When was the Halvorsen Bridge opened?"),
        turn("Who was its chief engineer?"),  # still running: no standalone question yet
    ]
    assert rewrite("How long is it?", history).standalone == "How long is the Halvorsen Bridge?"
    history[1] = turn(
        "Who was its chief engineer?",
        standalone="Who was the chief engineer of the Tamar Viaduct?",
    )
    assert rewrite("How long is it?", history).standalone == "How long is the Tamar Viaduct?"


@pytest.mark.parametrize(
    "question",
    [
        "What is diabetes?",
        "Which foods contain the most vitamin K?",
        "Is that true for processed meat?",  # a demonstrative before a predicate: not guessed
    ],
)
def test_a_standalone_question_is_left_alone(question: str) -> None:
    made = rewrite(question, [turn("What are the side effects of statins?")])
    assert (made.standalone, made.method) == (question, "none")


def test_without_history_nothing_is_rewritten() -> None:
    assert rewrite("Who was its chief engineer?", []).method == "none"


def test_the_subject_of_a_question() -> None:
    assert subject_of("What are the health effects of red meat?") == "red meat"
    assert subject_of("Is coffee bad for your heart?") == "coffee"
    assert subject_of("When was the Halvorsen Bridge opened?") == "the Halvorsen Bridge"
    assert subject_of("Why?") is None
