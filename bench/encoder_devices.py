"""The encoder on each device the machine has: ingestion's encoder work and a query's encoding,
on the CPU and, where CUDA is available, on the GPU.

Ingestion's encoder work is `chunk_embeddings`: every chunk's vector and its sentences' vectors,
in one pass where the model pools spans (MiniLM does). A query's encoding is one `aencode` of
one query, as classification makes it. Each configuration is measured over the same chunks and
queries:
- `cpu`: ingestion's encoder where there is no GPU (`load_encoder(bulk=True)`: torch in bf16
  where the CPU has it, ONNX Runtime in fp32 elsewhere), and on a bf16 CPU `cpu-query` beside
  it, the query path's (ONNX Runtime, fp32); on a machine
  with a GPU, torch on the CPU in fp32 stands in for it (`cpu-torch`), with the same threads;
- `cuda`: what `load_encoder` gives where CUDA is available (torch, passes of
  `GPU_BATCH_SIZE`, fp32 unless `RAGBUS_ENCODER_PRECISION` says otherwise);
- `cuda-bf16` (or `cuda-fp32` when the setting asks for bf16): the same in the other precision.
  Until the H200's figures (`infra.retrieval.encoder.gpu_precision`) `cuda` was bf16, so
  `results/encoder-devices-h200.json` names its third configuration `cuda-fp32`.

A faster encoder that embeds differently would change retrieval, so each configuration's
vectors are compared with the first's: the cosine of each chunk's vector and each sentence's
with the same one's, and how many of each query's ten nearest chunks (by its own vectors) are
the first configuration's ten.

    ragbus bench-encoder ../shared/data/nfcorpus --limit 1000

prints the report and writes `results/encoder-devices.json`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contracts.ingest import DocumentIn
from infra.retrieval.chunk_vectors import chunk_embeddings
from infra.retrieval.chunking import Chunk, chunk_document
from infra.retrieval.encoder import (
    Encoder,
    cuda_available,
    encoder_threads,
    gpu_precision,
    load_encoder,
    load_torch_encoder,
    resolve_precision,
)
from infra.settings import Settings

NEIGHBOURS = 10


@dataclass
class Encoded:
    """One configuration's vectors over the set: chunks, sentences (stacked) and queries."""

    chunks: np.ndarray
    sentences: np.ndarray
    queries: np.ndarray


def configurations(settings: Settings) -> list[tuple[str, Any]]:
    """(name, loader) for each configuration this machine can run, the CPU's first."""
    if not cuda_available():
        cpu = [("cpu", lambda: load_encoder(settings, bulk=True))]
        if resolve_precision(settings.encoder_precision, bulk=True) != resolve_precision(
            settings.encoder_precision, bulk=False
        ):  # a bf16 CPU: ingestion and the query path load the encoder differently
            cpu.append(("cpu-query", lambda: load_encoder(settings)))
        return cpu
    other = "bf16" if gpu_precision(settings.encoder_precision) == "fp32" else "fp32"
    return [
        ("cpu-torch", lambda: load_torch_encoder(settings, "fp32", "cpu")),
        ("cuda", lambda: load_encoder(settings, bulk=True)),
        (f"cuda-{other}", lambda: load_torch_encoder(settings, other, "cuda")),
    ]


def percentile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 3)


async def measure(
    encoder: Encoder, chunks: Sequence[Chunk], queries: Sequence[str]
) -> tuple[dict[str, Any], Encoded]:
    await chunk_embeddings(encoder, chunks[:32])  # warm: kernels, allocator, tokenizer
    await encoder.aencode(list(queries[:8]))
    t0 = time.perf_counter()
    dense, sentences = await chunk_embeddings(encoder, chunks)
    ingest_s = time.perf_counter() - t0
    latencies, rows = [], []
    for query in queries:
        t0 = time.perf_counter()
        rows.append(np.asarray(await encoder.aencode([query]), dtype=np.float32)[0])
        latencies.append((time.perf_counter() - t0) * 1000)
    stacked = [s.vectors for s in sentences if len(s.vectors)]
    report = {
        "runtime": encoder.runtime,
        "precision": encoder.precision,
        "device": getattr(encoder, "device", "cpu"),
        "ingest": {
            "seconds": round(ingest_s, 3),
            "chunks_per_min": round(len(chunks) / ingest_s * 60),
            "sentences": sum(len(s.vectors) for s in sentences),
        },
        "query_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
    }
    return report, Encoded(
        np.asarray(dense, dtype=np.float32),
        np.concatenate(stacked) if stacked else np.zeros((0, encoder.dim), np.float32),
        np.stack(rows),
    )


def cosines(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Row-wise cosine of two sets of the same vectors (both L2-normalised)."""
    if not len(a):
        return {}
    found = np.einsum("ij,ij->i", a, b)
    return {
        "min": round(float(found.min()), 5),
        "p1": round(float(np.percentile(found, 1)), 5),
        "mean": round(float(found.mean()), 5),
    }


def agreement(base: Encoded, other: Encoded) -> dict[str, Any]:
    """How alike `other`'s vectors are to `base`'s, and the nearest chunks they find."""
    k = min(NEIGHBOURS, len(base.chunks))
    ours = np.argsort(-(base.queries @ base.chunks.T), axis=1)[:, :k]
    theirs = np.argsort(-(other.queries @ other.chunks.T), axis=1)[:, :k]
    overlap = [len(set(a) & set(b)) / k for a, b in zip(ours, theirs, strict=True)]
    return {
        "chunk_cosine": cosines(base.chunks, other.chunks),
        "sentence_cosine": cosines(base.sentences, other.sentences),
        "query_cosine": cosines(base.queries, other.queries),
        f"top{k}_overlap": round(float(np.mean(overlap)), 4),
    }


@dataclass
class TestSet:
    documents: int
    chunks: list[Chunk]
    queries: list[str]


def load_set(root: Path, limit: int, queries: int, settings: Settings) -> TestSet:
    """The first `limit` documents of a BEIR set, chunked as ingestion does, and its first
    `queries` queries (the chunks' openings where it has none)."""
    corpus = root / "corpus.jsonl" if root.is_dir() else root
    chunks: list[Chunk] = []
    documents = 0
    with corpus.open() as lines:  # BEIR: {"_id", "title", "text"} a line
        for line in lines:
            if documents >= limit:
                break
            row = json.loads(line)
            doc = DocumentIn(id=row["_id"], title=row.get("title", ""), text=row["text"])
            documents += 1
            chunks += chunk_document(doc, settings.chunk_chars, settings.chunk_overlap_chars)
    texts: list[str] = []
    path = corpus.parent / "queries.jsonl"
    if path.is_file():
        with path.open() as lines:
            for line in lines:
                if len(texts) >= queries:
                    break
                texts.append(json.loads(line)["text"])
    return TestSet(documents, chunks, texts or [chunk.text[:80] for chunk in chunks[:queries]])


async def run(root: Path, limit: int, queries: int, rounds: int = 1) -> dict[str, Any]:
    settings = Settings()
    found = load_set(root, limit, queries, settings)
    chunks, asked = found.chunks, found.queries
    print(f"{len(chunks)} chunks, {len(asked)} queries", file=sys.stderr)
    reports: dict[str, Any] = {}
    encoded: dict[str, Encoded] = {}
    loaded = [(name, loader()) for name, loader in configurations(settings)]
    for done in range(rounds):  # in turn, so that no configuration has the device warmer
        for name, encoder in loaded:
            print(
                f"{name}: {encoder.runtime} {encoder.precision}, round {done + 1}", file=sys.stderr
            )
            reports[name], encoded[name] = await measure(encoder, chunks, asked)
    first = next(iter(encoded))
    for name in list(encoded)[1:]:
        reports[name]["vs_" + first] = agreement(encoded[first], encoded[name])
        ratio = (
            reports[name]["ingest"]["chunks_per_min"] / reports[first]["ingest"]["chunks_per_min"]
        )
        reports[name]["ingest"]["vs_" + first] = round(ratio, 2)
    return {
        "set": str(root),
        "documents": found.documents,
        "chunks": len(chunks),
        "queries": len(asked),
        "cpu_threads": encoder_threads(settings),
        "rounds": rounds,
        "configurations": reports,
    }
