"""`ragbus bench-ingest`'s yardstick: the encoder alone over the same chunks, in the same run.

The pipeline's chunks per minute say little on their own: ingestion is bound by the encoder,
so the question is how much of the encoder's own speed the pipeline keeps. After the pipeline
run, the configured encoder is loaded in this process with the same settings, the same
documents are chunked as the ingest worker chunks them, and the same encoder work the worker
asks for is timed once (`chunk_embeddings`: one forward pass per chunk, its sentences pooled,
sentences past the model's window encoded on their own). `ratio_to_encoder` is the pipeline's
chunks per minute over the encoder's.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from contracts.ingest import DocumentIn
from infra.retrieval.chunk_vectors import chunk_embeddings
from infra.retrieval.chunking import Chunk, chunk_document
from infra.retrieval.encoder import Encoding
from infra.settings import Settings

Clock = Callable[[], float]


def ingest_chunks(documents: Sequence[DocumentIn], settings: Settings) -> list[Chunk]:
    """The documents' chunks as the ingest worker makes them (`workers.ingest.indexer`)."""
    return [
        chunk
        for doc in documents
        for chunk in chunk_document(doc, settings.chunk_chars, settings.chunk_overlap_chars)
    ]


async def time_encoder(
    encoder: Encoding, chunks: Sequence[Chunk], clock: Clock = time.perf_counter
) -> dict[str, Any]:
    """The encoder's chunks per minute over `chunks`: the chunk and sentence vectors the
    ingest worker asks it for, in one call (so in passes sorted by length), after one untimed
    chunk (the pipeline's encoder is warm too)."""
    await chunk_embeddings(encoder, chunks[:1])
    started = clock()
    await chunk_embeddings(encoder, chunks)
    seconds = max(clock() - started, 1e-9)
    return {
        "chunks": len(chunks),
        "seconds": round(seconds, 2),
        "chunks_per_minute": round(len(chunks) / seconds * 60, 1),
    }


def compare(pipeline: dict[str, Any], alone: dict[str, Any]) -> dict[str, Any]:
    """`encoder_alone` and `ratio_to_encoder` (pipeline ÷ encoder alone, chunks per minute)."""
    speed = float(alone.get("chunks_per_minute") or 0.0)
    ratio = round(float(pipeline["chunks_per_minute"]) / speed, 3) if speed else None
    return {"encoder_alone": alone, "ratio_to_encoder": ratio}


def encoder_alone(
    settings: Settings,
    documents: Sequence[DocumentIn],
    load: Callable[[Settings], Encoding] | None = None,
    clock: Clock = time.perf_counter,
) -> dict[str, Any]:
    """Load the configured encoder as ingestion's background child does (`load_encoder` for
    bulk work, or `load`) and time it over the documents' chunks; says which runtime,
    precision and threads it ran with."""
    from infra.retrieval.encoder import encoder_threads, load_encoder

    encoder = (load or functools.partial(load_encoder, bulk=True))(settings)
    chunks = ingest_chunks(documents, settings)
    timed = asyncio.run(time_encoder(encoder, chunks, clock))
    return {
        **timed,
        "runtime": getattr(encoder, "runtime", None),
        "precision": getattr(encoder, "precision", None),
        "threads": getattr(encoder, "threads", None) or encoder_threads(settings),
        "pooled_sentences": bool(getattr(encoder, "pools_spans", False)),
    }


def print_comparison(report: dict[str, Any], console: Console) -> None:
    alone, ratio = report["encoder_alone"], report["ratio_to_encoder"]
    console.print(
        f"pipeline {report['chunks_per_minute']:,} chunks/min; the encoder alone "
        f"{alone['chunks_per_minute']:,} chunks/min over the same {alone['chunks']:,} chunks "
        f"({alone['runtime']}, {alone['precision']}, {alone['threads']} threads): "
        f"ratio {ratio if ratio is not None else 'n/a'}"
    )
