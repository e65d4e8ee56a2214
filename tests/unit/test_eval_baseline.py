"""The evaluation's vector+sparse baseline: weighted RRF of the two channels' own rankings."""

from __future__ import annotations

import pytest

from bench.evaluation.runner import RRF_K, EvalRun


def test_dense_sparse_baseline_is_weighted_rrf_of_the_two_text_channels() -> None:
    run = EvalRun(
        channels={
            "vector": {"q": {"a": 0.9, "b": 0.5}},
            "sparse": {"q": {"b": 12.0, "c": 3.0}},
            "graph_local": {"q": {"z": 1.0}},  # not part of the baseline
        }
    )
    fused = run.dense_sparse()["q"]
    assert set(fused) == {"a", "b", "c"}
    assert fused["b"] == pytest.approx(0.55 / (RRF_K + 2) + 0.35 / (RRF_K + 1))
    assert fused["a"] == pytest.approx(0.55 / (RRF_K + 1))
    assert sorted(fused, key=lambda d: -fused[d]) == ["b", "a", "c"]


def test_complete_at_ten_needs_every_relevant_document_in_the_top_ten() -> None:
    from bench.evaluation.metrics import complete_at, evaluate

    qrels = {"both": {"a": 1, "b": 1}, "half": {"c": 1, "d": 1}, "none": {"x": 0}}
    run = {
        "both": {"a": 3.0, "b": 2.0, "z": 1.0},
        "half": {"c": 2.0, **{f"filler{i}": 1.0 - i / 100 for i in range(10)}, "d": 0.001},
    }
    assert complete_at(qrels, run, 10) == 0.5  # "none" has no relevant document: not counted
    assert complete_at(qrels, run, 12) == 1.0
    assert evaluate({"both": qrels["both"]}, run)["complete@10"] == 1.0
