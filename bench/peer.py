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
from pathlib import Path
from typing import Any, Protocol

import bm25s
import numpy as np
from qdrant_edge import EdgeShard, ScrollRequest
from rich.console import Console
from rich.table import Table

from bench.closed_loop import closed_loop
from infra.retrieval.lexical import stem
from infra.retrieval.vectors.edge import CONFIG_FILE
from infra.retrieval.vectors.points import DENSE
from infra.settings import Settings

COPY_ATTEMPTS = 3
"""A shard being written to while it is copied may lose a file mid-copy: copy again."""
COPY_BLOCK = 1 << 20


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


def copy_tree(source: Path, target: Path) -> Path:
    """Copy a directory a running `ragbus up` keeps writing to, holes kept, again when a file
    vanished mid-copy; `target`."""
    for attempt in range(1, COPY_ATTEMPTS + 1):
        shutil.rmtree(target, ignore_errors=True)
        try:
            shutil.copytree(source, target, copy_function=_copy_sparse)
            return target
        except OSError:  # shutil.Error included
            if attempt == COPY_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def copy_shard(settings: Settings, namespace: str, target: Path) -> Path:
    """A copy of `namespace`'s Edge shard at `target/namespace` (an embedded store has one
    owner, the running `ragbus up`)."""
    if settings.qdrant_url:
        raise ValueError("the peer reads the embedded Edge store; RAGBUS_QDRANT_URL is set")
    source = settings.vectors_path / namespace
    if not (source / CONFIG_FILE).exists():
        raise ValueError(f"namespace {namespace!r} has no vector shard at {source}")
    return copy_tree(source, target / namespace)


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
        source = settings.vectors_path / namespace
        with tempfile.TemporaryDirectory(prefix="ragbus-peer-") as tmp:
            records = _scroll(copy_shard(settings, namespace, Path(tmp)))
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


def run_peer(
    peer: PeerRetriever,
    queries: Sequence[str],
    *,
    threads: int = 8,
    duration_s: float,
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """Closed-loop load on the peer (`bench.closed_loop`: one BLAS thread per search); CPU is
    this process's over the measured seconds."""
    load = closed_loop(
        lambda _worker, query: peer.search(query),
        queries,
        threads=threads,
        duration_s=duration_s,
        warmup_s=warmup_s,
    )
    return {
        "system": "peer",
        "chunks": len(peer),
        **load.figures(),
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "load_s": round(peer.load_s, 3),
    }


def compare(ragbus_report: dict[str, Any], peer_report: dict[str, Any]) -> dict[str, Any]:
    """ragbus over the peer: throughput, CPU per request and p95 latency (None where one is
    missing)."""
    ragbus_cpu = (ragbus_report.get("cpu") or {}).get("server_cpu_ms_per_request")
    peer_cpu = (peer_report.get("cpu") or {}).get("cpu_ms_per_request")
    ragbus_p95 = (ragbus_report.get("latency_ms") or {}).get("p95")
    peer_p95 = (peer_report.get("latency_ms") or {}).get("p95")
    return {
        "qps_ratio": _ratio(ragbus_report.get("throughput_qps"), peer_report.get("throughput_qps")),
        "cpu_ratio": _ratio(ragbus_cpu, peer_cpu),
        "p95_ratio": _ratio(ragbus_p95, peer_p95),
    }


def print_comparison(
    ragbus: dict[str, Any],
    peer: dict[str, Any],
    ratio: dict[str, Any],
    console: Console,
    *,
    title: str = "ragbus and the in-process peer, same corpus, same queries",
    peer_does: str = "retrieves",
) -> None:
    """ragbus and the peer side by side, and ragbus's ratio to the peer."""

    def cell(value: float | None, unit: str = "") -> str:
        return "-" if value is None else f"{value:,.1f}{unit}"

    def times(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}x"

    table = Table(title=title)
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
        f"peer ({peer['threads']} threads, {peer_does})",
        cell(peer["throughput_qps"]),
        cell(peer["latency_ms"]["p50"]),
        cell(peer["latency_ms"]["p95"]),
        cell(peer["cpu"]["cpu_ms_per_request"]),
    )
    table.add_row(
        "ragbus / peer",
        times(ratio["qps_ratio"], 3),
        "",
        times(ratio.get("p95_ratio"), 1),
        times(ratio["cpu_ratio"], 1),
    )
    console.print(table)


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or not bottom else round(top / bottom, 3)
