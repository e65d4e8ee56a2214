"""The evaluation's vector+sparse baseline: weighted RRF of the two channels' own rankings."""

from __future__ import annotations

import pytest

from bench.evaluation.metrics import Run, evaluate, paired_difference, per_query
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
    qrels = {"both": {"a": 1, "b": 1}, "half": {"c": 1, "d": 1}, "none": {"x": 0}}
    run = {
        "both": {"a": 3.0, "b": 2.0, "z": 1.0},
        "half": {"c": 2.0, **{f"filler{i}": 1.0 - i / 100 for i in range(10)}, "d": 0.001},
    }
    # "none" has no relevant document: it has no Complete@10 and is not counted
    assert per_query(qrels, run)["complete@10"] == {"both": 1.0, "half": 0.0}
    assert evaluate(qrels, run)["complete@10"] == 0.5
    assert per_query(qrels, run)["mrr@10"] == {"both": 1.0, "half": 1.0, "none": 0.0}


def _ranking(position: int) -> dict[str, float]:
    """The relevant document at `position` (1-based), behind fillers."""
    docs = [f"filler{i}" for i in range(position - 1)] + ["rel", "after"]
    return {doc: float(len(docs) - i) for i, doc in enumerate(docs)}


def _runs(n: int, better: set[int]) -> tuple[dict[str, dict[str, int]], Run, Run]:
    """`n` queries with one relevant document each; the baseline ranks it 2nd to 5th, the run
    first on the queries in `better` and two places lower on the others."""
    qrels = {f"q{i}": {"rel": 1} for i in range(n)}
    baseline = {f"q{i}": _ranking(2 + i % 4) for i in range(n)}
    run = {f"q{i}": _ranking(1 if i in better else 4 + i % 4) for i in range(n)}
    return qrels, run, baseline


def test_a_run_better_on_every_query_is_surely_better() -> None:
    qrels, run, baseline = _runs(40, better=set(range(40)))
    ndcg = paired_difference(qrels, run, baseline)["ndcg@10"]
    assert ndcg["difference"] > 0.2
    assert 0 < ndcg["ci95"][0] <= ndcg["difference"] <= ndcg["ci95"][1]
    assert ndcg["p"] < 0.001
    assert (ndcg["better"], ndcg["worse"], ndcg["queries"]) == (40, 0, 40)


def test_a_run_better_on_half_the_queries_and_as_much_worse_on_the_rest_is_not_better() -> None:
    # pairs of queries: the run ranks the relevant document one place higher on the one and
    # one place lower on the other, at positions that vary from pair to pair
    pairs = [(2 + k % 4, 3 + k % 4) for k in range(20)]
    qrels = {f"q{i}": {"rel": 1} for i in range(40)}
    baseline = {f"q{2 * k + j}": _ranking(pair[j]) for k, pair in enumerate(pairs) for j in (0, 1)}
    run = {f"q{2 * k + j}": _ranking(pair[1 - j]) for k, pair in enumerate(pairs) for j in (0, 1)}
    ndcg = paired_difference(qrels, run, baseline)["ndcg@10"]
    assert ndcg["difference"] == 0.0
    assert ndcg["ci95"][0] < 0 < ndcg["ci95"][1]
    assert ndcg["p"] > 0.05
    assert (ndcg["better"], ndcg["worse"]) == (20, 20)


def test_the_same_run_differs_by_nothing() -> None:
    qrels, _, baseline = _runs(10, better=set())
    assert paired_difference(qrels, baseline, baseline)["ndcg@10"] == {
        "difference": 0.0,
        "ci95": [0.0, 0.0],
        "p": 1.0,
        "queries": 10,
        "better": 0,
        "worse": 0,
    }
