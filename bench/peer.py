"""The peer `ragbus bench` measures ragbus against: a plain in-process hybrid retriever, the
one anyone could write in 60 lines. It encodes the query with the same MiniLM encoder, takes
a numpy top-k over the passage vectors and a bm25s top-k over the passage texts, fuses the two
with reciprocal rank fusion, all in one process, and is loaded by T threads at once.

It indexes exactly the chunks ragbus indexed, read from ragbus's own Qdrant Edge shard. A
running `ragbus up` owns that directory (an embedded store has one owner), so the peer copies
the namespace's shard to a temporary directory, reads every point from the copy, keeps the
dense vectors and texts in memory and deletes the copy.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import bm25s
import numpy as np
from qdrant_edge import EdgeShard, ScrollRequest
from rich.console import Console
from rich.table import Table
from threadpoolctl import threadpool_limits

from bench.cpu import own_cpu_s
from bench.load import percentile
from infra.retrieval.text import stem
from infra.retrieval.vectors.base import DENSE
from infra.retrieval.vectors.edge import CONFIG_FILE
from infra.settings import Settings

COPY_ATTEMPTS = 3
"""A shard being written to while it is copied may lose a file mid-copy: copy again."""
COPY_BLOCK = 1 << 20
BLAS_THREADS = 1
"""The peer's parallelism is its T threads, so `matrix @ q` runs on one BLAS thread, as in
any thread-per-request server: measured at 8 threads over 5,000 chunks on 2 cores, OpenBLAS's
own threads made the peer 47x slower (30 against 1,425 queries/s, encoder left out)."""


class QueryEncoder(Protocol):
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...


def _copy_sparse(source: str, target: str) -> None:
    """Copy a file's data and leave its holes holes: Edge preallocates its mmap files (an
    empty shard is 200 MB long and 150 KB on disk), and a plain copy writes every zero."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size, offset = os.fstat(src.fileno()).st_size, 0
        while offset < size:
            try:
                start = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # no SEEK_DATA here: copy it all
                    shutil.copy2(source, target)
                    return
                break  # nothing but a hole from here on
            offset = os.lseek(src.fileno(), start, os.SEEK_HOLE)
            src.seek(start)
            dst.seek(start)
            for _ in range(start, offset, COPY_BLOCK):
                dst.write(src.read(min(COPY_BLOCK, offset - src.tell())))
        dst.truncate(size)
    shutil.copystat(source, target)


def _scroll(path: Path) -> list[Any]:
    """Every point of the shard at `path`, with its payload and dense vector."""
    shard = EdgeShard.load(str(path))
    points: list[Any] = []
    try:
        offset = None
        while True:
            request = ScrollRequest(
                offset=offset, limit=1024, with_payload=True, with_vector=[DENSE]
            )
            page, offset = shard.scroll(request)
            points.extend(page)
            if offset is None:
                return points
    finally:
        shard.close()


def _stem_words(words: list[str]) -> list[str]:
    return [stem(word) for word in words]  # snowball English, one stemmer per thread


def _tokens(texts: list[str], *, as_ids: bool = True) -> Any:
    """bm25s's own tokenizer with its English stop words; ids + vocabulary, or strings."""
    return bm25s.tokenize(
        texts, stopwords="en", stemmer=_stem_words, return_ids=as_ids, show_progress=False
    )


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the `k` highest scores, best first."""
    if k < len(scores):
        rows = np.argpartition(-scores, k - 1)[:k]
        return rows[np.argsort(-scores[rows], kind="stable")]
    return np.argsort(-scores, kind="stable")


def rrf(rankings: Sequence[Sequence[int]], k: int = 60) -> list[int]:
    """Reciprocal rank fusion: Σ 1/(k + rank) over the rankings that hold a row, best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            scores[row] = scores.get(row, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda row: -scores[row])


class PeerRetriever:
    """Exact dense top-k + bm25s top-k, fused by RRF; `search` may run in many threads."""

    def __init__(
        self,
        ids: list[str],
        texts: list[str],
        vectors: np.ndarray,
        encoder: QueryEncoder,
        *,
        depth: int = 20,
        rrf_k: int = 60,
    ) -> None:
        self.ids = ids
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self.matrix = np.ascontiguousarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)
        self.encoder = encoder
        self.depth = depth
        self.rrf_k = rrf_k
        self.bm25 = bm25s.BM25()
        self.bm25.index(_tokens(texts), show_progress=False)
        self.load_s = 0.0

    @classmethod
    def from_store_copy(
        cls,
        settings: Settings,
        namespace: str,
        *,
        encoder: QueryEncoder | None = None,
        depth: int | None = None,
    ) -> PeerRetriever:
        """Copy `namespace`'s Edge shard, read its chunks and index them; `encoder` defaults
        to the configured one, `depth` (hits per channel) to `RAGBUS_CHANNEL_TOP_K`."""
        started = time.perf_counter()
        if settings.qdrant_url:
            raise ValueError("the peer reads the embedded Edge store; RAGBUS_QDRANT_URL is set")
        source = settings.vectors_path / namespace
        if not (source / CONFIG_FILE).exists():
            raise ValueError(f"namespace {namespace!r} has no vector shard at {source}")
        with tempfile.TemporaryDirectory(prefix="ragbus-peer-") as tmp:
            for attempt in range(1, COPY_ATTEMPTS + 1):
                shutil.rmtree(Path(tmp) / namespace, ignore_errors=True)
                try:
                    shutil.copytree(source, Path(tmp) / namespace, copy_function=_copy_sparse)
                    break
                except OSError:  # shutil.Error included
                    if attempt == COPY_ATTEMPTS:
                        raise
            records = _scroll(Path(tmp) / namespace)
        if not records:
            raise ValueError(f"namespace {namespace!r} holds no chunks")
        if encoder is None:
            from infra.retrieval.encoder import load_encoder

            encoder = load_encoder(settings)
        vectors = np.asarray([record.vector[DENSE] for record in records], dtype=np.float32)
        if encoder.dim != vectors.shape[1]:
            raise ValueError(
                f"{source} holds dim {vectors.shape[1]} vectors, the encoder makes {encoder.dim}"
            )
        ids, texts = [], []
        for record in records:
            payload = record.payload or {}
            ids.append(str(payload.get("chunk_id") or record.id))
            context = " — ".join(str(payload[f]) for f in ("title", "heading") if payload.get(f))
            text = str(payload.get("text", ""))
            texts.append(f"{context}\n{text}" if context else text)  # what ragbus's BM25 sees
        peer = cls(
            ids,
            texts,
            vectors,
            encoder,
            depth=depth or settings.channel_top_k,
            rrf_k=settings.rrf_k,
        )
        peer.load_s = time.perf_counter() - started
        return peer

    def __len__(self) -> int:
        return len(self.ids)

    def search(self, query: str, k: int = 10) -> list[str]:
        """Ids of the `k` best chunks for `query`, best first."""
        vector = np.asarray(self.encoder.encode([query])[0], dtype=np.float32)
        dense = _top(self.matrix @ vector, self.depth)
        sparse: np.ndarray = np.zeros(0, dtype=np.int64)
        tokens = _tokens([query], as_ids=False)[0]
        if tokens:
            scores = np.asarray(self.bm25.get_scores(tokens), dtype=np.float32)
            sparse = _top(scores, self.depth)
            sparse = sparse[scores[sparse] > 0]  # a term-free match is no match
        fused = rrf([dense.tolist(), sparse.tolist()], self.rrf_k)
        return [self.ids[row] for row in fused[:k]]

    def close(self) -> None:
        """Nothing stays open (the copy is gone once loaded): drop the index."""
        self.matrix = np.zeros((0, self.matrix.shape[1]), dtype=np.float32)
        self.ids = []


def _load(
    peer: PeerRetriever, queries: Sequence[str], threads: int, seconds: float
) -> tuple[list[float], list[str]]:
    """`threads` closed loops for `seconds`: each query's latency (ms), and the errors."""
    stop_at = time.monotonic() + seconds
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []

    def loop(worker: int) -> None:
        n = worker
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                peer.search(queries[n % len(queries)])
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            else:
                latencies[worker].append((time.perf_counter() - started) * 1000)
            n += threads

    with ThreadPoolExecutor(threads, thread_name_prefix="peer") as pool:
        list(pool.map(loop, range(threads)))
    return [ms for mine in latencies for ms in mine], errors


def run_peer(
    peer: PeerRetriever,
    queries: Sequence[str],
    *,
    threads: int = 8,
    duration_s: float,
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """Closed-loop load on the peer (one BLAS thread per search); CPU is this process's over
    the measured seconds."""
    if not queries:
        raise ValueError("no queries")
    with threadpool_limits(BLAS_THREADS, user_api="blas"):
        if warmup_s > 0:
            _load(peer, queries, threads, warmup_s)
        cpu0, start = own_cpu_s(), time.perf_counter()
        latencies, errors = _load(peer, queries, threads, duration_s)
        elapsed, cpu_s = time.perf_counter() - start, own_cpu_s() - cpu0
    completed = len(latencies)
    return {
        "system": "peer",
        "threads": threads,
        "chunks": len(peer),
        "requests": completed + len(errors),
        "completed": completed,
        "errors": len(errors),
        "throughput_qps": round(completed / elapsed, 3) if elapsed > 0 else 0.0,
        "latency_ms": {f"p{p}": _round(percentile(latencies, p), 1) for p in (50, 95, 99)},
        "cpu": {
            "cpu_s": round(cpu_s, 3),
            "cpu_ms_per_request": round(cpu_s / max(completed, 1) * 1000, 3),
            "cores_busy": round(cpu_s / elapsed, 3) if elapsed > 0 else None,
            "cores": os.cpu_count(),
        },
        "duration_s": duration_s,
        "elapsed_s": round(elapsed, 3),
        "warmup_s": warmup_s,
        "load_s": round(peer.load_s, 3),
        "sample_errors": errors[:5],
    }


def compare(ragbus_report: dict[str, Any], peer_report: dict[str, Any]) -> dict[str, Any]:
    """ragbus over the peer: throughput, and CPU per request (None where one is missing)."""
    ragbus_cpu = (ragbus_report.get("cpu") or {}).get("server_cpu_ms_per_request")
    peer_cpu = (peer_report.get("cpu") or {}).get("cpu_ms_per_request")
    return {
        "qps_ratio": _ratio(ragbus_report.get("throughput_qps"), peer_report.get("throughput_qps")),
        "cpu_ratio": _ratio(ragbus_cpu, peer_cpu),
    }


def print_comparison(
    ragbus: dict[str, Any], peer: dict[str, Any], ratio: dict[str, Any], console: Console
) -> None:
    """ragbus and the peer side by side, and ragbus's ratio to the peer."""

    def cell(value: float | None, unit: str = "") -> str:
        return "-" if value is None else f"{value:,.1f}{unit}"

    table = Table(title="ragbus and the in-process peer, same corpus, same queries")
    for column in ("", "q/s", "p50 ms", "p95 ms", "CPU ms/request"):
        table.add_column(column, justify="right" if column else "left")
    ragbus_cpu = (ragbus.get("cpu") or {}).get("server_cpu_ms_per_request")
    table.add_row(
        f"ragbus (c={ragbus['concurrency']}, answers and critiques)",
        cell(ragbus["throughput_qps"]),
        cell(ragbus["latency_ms"]["p50"]),
        cell(ragbus["latency_ms"]["p95"]),
        cell(ragbus_cpu),
    )
    table.add_row(
        f"peer ({peer['threads']} threads, retrieves)",
        cell(peer["throughput_qps"]),
        cell(peer["latency_ms"]["p50"]),
        cell(peer["latency_ms"]["p95"]),
        cell(peer["cpu"]["cpu_ms_per_request"]),
    )
    table.add_row(
        "ragbus / peer",
        f"{ratio['qps_ratio']:.3f}x" if ratio["qps_ratio"] is not None else "-",
        "",
        "",
        f"{ratio['cpu_ratio']:.1f}x" if ratio["cpu_ratio"] is not None else "-",
    )
    console.print(table)


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or not bottom else round(top / bottom, 3)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
