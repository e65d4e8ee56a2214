"""IR metrics as BEIR reports them: nDCG@10 and Recall@k from trec_eval (via pytrec_eval),
MRR@10 computed directly (trec_eval's `recip_rank` has no cut-off), and Complete@10: the share
of queries with every relevant document in the top 10 (for a multi-hop question, all of its
supporting paragraphs: what an answer needs, where Recall@10 gives half credit for half)."""

from __future__ import annotations

from statistics import mean

import pytrec_eval

from bench.evaluation.beir import Qrels

Run = dict[str, dict[str, float]]
"""query id -> document id -> score (higher is better)."""

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "complete@10")


def mrr_at(qrels: Qrels, run: Run, k: int = 10) -> float:
    scores = []
    for qid, relevant in qrels.items():
        ranked = sorted(run.get(qid, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        rank = next((i for i, (doc, _) in enumerate(ranked, 1) if relevant.get(doc, 0) > 0), None)
        scores.append(1.0 / rank if rank else 0.0)
    return mean(scores) if scores else 0.0


def complete_at(qrels: Qrels, run: Run, k: int = 10) -> float:
    """The share of queries (with at least one relevant document) whose every relevant
    document is among the run's first `k`."""
    scores = []
    for qid, judged in qrels.items():
        relevant = {doc for doc, grade in judged.items() if grade > 0}
        if not relevant:
            continue
        ranked = sorted(run.get(qid, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        scores.append(1.0 if relevant <= {doc for doc, _ in ranked} else 0.0)
    return mean(scores) if scores else 0.0


def evaluate(qrels: Qrels, run: Run) -> dict[str, float]:
    """Mean of each metric over every query in `qrels` (a query missing from `run` scores 0)."""
    full_run = {qid: run.get(qid) or {"__none__": 0.0} for qid in qrels}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10,100"})
    per_query = evaluator.evaluate(full_run)

    def avg(measure: str) -> float:
        return mean(per_query[qid][measure] for qid in qrels) if qrels else 0.0

    return {
        "ndcg@10": round(avg("ndcg_cut_10"), 4),
        "recall@10": round(avg("recall_10"), 4),
        "recall@100": round(avg("recall_100"), 4),
        "mrr@10": round(mrr_at(qrels, run, 10), 4),
        "complete@10": round(complete_at(qrels, run, 10), 4),
    }


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
