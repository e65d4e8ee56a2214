"""`ragbus bench-ingest`'s encoder-alone yardstick (`bench.ingest`): its report, with a fake
encoder and a fake clock (no timing)."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import numpy as np
from rich.console import Console

from bench.ingest import compare, encoder_alone, ingest_chunks, print_comparison
from contracts.ingest import DocumentIn
from infra.retrieval.chunking import chunk_document
from infra.settings import Settings
from tests.unit.fakes import FakeEncoder

TEXT = " ".join(f"Sentence number {n} talks about canal locks and ships." for n in range(30))
DOCUMENTS = [DocumentIn(id=f"d{i}", title=f"Doc {i}", text=TEXT) for i in range(3)]


class CountingEncoder(FakeEncoder):
    runtime = "fake"
    precision = "fp32"

    def __init__(self) -> None:
        super().__init__(dim=16)
        self.texts: list[str] = []

    async def aencode(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return await super().aencode(texts)


def clock(*readings: float) -> Iterator[float]:
    return iter(readings)


def test_the_chunks_are_the_ingest_workers(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, chunk_chars=300, chunk_overlap_chars=50)
    chunks = ingest_chunks(DOCUMENTS, settings)
    assert chunks == [c for d in DOCUMENTS for c in chunk_document(d, 300, 50)]
    assert len(chunks) > len(DOCUMENTS)


def test_the_encoder_alone_is_timed_over_the_same_chunks(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, chunk_chars=300, encoder_threads=3)
    encoder = CountingEncoder()
    readings = clock(100.0, 130.0)
    alone = encoder_alone(settings, DOCUMENTS, load=lambda _: encoder, clock=lambda: next(readings))
    chunks = ingest_chunks(DOCUMENTS, settings)
    assert alone == {
        "chunks": len(chunks),
        "seconds": 30.0,
        "chunks_per_minute": round(len(chunks) * 2.0, 1),
        "runtime": "fake",
        "precision": "fp32",
        "threads": 3,
        "pooled_sentences": False,
    }
    # the warm-up chunk, then every chunk's embedding text (this encoder cannot pool: the
    # sentences come in a second call, as ingestion asks)
    assert chunks[0].embedding_text in encoder.texts
    assert {c.embedding_text for c in chunks} <= set(encoder.texts)


def test_the_ratio_is_the_pipeline_over_the_encoder_and_is_printed() -> None:
    pipeline = {"chunks": 120, "chunks_per_minute": 900.0}
    alone = {"chunks": 120, "seconds": 4.0, "chunks_per_minute": 1800.0, "runtime": "torch"}
    report = {**pipeline, **compare(pipeline, {**alone, "precision": "bf16", "threads": 2})}
    assert report["ratio_to_encoder"] == 0.5
    assert report["encoder_alone"]["chunks_per_minute"] == 1800.0
    out = StringIO()
    print_comparison(report, Console(file=out, width=200))
    assert "ratio 0.5" in out.getvalue() and "1,800.0 chunks/min" in out.getvalue()
    assert compare(pipeline, {"chunks_per_minute": 0})["ratio_to_encoder"] is None
