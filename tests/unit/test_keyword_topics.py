"""NFCorpus's topic queries as real keyword queries, labelled factual."""

from __future__ import annotations

import json
from pathlib import Path

from bench.keyword_topics import topic_rows


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
