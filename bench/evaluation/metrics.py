"""IR metrics as BEIR reports them: nDCG@10 and Recall@k from trec_eval (via pytrec_eval),
MRR@10 computed directly (trec_eval's `recip_rank` has no cut-off), and Complete@10: the share
of queries with every relevant document in the top 10 (for a multi-hop question, all of its
supporting paragraphs: what an answer needs, where Recall@10 gives half credit for half)."""

from __future__ import annotations

from statistics import mean
from typing import Any

import numpy as np
import pytrec_eval
from scipy import stats

from bench.evaluation.beir import Qrels

Run = dict[str, dict[str, float]]
"""query id -> document id -> score (higher is better)."""

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "complete@10")


def _ranked(run: Run, qid: str, k: int) -> list[str]:
    return [doc for doc, _ in sorted(run.get(qid, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def per_query(qrels: Qrels, run: Run) -> dict[str, dict[str, float]]:
    """Each metric's value for each query of `qrels`, in `qrels`' order (a query missing from
    `run` scores 0; a query without a relevant document has no Complete@10)."""
    full_run = {qid: run.get(qid) or {"__none__": 0.0} for qid in qrels}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10,100"})
    trec = evaluator.evaluate(full_run)
    values: dict[str, dict[str, float]] = {metric: {} for metric in METRICS}
    for qid, judged in qrels.items():
        relevant = {doc for doc, grade in judged.items() if grade > 0}
        top = _ranked(run, qid, 10)
        values["ndcg@10"][qid] = trec[qid]["ndcg_cut_10"]
        values["recall@10"][qid] = trec[qid]["recall_10"]
        values["recall@100"][qid] = trec[qid]["recall_100"]
        rank = next((i for i, doc in enumerate(top, 1) if judged.get(doc, 0) > 0), None)
        values["mrr@10"][qid] = 1.0 / rank if rank else 0.0
        if relevant:
            values["complete@10"][qid] = 1.0 if relevant <= set(top) else 0.0
    return values


def evaluate(qrels: Qrels, run: Run) -> dict[str, float]:
    """Mean of each metric over every query in `qrels` (a query missing from `run` scores 0)."""
    return {
        metric: round(mean(by_query.values()), 4) if by_query else 0.0
        for metric, by_query in per_query(qrels, run).items()
    }


def paired_difference(
    qrels: Qrels, run: Run, baseline: Run, metrics: tuple[str, ...] = ("ndcg@10", "complete@10")
) -> dict[str, dict[str, Any]]:
    """How far `run` is from `baseline` on the same queries, with how sure that is: for each
    metric the mean per-query difference, its 95% interval (a BCa bootstrap over the queries,
    scipy's, seeded) and the two-sided p-value of a paired t-test, as IR evaluation reports a
    difference between two systems (Sakai, "Statistical Significance, Power, and Sample Sizes",
    SIGIR 2016; Urbano et al., SIGIR 2019, found the t-test as reliable as the rest)."""
    ours, theirs = per_query(qrels, run), per_query(qrels, baseline)
    out: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        qids = list(ours[metric])
        diffs = np.array([ours[metric][qid] - theirs[metric][qid] for qid in qids])
        if len(diffs) < 2 or np.ptp(diffs) == 0:  # no spread: nothing to resample or test
            low = high = float(diffs.mean()) if len(diffs) else 0.0
            p_value = 1.0 if low == 0 else 0.0
        else:
            interval = stats.bootstrap(
                (diffs,),
                np.mean,
                confidence_level=0.95,
                n_resamples=2000,
                method="BCa",
                rng=np.random.default_rng(0),
            ).confidence_interval
            low, high = float(interval.low), float(interval.high)
            p_value = float(
                stats.ttest_rel(
                    [ours[metric][qid] for qid in qids], [theirs[metric][qid] for qid in qids]
                ).pvalue
            )
        out[metric] = {
            "difference": round(float(diffs.mean()), 4) if len(diffs) else 0.0,
            "ci95": [round(low, 4), round(high, 4)],
            "p": round(p_value, 4),
            "queries": len(diffs),
            "better": int((diffs > 0).sum()),
            "worse": int((diffs < 0).sum()),
        }
    return out


def document_run(ranking: list[dict[str, object]]) -> dict[str, float]:
    """Chunk ranking -> document ranking: a document ranks where its best chunk ranks."""
    scores: dict[str, float] = {}
    for position, item in enumerate(ranking):
        doc = str(item["document_id"])
        if doc not in scores:
            scores[doc] = float(len(ranking) - position)
    return scores


def write_trec_run(run: Run, path: str, tag: str) -> None:
    """`qid Q0 docid rank score tag`, one line per retrieved document."""
    with open(path, "w", encoding="utf-8") as fh:
        for qid in sorted(run):
            ranked = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))
            for rank, (doc, score) in enumerate(ranked, start=1):
                fh.write(f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n")
