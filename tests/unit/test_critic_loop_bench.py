"""The critic benchmark's arithmetic: first vs last attempt, weak first attempts, per strategy."""

from __future__ import annotations

from pathlib import Path

from bench.evaluation.beir import BeirSet
from bench.evaluation.critic_loop import LoopOutcome, LoopRun, answer_hit, attempts, summarise

BEIR = BeirSet(
    Path("."),
    queries={"q1": "a", "q2": "b", "q3": "c"},
    qrels={"q1": {"d1": 1, "d2": 1}, "q2": {"d5": 1}, "q3": {"d9": 1}},
    answers={"q1": ["Judith Viorst"], "q2": ["1892"]},
)


def attempt(documents: list[str], answer: str = "", **fields: object) -> dict[str, object]:
    return {"documents": documents, "answer": answer, **fields}


def test_answer_hit_ignores_case_and_spacing() -> None:
    assert answer_hit("It was written by  judith viorst [1].", ["Judith Viorst"]) == 1.0
    assert answer_hit("It was written by Ray Cruz [1].", ["Judith Viorst", " "]) == 0.0


def test_retried_requests_are_compared_first_to_last_at_the_first_depth() -> None:
    run = LoopRun(
        outcomes={
            "q1": LoopOutcome(  # weak first attempt; the retry finds d2 and the answer
                [
                    attempt(["d1", "x"], "Ray Cruz", strategy="decompose", confidence=0.4),
                    attempt(["d1", "d2"], "Judith Viorst", confidence=0.7),
                ],
                2000.0,
            ),
            "q2": LoopOutcome(  # strong first attempt; a broaden adds depth that must not count
                [
                    attempt(["d5", "x"], "in 1892", strategy="broaden"),
                    attempt(["y", "z", "d5"], "in 1892"),
                ],
                3000.0,
            ),
            "q3": LoopOutcome([attempt(["d9"], "accepted")], 1000.0),
        },
        failures={"q4": "no answer"},
    )
    report = summarise(run, BEIR)
    assert (report["queries"], report["failed"], report["retried"]) == (4, 1, 2)
    assert report["all_first_vs_last"]["n"] == 3  # q3's one attempt is its first and last
    both = report["retried_first_vs_last"]
    assert both["recall@first_depth"] == {"first": 0.75, "last": 0.5, "rose": 1, "fell": 1}
    assert both["answer_hit"] == {"first": 0.5, "last": 1.0, "rose": 1, "fell": 0}
    weak = report["weak_first_attempts"]
    assert weak["n"] == 1
    assert weak["recall@first_depth"] == {"first": 0.5, "last": 1.0, "rose": 1, "fell": 0}
    assert weak["confidence"] == {"first": 0.4, "last": 0.7, "rose": 1, "fell": 0}
    assert set(report["by_strategy"]) == {"broaden", "decompose"}
    assert report["by_strategy"]["broaden"]["recall@first_depth"]["last"] == 0.0
    assert report["latency_ms"] == {"single_attempt_mean": 1000.0, "retried_mean": 2500.0}


def test_the_final_attempt_reads_its_draft_from_the_answer_events_content() -> None:
    event = {
        "content": "Judith Viorst wrote it [1].",
        "metadata": {
            "attempt_history": [
                {"attempt": 1, "answer": "Ray Cruz [1].", "verdict": "retry"},
                {"attempt": 2, "verdict": "accept"},  # the event's content, not repeated
            ]
        },
    }
    history = attempts(event)
    assert history is not None
    assert [a["answer"] for a in history] == ["Ray Cruz [1].", "Judith Viorst wrote it [1]."]
    assert attempts({"content": "x", "metadata": {}}) is None
