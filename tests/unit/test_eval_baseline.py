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
