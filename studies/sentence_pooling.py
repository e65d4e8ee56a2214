"""Sentence vectors pooled from their chunk's forward pass against sentences encoded on their
own (what ingestion stored before): how close the two are, whether they pick the same sentence
for a question, and, on a set with reference answers (MuSiQue), whether extractive generation
still finds the answer.

For each BEIR set: its documents are chunked as the ingest worker chunks them and encoded both
ways with the configured encoder; each question gets its top `CONTEXTS` chunks by dense cosine
(the chunk vectors are the same either way) as contexts, and is answered by the extractive
generator (`engines.generate.extractive`) over the contexts carrying either set of vectors.

    python -m studies.sentence_pooling --set ../shared/data/musique_train100 \\
        --set ../shared/data/nfcorpus --out results/sentence-pooling.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.evaluation.beir import BeirSet, load_beir
from bench.evaluation.critic_loop import answer_hit
from bench.provenance import run_record
from contracts.ingest import DocumentIn
from contracts.models import RetrievedChunk
from engines.generate.extractive import extractive_answer
from infra.retrieval.chunk_vectors import chunk_embeddings, sentence_embeddings
from infra.retrieval.chunking import Chunk, chunk_document
from infra.retrieval.encoder import Encoder, load_encoder
from infra.retrieval.vectors.codec import chunk_vectors
from infra.retrieval.vectors.points import Sentences
from infra.runtime.ingest_producer import load_documents
from infra.settings import Settings

CONTEXTS = 8
"""Contexts per question: what generation gets (`RAGBUS_DEFAULT_TOP_K`)."""


@dataclass(frozen=True)
class Encoded:
    chunks: list[Chunk]
    dense: np.ndarray
    pooled: list[Sentences]
    alone: list[Sentences]


RELEVANT_PER_QUESTION = 10
"""The most relevant documents a question brings in (NFCorpus lists dozens)."""


def pick_documents(beir: BeirSet, queries: Sequence[str], limit: int, seed: int) -> list[str]:
    """Each question's most relevant documents (`RELEVANT_PER_QUESTION`), then others drawn
    at random up to `limit` in all: retrieval has distractors to get wrong."""
    relevant: dict[str, None] = {}
    for query in queries:
        graded = sorted(beir.qrels[query].items(), key=lambda item: (-item[1], item[0]))
        relevant.update((doc, None) for doc, grade in graded[:RELEVANT_PER_QUESTION] if grade > 0)
    others = [d.id for d in load_documents(beir.corpus_path) if d.id not in relevant]
    random.Random(seed).shuffle(others)
    return [*relevant, *others[: max(0, limit - len(relevant))]]


async def encode_both(encoder: Encoder, chunks: list[Chunk]) -> Encoded:
    dense, pooled = await chunk_embeddings(encoder, chunks)
    alone = await sentence_embeddings(encoder, chunks)
    return Encoded(chunks, dense, pooled, alone)


def cosine_summary(encoded: Encoded) -> dict[str, Any]:
    """Cosine between each sentence's pooled and own vector, summarised."""
    pairs = zip(encoded.pooled, encoded.alone, strict=True)
    values = np.concatenate([np.sum(p.vectors * a.vectors, axis=1) for p, a in pairs if a.spans])
    return {
        "sentences": len(values),
        "mean": round(float(values.mean()), 4),
        "p5": round(float(np.percentile(values, 5)), 4),
        "median": round(float(np.median(values)), 4),
        "above_0.9": round(float((values > 0.9).mean()), 4),
        "above_0.8": round(float((values > 0.8).mean()), 4),
    }


def as_context(chunk: Chunk, dense: np.ndarray, sentences: Sentences) -> RetrievedChunk:
    vectors = chunk_vectors(dense, sentences.spans, sentences.vectors)
    return RetrievedChunk(
        chunk_id=chunk.chunk_id, document_id=chunk.document_id, text=chunk.text, vectors=vectors
    )


def top_sentence(query: np.ndarray, rows: Sequence[Sentences]) -> tuple[int, int] | None:
    """(context, sentence) with the highest cosine to the query, None without sentences."""
    best: tuple[float, tuple[int, int]] | None = None
    for context, found in enumerate(rows):
        if found.spans:
            scores = found.vectors @ query
            at = int(np.argmax(scores))
            if best is None or float(scores[at]) > best[0]:
                best = (float(scores[at]), (context, at))
    return best[1] if best else None


async def compare_set(
    encoder: Encoder, beir: BeirSet, queries: list[str], encoded: Encoded
) -> dict[str, Any]:
    """Per question: the same top chunks, the top sentence and the extractive answer both ways."""
    asked = encoder.encode([beir.queries[q] for q in queries])
    same_top = 0
    found: dict[str, list[float]] = {"pooled": [], "alone": []}
    same_answer = 0
    for qid, vector in zip(queries, asked, strict=True):
        top = np.argsort(-(encoded.dense @ vector))[:CONTEXTS]
        pooled = [encoded.pooled[i] for i in top]
        alone = [encoded.alone[i] for i in top]
        same_top += top_sentence(vector, pooled) == top_sentence(vector, alone)
        answers = {}
        for name, rows in (("pooled", pooled), ("alone", alone)):
            contexts = [
                as_context(encoded.chunks[i], encoded.dense[i], r)
                for i, r in zip(top, rows, strict=True)
            ]
            text = beir.queries[qid]
            answer = await extractive_answer(text, contexts, encoder, query_vectors={text: vector})
            answers[name] = answer.text
            if qid in beir.answers:
                found[name].append(answer_hit(answer.text, beir.answers[qid]))
        same_answer += answers["pooled"] == answers["alone"]
    report: dict[str, Any] = {
        "questions": len(queries),
        "top1_sentence_agreement": round(same_top / len(queries), 4),
        "same_extractive_answer": round(same_answer / len(queries), 4),
    }
    if found["pooled"]:
        report["answer_found"] = {k: round(float(np.mean(v)), 4) for k, v in found.items()}
        report["answer_found_flips"] = {
            "pooled_only": sum(p > a for p, a in zip(found["pooled"], found["alone"], strict=True)),
            "alone_only": sum(a > p for p, a in zip(found["pooled"], found["alone"], strict=True)),
        }
    return report


async def measure(
    encoder: Encoder, root: Path, split: str, questions: int, documents: int, settings: Settings
) -> dict[str, Any]:
    beir = load_beir(root, split)
    queries = sorted(beir.queries)[:questions]
    wanted = set(pick_documents(beir, queries, documents, seed=22))
    docs: list[DocumentIn] = [d for d in load_documents(beir.corpus_path) if d.id in wanted]
    chunks = [
        chunk
        for doc in docs
        for chunk in chunk_document(doc, settings.chunk_chars, settings.chunk_overlap_chars)
    ]
    encoded = await encode_both(encoder, chunks)
    return {
        "set": str(root),
        "documents": len(docs),
        "chunks": len(chunks),
        "cosine_pooled_vs_alone": cosine_summary(encoded),
        **await compare_set(encoder, beir, queries, encoded),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", dest="sets", type=Path, action="append", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--documents", type=int, default=2000, help="Per set, at most.")
    parser.add_argument("--out", type=Path, default=Path("results/sentence-pooling.json"))
    args = parser.parse_args(argv)
    settings = Settings()
    encoder = load_encoder(settings, bulk=True)
    reports = [
        asyncio.run(measure(encoder, root, args.split, args.questions, args.documents, settings))
        for root in args.sets
    ]
    used = {"runtime": encoder.runtime, "precision": encoder.precision}
    typed = shlex.join(["python", "-m", "studies.sentence_pooling", *sys.argv[1:]])
    report = {"encoder": used, "sets": reports, "run": {**run_record(), "command": typed}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
