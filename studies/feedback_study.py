"""Pseudo-relevance feedback before fusion, measured without a stack: does searching again with
what the first hits say lift dense+BM25 convex fusion, and where does it hurt?

Built on `completion_study` (the same chunks, encoder, BM25 and the product's fusion functions,
each channel's list completed as the product completes it). For each query:
- `rrf`: the plain-hybrid baseline; `convex, completed`: what the product's two text channels
  give now;
- `+ dense feedback`: the query's vector moved toward the mean vector of the three best fused
  chunks, q + 0.5 · mean (Rocchio, 1971; as a dense retriever's feedback, Li et al., "Pseudo
  Relevance Feedback with Deep Language Models and Dense Retrievers: Successes and Pitfalls",
  ACM TOIS 2023), and the vector channel searched again with it;
- `+ BM25 feedback`: RM3 (Abdul-Jaleel et al., TREC 2004; Anserini's defaults): the ten terms
  most likely in the ten best BM25 chunks, weighted by those chunks' scores, mixed half and half
  with the query's own terms, and the sparse channel searched again with them;
- `+ both`, and `+ both, unless the query names a document's title`: an entity a document is
  titled by (`infra.retrieval.entities.title_norms`, as the bridge reads titles) marks a
  question about particular things, where feedback drifts toward the first one named.

The feedback functions are the product's (`engines.search.feedback`); their settings (three
chunks, 0.5; RM3's ten and ten and 0.5) are the literature's,
chosen before any set was scored; NFCorpus dev and MuSiQue were read first, NFCorpus test and
Cranfield after.

    python -m studies.feedback_study --set ../shared/data/nfcorpus:dev \\
        --set ../shared/data/musique_train100:test --set ../shared/data/nfcorpus:test \\
        --set /tmp/cranfield:test --cache /tmp/completion-cache --out results/feedback-study.json
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.evaluation.beir import load_beir
from bench.evaluation.metrics import Run, evaluate, paired_difference
from engines.fuse.rrf import weighted_convex, weighted_rrf
from engines.search import feedback
from infra.retrieval.encoder import Encoder
from infra.retrieval.entities import title_norms
from studies.completion_study import (
    DEPTH,
    WEIGHTS,
    Corpus,
    _run,
    channel_lists,
    encode,
    study_main,
)


def rm3_terms(corpus: Corpus, query: str, sparse: np.ndarray) -> dict[str, float]:
    """The product's RM3 (`engines.search.feedback.rm3`) over the ten best BM25 chunks."""
    top = [i for i in np.argsort(-sparse)[: feedback.RM3_CHUNKS] if sparse[i] > 0]
    return feedback.rm3(query, [(corpus.texts[i], float(sparse[i])) for i in top])


def names_a_title(query: str, titles: set[str]) -> bool:
    """A span of the query is, normalised, a document's title (or its head)."""
    return any(span in titles for span in feedback.title_candidates(query))


def rules_for(corpus: Corpus, query: str, vector: np.ndarray, titled: bool) -> dict[str, Any]:
    dense, sparse = corpus.dense @ vector, corpus.bm25(query)
    own, completed = channel_lists(corpus, dense, sparse)
    depth = 2 * DEPTH
    first = weighted_convex(completed, WEIGHTS, top_k=depth)
    best = [int(chunk.chunk_id) for chunk in first[: feedback.FEEDBACK_CHUNKS]]
    dense_fb = corpus.dense @ feedback.moved(vector, list(corpus.dense[best]))
    sparse_fb = corpus.weighted_bm25(rm3_terms(corpus, query, sparse))

    def again(d: np.ndarray, s: np.ndarray) -> list[Any]:
        return weighted_convex(channel_lists(corpus, d, s)[1], WEIGHTS, top_k=depth)

    both = again(dense_fb, sparse_fb)
    pool = first[: feedback.RM3_CHUNKS]
    fused_terms = feedback.rm3(query, [(corpus.texts[int(c.chunk_id)], c.score) for c in pool])
    both_fused = again(dense_fb, corpus.weighted_bm25(fused_terms))
    return {
        "rrf": weighted_rrf(own, WEIGHTS, top_k=depth),
        "convex, completed": first,
        "+ dense feedback": again(dense_fb, sparse),
        "+ BM25 feedback": again(dense, sparse_fb),
        "+ both": both,
        "+ both, unless the query names a document's title": first if titled else both,
        "+ both, RM3 from the fused chunks, unless titled": first if titled else both_fused,
    }


async def study(root: Path, split: str, encoder: Encoder, cache: Path | None) -> dict[str, Any]:
    beir = load_beir(root, split)
    corpus = await encode(root, encoder, cache)
    titles: set[str] = set()
    with (root / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if title := json.loads(line).get("title"):
                titles.update(title_norms(title))
    queries = [q for q in beir.queries if q in beir.qrels]
    vectors = np.asarray(await encoder.aencode([beir.queries[q] for q in queries]), np.float32)
    runs: dict[str, Run] = defaultdict(dict)
    titled = 0
    for qid, vector in zip(queries, vectors, strict=True):
        names = names_a_title(beir.queries[qid], titles)
        titled += names
        for rule, fused in rules_for(corpus, beir.queries[qid], vector, names).items():
            runs[rule][qid] = _run(fused)
    baseline = runs["convex, completed"]
    return {
        "set": root.name,
        "split": split,
        "queries": len(queries),
        "queries_naming_a_title": titled,
        "rules": {rule: evaluate(beir.qrels, run) for rule, run in runs.items()},
        "against_convex_completed": {
            rule: paired_difference(beir.qrels, run, baseline, ("ndcg@10",))["ndcg@10"]
            for rule, run in runs.items()
            if rule != "convex, completed"
        },
    }


def main() -> None:
    study_main(__doc__.splitlines()[0], study)


if __name__ == "__main__":
    main()
