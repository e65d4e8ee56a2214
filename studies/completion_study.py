"""Score completion, measured without a stack: dense+BM25 convex fusion with each channel's own
list, and with each channel's scores for the chunks only the other listed
(`engines.search.completion`).

Each BEIR set's documents are chunked as ingestion chunks them (`chunk_document`) and encoded
with the configured encoder (`chunk_embeddings`); every chunk gets its exact dense score and a
BM25 score (k1 1.2, b 0.75, over the product's analyzer: close to, not the same as, Qdrant's
sparse index); each channel lists its best `DEPTH` chunks, as `RAGBUS_CHANNEL_TOP_K` does.
Then the product's own fusion functions (`engines.fuse.rrf`) fuse the two lists by the prior's
weights (0.55 / 0.35) three ways, scored at the document level (nDCG@10, Recall@10):
- `rrf`: reciprocal ranks, the runner's plain-hybrid baseline;
- `convex, own lists`: what convex fusion did before completion;
- `convex, completed`: each list completed with the channel's scores for the other's chunks.

    python -m studies.completion_study --set ../shared/data/nfcorpus:dev \\
        --set ../shared/data/nfcorpus:test --set ../shared/data/musique_train100:test \\
        --cache /tmp/completion-cache --out results/completion-study.json

Encoding is the slow part (minutes for NFCorpus on two cores); `--cache` keeps each corpus's
chunk vectors for the next run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import pickle
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np

from bench.evaluation.beir import load_beir
from bench.evaluation.metrics import Run, document_run, evaluate
from bench.evaluation.runner import DENSE_SPARSE_WEIGHTS
from bench.provenance import run_record
from contracts.enums import Channel
from contracts.models import RetrievedChunk
from engines.fuse.rrf import weighted_convex, weighted_rrf
from infra.retrieval.chunk_vectors import chunk_embeddings
from infra.retrieval.chunking import chunk_document
from infra.retrieval.encoder import Encoder, load_encoder
from infra.retrieval.lexical import analyze
from infra.runtime.ingest_producer import load_documents
from infra.settings import Settings

DEPTH = 20
"""What a channel lists (`RAGBUS_CHANNEL_TOP_K`)."""
WEIGHTS = {Channel(name): weight for name, weight in DENSE_SPARSE_WEIGHTS.items()}
K1, B = 1.2, 0.75


class Corpus:
    """A set's chunks: their documents, their dense vectors and a BM25 index."""

    def __init__(self, documents: list[str], texts: list[str], dense: np.ndarray) -> None:
        self.documents, self.dense, self.texts = documents, dense, texts
        tokens = [analyze(text) for text in texts]
        self.size = len(tokens)
        mean = sum(map(len, tokens)) / max(self.size, 1)
        df = Counter(term for row in tokens for term in set(row))
        self.idf = {t: math.log(1 + (self.size - n + 0.5) / (n + 0.5)) for t, n in df.items()}
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for i, row in enumerate(tokens):
            norm = K1 * (1 - B + B * len(row) / mean)
            for term, tf in Counter(row).items():
                self.postings[term].append((i, tf * (K1 + 1) / (tf + norm)))

    def bm25(self, query: str) -> np.ndarray:
        return self.weighted_bm25(dict.fromkeys(analyze(query), 1.0))

    def weighted_bm25(self, terms: dict[str, float]) -> np.ndarray:
        """BM25 with each query term's contribution scaled by its weight."""
        scores = np.zeros(self.size, dtype=np.float32)
        for term, weight in terms.items():
            for i, part in self.postings.get(term, ()):
                scores[i] += weight * self.idf[term] * part
        return scores


async def encode(root: Path, encoder: Encoder, cache: Path | None) -> Corpus:
    cached = cache / f"{root.name}.pkl" if cache else None
    if cached is not None and cached.exists():
        with cached.open("rb") as fh:
            data = pickle.load(fh)  # this script's own file
    else:
        chunks = [c for d in load_documents(root / "corpus.jsonl") for c in chunk_document(d)]
        dense, _ = await chunk_embeddings(encoder, chunks)
        data = {
            "doc": [c.document_id for c in chunks],
            "text": [c.embedding_text for c in chunks],
            "dense": np.asarray(dense, dtype=np.float32),
        }
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            with cached.open("wb") as fh:
                pickle.dump(data, fh)
    return Corpus(data["doc"], data["text"], data["dense"])


def _refs(
    corpus: Corpus, ids: np.ndarray, scores: np.ndarray, completion: bool
) -> list[RetrievedChunk]:
    return [
        RetrievedChunk(
            chunk_id=str(i),
            document_id=corpus.documents[i],
            score=float(scores[i]),
            rank=0 if completion else rank,
            completion=completion,
        )
        for rank, i in enumerate(ids, start=1)
    ]


ChannelLists = dict[Channel, list[RetrievedChunk]]


def channel_lists(
    corpus: Corpus, dense: np.ndarray, sparse: np.ndarray
) -> tuple[ChannelLists, ChannelLists]:
    """Each channel's best `DEPTH` chunks by its scores, as it lists them, and the same lists
    completed with the channel's scores for the chunks only the other listed."""
    top_dense = np.argsort(-dense)[:DEPTH]
    top_sparse = [i for i in np.argsort(-sparse)[:DEPTH] if sparse[i] > 0]
    own = {
        Channel.VECTOR: _refs(corpus, top_dense, dense, False),
        Channel.SPARSE: _refs(corpus, np.asarray(top_sparse, dtype=int), sparse, False),
    }
    in_dense, in_sparse = set(top_dense.tolist()), set(top_sparse)
    only_sparse = np.asarray([i for i in top_sparse if i not in in_dense], dtype=int)
    only_dense = np.asarray([i for i in top_dense.tolist() if i not in in_sparse], dtype=int)
    completed = {
        Channel.VECTOR: own[Channel.VECTOR] + _refs(corpus, only_sparse, dense, True),
        Channel.SPARSE: own[Channel.SPARSE] + _refs(corpus, only_dense, sparse, True),
    }
    return own, completed


def fuse_three_ways(
    corpus: Corpus, query: str, vector: np.ndarray
) -> dict[str, list[RetrievedChunk]]:
    own, completed = channel_lists(corpus, corpus.dense @ vector, corpus.bm25(query))
    depth = 2 * DEPTH
    return {
        "rrf": weighted_rrf(own, WEIGHTS, top_k=depth),
        "convex, own lists": weighted_convex(own, WEIGHTS, top_k=depth),
        "convex, completed": weighted_convex(completed, WEIGHTS, top_k=depth),
    }


def _run(chunks: list[RetrievedChunk]) -> dict[str, float]:
    return document_run([{"document_id": c.document_id, "score": c.score} for c in chunks])


async def study(root: Path, split: str, encoder: Encoder, cache: Path | None) -> dict[str, Any]:
    beir = load_beir(root, split)
    corpus = await encode(root, encoder, cache)
    queries = [q for q in beir.queries if q in beir.qrels]
    vectors = np.asarray(await encoder.aencode([beir.queries[q] for q in queries]), np.float32)
    runs: dict[str, Run] = defaultdict(dict)
    for qid, vector in zip(queries, vectors, strict=True):
        for rule, fused in fuse_three_ways(corpus, beir.queries[qid], vector).items():
            runs[rule][qid] = _run(fused)
    scored = {rule: evaluate(beir.qrels, run) for rule, run in runs.items()}
    return {
        "set": root.name,
        "split": split,
        "queries": len(queries),
        "chunks": corpus.size,
        "rules": scored,
    }


Study = Callable[[Path, str, Encoder, Path | None], Coroutine[Any, Any, dict[str, Any]]]


def study_main(description: str, study: Study) -> None:
    """The command line of a study: each `--set` scored by `study`, printed rule by rule, and
    the reports written to `--out` with the depth, the weights and the run."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--set", action="append", required=True, help="BEIR_DIR[:SPLIT]")
    parser.add_argument("--cache", type=Path, help="keep each corpus's chunk vectors here")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    encoder = load_encoder(Settings())
    reports = []
    for spec in args.set:
        root, _, split = spec.partition(":")
        report = asyncio.run(study(Path(root), split or "test", encoder, args.cache))
        reports.append(report)
        print(f"{report['set']} {report['split']} ({report['queries']} queries)", file=sys.stderr)
        for rule, metrics in report["rules"].items():
            print(f"  {rule:52} nDCG@10 {metrics['ndcg@10']:.4f}", file=sys.stderr)
    if args.out:
        body = {
            "depth": DEPTH,
            "weights": {c.value: w for c, w in WEIGHTS.items()},
            "sets": reports,
        }
        report = {**body, "run": run_record()}
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


def main() -> None:
    study_main(__doc__.splitlines()[0], study)


if __name__ == "__main__":
    main()
