"""NFCorpus's topic queries as real keyword queries, and a question set's questions, labelled
factual."""

from __future__ import annotations

import json
from pathlib import Path

from studies.factual_questions import question_rows
from studies.keyword_topics import topic_rows


def test_a_splits_lower_case_short_queries_become_factual_rows(tmp_path: Path) -> None:
    queries = {
        "PLAIN-1": "bad breath",
        "PLAIN-2": "Can Diet Protect Against Kidney Cancer?",  # a title, not a topic
        "PLAIN-3": "American Diabetes Association",  # capitalised: a name
        "PLAIN-4": "long term effects of a low fat vegan diet",  # a phrase, not a topic
        "PLAIN-5": "tempeh",
    }
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items())
    )
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "dev.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{i}\tMED-1\t1\n" for i in ("PLAIN-5", "PLAIN-1", "PLAIN-5", "PLAIN-2"))
        + "PLAIN-3\tMED-2\t1\nPLAIN-4\tMED-2\t1\n"
    )
    rows = topic_rows(tmp_path, "dev")
    assert [(r["text"], r["label"]) for r in rows] == [
        ("tempeh", "factual"),
        ("bad breath", "factual"),
    ]
    assert {r["source"] for r in rows} == {"nfcorpus:dev:topic"}


def test_every_question_of_a_split_becomes_a_factual_row_once(tmp_path: Path) -> None:
    beir = tmp_path / "musique_train100"
    (beir / "qrels").mkdir(parents=True)
    questions = {"2hop_1": "Who founded the city where X was born?", "2hop_2": "When did Y end?"}
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in questions.items())
    )
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n2hop_2\tp1\t1\n2hop_1\tp2\t1\n2hop_2\tp3\t1\n"
    )
    rows = question_rows(beir, "test")
    assert [(r["text"], r["label"]) for r in rows] == [
        ("When did Y end?", "factual"),
        ("Who founded the city where X was born?", "factual"),
    ]
    assert {r["source"] for r in rows} == {"musique_train100:test:question"}
