"""The sentence-pooling measurement (`studies.sentence_pooling`) on a tiny BEIR set, without a
model: the documents it picks, and a report that pairs each question's two answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.evaluation.beir import load_beir
from infra.retrieval.vectors.points import Sentences
from infra.settings import Settings
from studies.sentence_pooling import measure, pick_documents, top_sentence
from tests.unit.fakes import FakeEncoder


def beir_set(root: Path) -> Path:
    corpus = [
        (
            "d1",
            "Gatun Locks",
            "The Gatun Locks were built by the United States. Work began in 1909.",
        ),
        ("d2", "Panama", "Panama City is the capital of Panama. It lies on the Pacific coast."),
        ("d3", "Suez", "The Suez Canal opened in 1869. It links two seas through Egypt."),
        ("d4", "Kiel", "The Kiel Canal crosses Schleswig-Holstein. It opened in 1895 for ships."),
    ]
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in corpus)
    )
    queries = [
        {"_id": "q1", "text": "When did work on the Gatun Locks begin?", "answers": ["1909"]},
        {"_id": "q2", "text": "When did the Suez Canal open?", "answers": ["1869"]},
    ]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\n")
    return root


def test_the_relevant_documents_come_first_then_others_up_to_the_limit(tmp_path: Path) -> None:
    beir = load_beir(beir_set(tmp_path))
    picked = pick_documents(beir, ["q1", "q2"], limit=3, seed=1)
    assert picked[:2] == ["d1", "d3"] and len(picked) == 3
    assert picked[2] in {"d2", "d4"}
    assert pick_documents(beir, ["q1", "q2"], limit=3, seed=1) == picked  # seeded
    assert pick_documents(beir, ["q1", "q2"], limit=1, seed=1) == ["d1", "d3"]


def test_the_top_sentence_is_the_best_across_contexts() -> None:
    query = np.array([1.0, 0.0], dtype=np.float32)
    rows = [
        Sentences(spans=[(0, 1), (2, 3)], vectors=np.array([[0.6, 0.8], [0.8, 0.6]], np.float32)),
        Sentences(spans=[], vectors=np.zeros((0, 0), np.float32)),
        Sentences(spans=[(0, 1)], vectors=np.array([[0.9, 0.44]], np.float32)),
    ]
    assert top_sentence(query, rows) == (2, 0)
    assert top_sentence(query, rows[1:2]) is None


async def test_an_encoder_without_pooling_gives_the_same_vectors_both_ways(tmp_path: Path) -> None:
    """FakeEncoder cannot pool spans: both sides are the sentences encoded alone, so every
    figure must say they agree (a mispaired question or sentence would not)."""
    report = await measure(
        FakeEncoder(dim=64),  # type: ignore[arg-type]
        beir_set(tmp_path),
        "test",
        questions=2,
        documents=4,
        settings=Settings(data_dir=tmp_path),
    )
    assert (report["documents"], report["chunks"], report["questions"]) == (4, 4, 2)
    assert report["cosine_pooled_vs_alone"]["sentences"] == 8
    assert report["cosine_pooled_vs_alone"]["mean"] == 1.0
    assert report["top1_sentence_agreement"] == report["same_extractive_answer"] == 1.0
    assert report["answer_found"]["pooled"] == report["answer_found"]["alone"]
    assert report["answer_found_flips"] == {"pooled_only": 0, "alone_only": 0}
